package serviceentry

import (
	"fmt"
	"os"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/filewatch"
)

// CheckDir reads the ServiceEntries and WorkloadEntries of dir (a
// directory, file or glob, read as a registry's path is) once, offline,
// for `meshfed validate --config-dir`: inForce are the objects a registry
// would serve, rejected every object, host and endpoint it would refuse,
// each naming its file:line. Without a registry there is no domain, so
// the domain rule is not checked; a file that cannot be read or is not
// YAML is a rejection naming the file.
func CheckDir(dir string) (inForce []Object, rejected []model.Rejection) {
	var objs []Object
	for _, f := range filewatch.Files(dir) {
		data, err := os.ReadFile(f)
		if err != nil {
			rejected = append(rejected, model.Rejection{Subject: f, Reason: err.Error()})
			continue
		}
		docs, err := Parse(f, data)
		if err != nil {
			rejected = append(rejected, model.Rejection{Reason: err.Error()})
			continue
		}
		objs = append(objs, docs...)
	}
	m := &merger{common: registries.Common{}, lastGood: map[string]Object{}}
	_, rej := m.mergeObjects(objs)
	seen := map[string]bool{}
	for _, o := range objs {
		key := o.Kind + "/" + o.Namespace + "/" + o.Name
		if o.Err == nil && !seen[key] {
			inForce = append(inForce, o)
		}
		seen[key] = true
	}
	return inForce, append(rejected, rej...)
}

// Describe is how `meshfed validate` lists an object in force:
// "<Kind> <namespace>/<name> (<file>:<line>)".
func Describe(o Object) string { return fmt.Sprintf("%s (%s)", describe(o), o.Source) }
