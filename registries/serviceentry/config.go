package serviceentry

import (
	"errors"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/filewatch"
)

// Config is the `serviceentry:` block of a clusters.yaml entry.
type Config struct {
	// Path of a YAML file of ServiceEntries and WorkloadEntries
	// (multi-document, kubectl-style), or a directory (every *.yaml, *.yml
	// and *.json file directly in it, hidden files left out) or a glob
	// ("istio/*.yaml"; filepath.Match syntax) of such files. Relative
	// paths are resolved against the directory of clusters.yaml.
	Path string `yaml:"path"`
	// Paths: more files, directories or globs, as Path.
	Paths []string `yaml:"paths"`
	// Settle: a file written in place is read only once it has not changed
	// for this long (default 1s); a file replaced by a rename is read at
	// once.
	Settle registries.Duration `yaml:"settle,omitempty"`
}

// ApplyDefaults implements registries.Config: settle 1s.
func (c *Config) ApplyDefaults() {
	if c.Settle == 0 {
		c.Settle = registries.Duration(filewatch.DefaultSettle)
	}
}

// Validate implements registries.Config.
func (c *Config) Validate() error { return c.patterns().Validate() }

func (c *Config) patterns() filewatch.Patterns {
	return filewatch.Patterns{Path: c.Path, Paths: c.Paths}
}

// ResolvePaths makes Path and Paths absolute against dir, the directory of
// clusters.yaml.
func (c *Config) ResolvePaths(dir string) { filewatch.Resolve(dir, &c.Path, c.Paths) }

// Files implements registries.FileReferrer for `meshfed validate`: every
// file matched now must be YAML, and every ServiceEntry and WorkloadEntry
// in it valid; each problem names its file:line and object. (Hosts
// outside the domain and unusable endpoints are rejected alone at run
// time and listed on /debug/conflictz.)
func (c *Config) Files() []registries.FileRef {
	return c.patterns().FileRefs(func(path string, data []byte) error {
		objs, err := Parse(path, data)
		if err != nil {
			return err
		}
		var errs []error
		for _, o := range objs {
			if o.Err != nil {
				errs = append(errs, o.Err)
			}
		}
		return errors.Join(errs...)
	})
}

func init() {
	registries.Register(registries.Kind{Name: "serviceentry", NewConfig: func() registries.Config { return new(Config) }, Collectors: Collectors})
}
