package file

import (
	"log/slog"
	"path/filepath"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/filewatch"
)

// Config is the `file:` block of a clusters.yaml entry: path, paths and
// settle (filewatch.Options, whose ApplyDefaults, Validate and
// ResolvePaths it has) naming services files. See Registry.
type Config struct {
	filewatch.Options `yaml:",inline"`
}

var (
	_ registries.Config       = (*Config)(nil)
	_ registries.PathResolver = (*Config)(nil)
	_ registries.FileReferrer = (*Config)(nil)
)

// Files implements registries.FileReferrer: every services file matched
// now, each of which must parse (its problems carry its own
// file:line:col). A plain path that does not exist is listed (and fails
// to read); a directory or glob matching nothing lists nothing.
func (c *Config) Files() []registries.FileRef {
	return c.Patterns().FileRefs(func(path string, b []byte) error {
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
	r := &Registry{common: common}
	r.patterns, r.timing, r.log = c.Watched(log)
	return r, nil
}
