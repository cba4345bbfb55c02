package serviceentry

import (
	"testing"
	"time"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/filewatch"
	"github.com/meshfed/meshfed/registries/registrytest"
)

func TestConfigGood(t *testing.T) {
	t.Parallel()
	abs := func(rel string) string { return registrytest.ConfigPath(t, rel) } // relative paths resolve against the file's directory
	registrytest.CheckGoodConfigs[Config](t, []registrytest.GoodConfig[Config]{
		{File: "good-files.yaml", Want: Config{Options: filewatch.Options{
			Path: abs("istio/entries.yaml"), Paths: []string{abs("istio/*.yaml")}, Settle: registries.Duration(3 * time.Second),
		}}},
		{File: "good-minimal.yaml", Want: Config{Options: filewatch.Options{
			Paths: []string{abs("istio/*.yaml")}, Settle: registries.Duration(filewatch.DefaultSettle),
		}}},
		{File: "good-kubernetes.yaml", Want: Config{
			Options:    filewatch.Options{Settle: registries.Duration(filewatch.DefaultSettle)},
			Kubernetes: &Kubernetes{Clusters: []string{"east", "west"}, Namespaces: []string{"shop"}},
		}},
	}, nil)
}

func TestConfigBad(t *testing.T) {
	t.Parallel()
	registrytest.BadConfigs[Config](t, []registrytest.BadConfig{
		{File: "bad-no-path.yaml", Key: "path", Err: "is required (or paths)"},
		{File: "bad-glob.yaml", Key: "path", Err: "not a valid glob"},
		{File: "bad-both.yaml", Key: "kubernetes", Err: "path/paths and kubernetes are exclusive"},
		{File: "bad-no-clusters.yaml", Key: "kubernetes.clusters", Err: "missing required key"},
		{File: "bad-clusters-twice.yaml", Key: "kubernetes.clusters[1]", Err: "is named twice"},
		{File: "bad-namespace.yaml", Key: "kubernetes.namespaces[1]", Err: "is empty"},
		{File: "bad-unknown-key.yaml", Key: "settel", Err: `unknown key (did you mean "settle"?)`},
	})
}
