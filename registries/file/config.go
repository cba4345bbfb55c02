package file

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/meshfed/meshfed/registries"
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
func (c *Config) Validate() error {
	if c.Path == "" && len(c.Paths) == 0 {
		return registries.FieldErr("path", "is required (or paths)")
	}
	for i, p := range c.patterns() {
		key := "path"
		if c.Path == "" || i > 0 {
			key = "paths[" + strconv.Itoa(i-boolInt(c.Path != "")) + "]"
		}
		if p == "" {
			return registries.FieldErr(key, "is empty")
		}
		if _, err := filepath.Match(p, ""); err != nil {
			return registries.FieldErr(key, "%q is not a valid glob: %v", p, err)
		}
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// patterns returns Path and Paths, in that order.
func (c *Config) patterns() []string {
	var out []string
	if c.Path != "" {
		out = append(out, c.Path)
	}
	return append(out, c.Paths...)
}

// ResolvePaths makes Path and Paths absolute against dir, the directory of
// clusters.yaml.
func (c *Config) ResolvePaths(dir string) {
	abs := func(p string) string {
		if p != "" && !filepath.IsAbs(p) {
			return filepath.Join(dir, p)
		}
		return p
	}
	c.Path = abs(c.Path)
	for i := range c.Paths {
		c.Paths[i] = abs(c.Paths[i])
	}
}

// Files implements registries.FileReferrer: every services file matched
// now, each of which must parse (its problems carry its own
// file:line:col). A plain path that does not exist is listed (and fails
// to read); a directory or glob matching nothing lists nothing.
func (c *Config) Files() []registries.FileRef {
	var refs []registries.FileRef
	for i, p := range c.patterns() {
		key := "path"
		if c.Path == "" || i > 0 {
			key = "paths[" + strconv.Itoa(i-boolInt(c.Path != "")) + "]"
		}
		files := []string{p}
		if isGlob(p) {
			files = globFiles(p)
		} else if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			files, _ = dirFiles(p)
		}
		for _, f := range files {
			refs = append(refs, registries.FileRef{Key: key, Path: f, Check: func(b []byte) error {
				_, err := Parse(filepath.Base(f), b, registries.Common{Name: "check", Kind: "file"})
				return err
			}})
		}
	}
	return refs
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
	var patterns []string
	for _, p := range c.patterns() {
		patterns = append(patterns, filepath.Clean(p))
	}
	return &Registry{
		common:   common,
		patterns: patterns,
		log:      log.With("path", strings.Join(c.patterns(), ",")),
		quiet:    debounceQuiet,
		maxWait:  debounceMax,
		settle:   settle,
		interval: resyncInterval,
	}, nil
}
