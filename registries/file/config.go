package file

import (
	"path/filepath"

	"github.com/meshfed/meshfed/registries"
)

// Config is the `file:` block of a clusters.yaml entry.
type Config struct {
	// Path of the services file. Relative paths are resolved against the
	// directory of clusters.yaml.
	Path string `yaml:"path"`
	// Settle: a file written in place is read only once it has not changed
	// for this long (default 1s); a file replaced by a rename is read at
	// once. See Registry.
	Settle registries.Duration `yaml:"settle,omitempty"`
}

// ApplyDefaults implements registries.Config: settle 1s.
func (c *Config) ApplyDefaults() {
	if c.Settle == 0 {
		c.Settle = registries.Duration(DefaultSettle)
	}
}

// Validate implements registries.Config.
func (c *Config) Validate() error {
	if c.Path == "" {
		return registries.FieldErr("path", "is required")
	}
	return nil
}

// ResolvePaths makes Path absolute against dir, the directory of
// clusters.yaml.
func (c *Config) ResolvePaths(dir string) {
	if c.Path != "" && !filepath.IsAbs(c.Path) {
		c.Path = filepath.Join(dir, c.Path)
	}
}

// Files implements registries.FileReferrer: the services file, which must
// parse (its problems carry its own file:line:col).
func (c *Config) Files() []registries.FileRef {
	if c.Path == "" {
		return nil
	}
	path := c.Path
	return []registries.FileRef{{Key: "path", Path: path, Check: func(b []byte) error {
		_, err := Parse(filepath.Base(path), b, registries.Common{Name: "check", Kind: "file"})
		return err
	}}}
}

func init() {
	registries.Register(registries.Kind{Name: "file", NewConfig: func() registries.Config { return new(Config) }, Collectors: Collectors})
}
