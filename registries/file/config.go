package file

import (
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/filewatch"
)

// Config is the `file:` block of a clusters.yaml entry.
type Config struct {
	// Path of the services file, or a directory (every *.yaml, *.yml and
	// *.json file directly in it, hidden files left out) or a glob
	// ("conf.d/*.yaml"; filepath.Match syntax) of services files. Relative
	// paths are resolved against the directory of clusters.yaml.
	Path string `yaml:"path"`
	// Paths: more files, directories or globs, as Path. The registry
	// serves the services of every file matched by Path and Paths.
	Paths []string `yaml:"paths"`
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
func (c *Config) Validate() error { return c.patterns().Validate() }

// patterns returns Path and Paths.
func (c *Config) patterns() filewatch.Patterns {
	return filewatch.Patterns{Path: c.Path, Paths: c.Paths}
}

// ResolvePaths makes Path and Paths absolute against dir, the directory of
// clusters.yaml.
func (c *Config) ResolvePaths(dir string) { filewatch.Resolve(dir, &c.Path, c.Paths) }

// Files implements registries.FileReferrer: every services file matched
// now, each of which must parse (its problems carry its own
// file:line:col). A plain path that does not exist is listed (and fails
// to read); a directory or glob matching nothing lists nothing.
func (c *Config) Files() []registries.FileRef {
	return c.patterns().FileRefs(func(path string, b []byte) error {
		_, err := Parse(filepath.Base(path), b, registries.Common{Name: "check", Kind: "file"})
		return err
	})
}

func init() {
	registries.Register(registries.Kind{Name: "file", NewConfig: func() registries.Config { return new(Config) }, Collectors: Collectors})
}

// New implements registries.Config. It does no I/O: a missing file is not
// an error at start (see Registry).
func (c *Config) New(common registries.Common, log *slog.Logger) (registries.Registry, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	settle := c.Settle.Std()
	if settle <= 0 {
		settle = DefaultSettle
	}
	return &Registry{
		common:   common,
		patterns: c.patterns().Cleaned(),
		log:      log.With("path", strings.Join(c.patterns().All(), ",")),
		quiet:    filewatch.DefaultQuiet,
		maxWait:  filewatch.DefaultMaxWait,
		settle:   settle,
		interval: filewatch.DefaultInterval,
		confirm:  DefaultConfirmAfter,
	}, nil
}
