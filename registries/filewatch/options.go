package filewatch

import (
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/registries"
)

// Options is the `path`/`paths`/`settle` part of the config block of a
// kind that reads files through a Watch (file, serviceentry). A block
// embeds it with `yaml:",inline"`, so its keys are the block's own, and
// gets its ApplyDefaults and ResolvePaths (and Validate, unless the block
// has its own).
type Options struct {
	// Path of a file, or a directory (every *.yaml, *.yml and *.json file
	// directly in it, hidden files left out) or a glob ("conf.d/*.yaml";
	// filepath.Match syntax) of files. Relative paths are resolved against
	// the directory of clusters.yaml.
	Path string `yaml:"path"`
	// Paths: more files, directories or globs, as Path. The registry
	// serves what every file matched by Path and Paths holds.
	Paths []string `yaml:"paths"`
	// Settle: a file written in place is read only once it has not changed
	// for this long (default 1s); a file replaced by a rename is read at
	// once.
	Settle registries.Duration `yaml:"settle,omitempty"`
}

// ApplyDefaults implements registries.Config's part: settle 1s.
func (o *Options) ApplyDefaults() {
	if o.Settle == 0 {
		o.Settle = registries.Duration(DefaultSettle)
	}
}

// Validate checks Path and Paths (Patterns.Validate).
func (o *Options) Validate() error { return o.Patterns().Validate() }

// ResolvePaths makes Path and Paths absolute against dir, the directory of
// clusters.yaml (registries.PathResolver).
func (o *Options) ResolvePaths(dir string) { Resolve(dir, &o.Path, o.Paths) }

// Patterns returns Path and Paths.
func (o *Options) Patterns() Patterns { return Patterns{Path: o.Path, Paths: o.Paths} }

// Watched returns what a registry built from the block watches: its
// patterns cleaned (for Watch.Patterns), the Watch timing with its settle
// time (the other waits default), and log naming its paths.
func (o *Options) Watched(log *slog.Logger) ([]string, Timing, *slog.Logger) {
	p := o.Patterns()
	return p.Cleaned(), Timing{Settle: o.Settle.Std()}, log.With("path", strings.Join(p.All(), ","))
}

// Timing of a Watch: how long it waits before reading. Zero fields mean
// the defaults (Default*; Confirm: DefaultConfirmAfter).
type Timing struct {
	Quiet, MaxWait, Settle, Interval, Confirm time.Duration
}

// CountReads returns a Watch.Read that counts every read of registry's
// files in reloads (labels registry, result: ok or error).
func CountReads(reloads *prometheus.CounterVec, registry string) func(ok bool) {
	return func(ok bool) {
		result := "ok"
		if !ok {
			result = "error"
		}
		reloads.WithLabelValues(registry, result).Inc()
	}
}
