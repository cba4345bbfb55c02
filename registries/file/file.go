// Package file is the `file` registry: services declared in YAML files
// (VM workloads, brownfield hosts), served as <name>.<domain>. It watches
// one file, or a directory or glob of files (one team, one file), re-reads
// only the files that changed and republishes the merge of all of them;
// a file that is missing or invalid keeps its last good services and is
// reported as Degraded.
package file

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/filewatch"
)

// DefaultSettle: a file written in place is read only once it has not
// changed for this long (filewatch.DefaultSettle).
const DefaultSettle = filewatch.DefaultSettle

// DefaultConfirmAfter: an update that removed endpoints is sent again once
// the files stayed unchanged for this long, confirming it to the
// aggregator's hold-down (filewatch.DefaultConfirmAfter).
const DefaultConfirmAfter = filewatch.DefaultConfirmAfter

// Registry publishes the services of one file, or of every file a
// directory or glob matches, through the shared watch loop
// (registries/filewatch).
//
// Run reads the files at start, then again after changes (it watches their
// directories, so editors that replace a file, `mv` and Kubernetes
// ConfigMap symlink swaps are seen) and every 30s. A file replaced by a
// rename is read 50 ms after the last event; a file written in place is
// read only once it stopped changing for the settle time (file.settle,
// default 1s), and a file whose size or modification time changed while
// it was read keeps its previous state and is retried after another
// settle period: a half-written file is never published.
//
// Only files whose identity, size or modification time changed since
// their last read are read again (the 30s re-read reads every file but
// parses only those whose bytes changed); every other file keeps its
// converted services as they are, so an edit costs the parse of the file
// that changed. The shard's state is the merge of every file's services
// in path order, published with Replace when it changed. A service
// declared in two files is served from the first file in path order; the
// later declaration is a Rejection naming both files. A file matched by a
// directory or glob that disappears takes its services with it.
//
// A file (or plain path) that is missing or unreadable is reported as
// Degraded (an outage); one that does not parse as Degraded with
// Status.Invalid (not an outage: outage.policy expire never withdraws it),
// with the error (file:line:col, key); either way that file's last good
// services stay published while the other files update, Run keeps
// watching and recovers when the file is fixed. An update that removed
// endpoints (and the first of a Run) is sent again once the files stayed
// unchanged for DefaultConfirmAfter, confirming it to the hold-down. A
// Registry holds no state between Run calls.
type Registry struct {
	common   registries.Common
	patterns []string // files, directories or globs; cleaned
	log      *slog.Logger
	// timing: zero fields are filewatch's defaults, DefaultSettle and
	// DefaultConfirmAfter (tests set them).
	timing filewatch.Timing
	// parsed, when set (tests), is called after each parse of a file.
	parsed func(path string)
}

// SetConfirmAfter sets how long the files must stay unchanged before an
// update that removed endpoints (and the first of a Run) is sent again,
// confirming it to the hold-down: DefaultConfirmAfter as Config.New
// builds the Registry, and when d is zero. Call it before Run.
func (r *Registry) SetConfirmAfter(d time.Duration) { r.timing.Confirm = d }

// Run implements registries.Registry. It fails only when the file watcher
// cannot be created or breaks.
func (r *Registry) Run(ctx context.Context, sink registries.Sink) error {
	return r.watch().Run(ctx, sink)
}

// watch returns the shared watch loop (registries/filewatch) over the
// services files.
func (r *Registry) watch() *filewatch.Watch[[]model.Service] {
	return &filewatch.Watch[[]model.Service]{
		Patterns: r.patterns,
		Parse: func(path string, data []byte) ([]model.Service, error) {
			return Parse(filepath.Base(path), data, r.common)
		},
		Merge:  r.merge,
		Shard:  r.common.Shard(),
		Log:    r.log,
		Timing: r.timing,
		Read:   filewatch.CountReads(reloads, r.common.Name),
		Parsed: r.parsed,
	}
}

// merge returns the services of every file in path order, a service
// declared again in a later file rejected.
func (r *Registry) merge(files []filewatch.File[[]model.Service]) ([]model.Service, []model.Rejection) {
	services := []model.Service{}
	var rejected []model.Rejection
	first := map[string]string{} // hostname → file
	for _, f := range files {
		for _, svc := range f.Value {
			if at, dup := first[svc.Hostname]; dup {
				rejected = append(rejected, model.Rejection{
					Registry: r.common.Name, Host: svc.Hostname, Subject: "service in " + f.Path,
					Reason: "also declared in " + at + ", which is served (the first file in path order wins)",
				})
				continue
			}
			first[svc.Hostname] = f.Path
			services = append(services, svc)
		}
	}
	return services, rejected
}
