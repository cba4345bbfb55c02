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
	"slices"
	"strings"
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
// ConfigMap symlink swaps are seen) and every 30s. A file renamed into
// place from its own directory is read at once; a file written in place
// is read only once it stopped changing for the settle time (file.settle,
// default 1s); other events are read 50 ms after the last one
// (filewatch.Watch). A file whose size or modification time changed
// while it was read keeps its previous state and is retried after
// another settle period: a half-written file is never published.
//
// Only files whose identity, size or modification time changed since
// their last read are read again (the 30s re-read reads every file but
// parses only those whose bytes changed), within a file only the bytes
// between the head and tail it shares with its last read are cut into
// services again (split.go, resplit), and only the services whose bytes
// changed are parsed again, whatever the file's YAML style (items.go);
// every other service keeps its converted value as it
// is, so an edit costs the parse of the services it changed. The shard's
// state holds one Publisher key per hostname: an edit compares the keys
// of the services it changed, and the state is published when one did.
// A service declared in two files is served from the first file in path
// order; the later declaration is a Rejection naming both files. A file
// matched by a directory or glob that disappears takes its services with
// it.
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
	// work counts what the Runs did (Work).
	work work
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

// Work returns what this Registry's Runs have done so far: services
// parsed from YAML, services converted and validated, and Publisher keys
// compared (one key per service). An edit of one service in a file of
// any size parses, converts and compares one (a service that only moved
// to another line is converted again, not parsed). For tests and
// diagnostics.
func (r *Registry) Work() (parsed, converted, compared uint64) {
	return r.work.parsed.Load(), r.work.converted.Load(), r.work.compared.Load()
}

// watch returns the shared watch loop (registries/filewatch) over the
// services files: each Run keeps every file's services by the hash of
// their bytes (items.go) and publishes one key per hostname.
func (r *Registry) watch() *filewatch.Watch[[]*svcItem] {
	k := &keyed{r: r, caches: map[string]*itemCache{}, files: map[string][]*svcItem{}, owners: map[string][]decl{}}
	return &filewatch.Watch[[]*svcItem]{
		Patterns: r.patterns,
		// resplit cuts again the part of a read that differs from the
		// bytes of the last one.
		ParseEdit: func(path string, data []byte, e filewatch.Edit) ([]*svcItem, error) {
			cache := k.caches[path]
			if cache == nil {
				cache = &itemCache{}
				k.caches[path] = cache
			}
			return parseItems(filepath.Base(path), data, e, r.common, cache, &r.work)
		},
		Publish: k.publish,
		Equal:   slices.Equal[[]*svcItem],
		Shard:   r.common.Shard(),
		Log:     r.log,
		Timing:  r.timing,
		Read:    filewatch.CountReads(reloads, r.common.Name),
		Parsed:  r.parsed,
	}
}

// keyed is one Run's state under one Publisher key per hostname. Used
// from the Run's goroutine only.
type keyed struct {
	r      *Registry
	caches map[string]*itemCache // by path
	files  map[string][]*svcItem // by path: the services last published
	owners map[string][]decl     // by hostname: its declarations, in path order
}

// decl is a service declared in a file.
type decl struct {
	path string
	it   *svcItem
}

// publish implements filewatch.Watch.Publish: only the hostnames of
// services that changed in a file whose parse changed are compared and
// set. A service declared in two files is served from the first file in
// path order; the later declaration is a Rejection naming both files.
func (k *keyed) publish(files []filewatch.File[[]*svcItem], pub *registries.Publisher[string]) {
	touched := map[string]bool{}
	seen := make(map[string]bool, len(files))
	for _, f := range files {
		seen[f.Path] = true
		old := k.files[f.Path]
		if slices.Equal(old, f.Value) {
			continue
		}
		// Only the items between the common head and tail of the two
		// lists (the same pointers: unchanged services) may differ.
		i := 0
		for i < len(old) && i < len(f.Value) && old[i] == f.Value[i] {
			i++
		}
		j := 0
		for j < len(old)-i && j < len(f.Value)-i && old[len(old)-1-j] == f.Value[len(f.Value)-1-j] {
			j++
		}
		was := make(map[string]*svcItem, len(old)-i-j)
		for _, it := range old[i : len(old)-j] {
			was[it.svc.Hostname] = it
		}
		for _, it := range f.Value[i : len(f.Value)-j] {
			h := it.svc.Hostname
			if was[h] != it {
				k.declare(h, f.Path, it)
				touched[h] = true
			}
			delete(was, h)
		}
		for h := range was {
			k.declare(h, f.Path, nil)
			touched[h] = true
		}
		k.files[f.Path] = f.Value
	}
	for p, old := range k.files {
		if seen[p] {
			continue
		}
		for _, it := range old {
			k.declare(it.svc.Hostname, p, nil)
			touched[it.svc.Hostname] = true
		}
		delete(k.files, p)
	}
	for p := range k.caches {
		if !seen[p] {
			delete(k.caches, p)
		}
	}
	for h := range touched {
		k.r.work.compared.Add(1)
		ds := k.owners[h]
		if len(ds) == 0 {
			pub.Delete(h)
			continue
		}
		c := registries.Converted{Services: []model.Service{ds[0].it.svc}}
		for _, d := range ds[1:] {
			c.Rejected = append(c.Rejected, model.Rejection{
				Registry: k.r.common.Name, Host: h, Subject: "service in " + d.path,
				Reason: "also declared in " + ds[0].path + ", which is served (the first file in path order wins)",
			})
		}
		pub.Set(h, c)
	}
}

// declare records that path declares hostname h as it (nil: no longer).
func (k *keyed) declare(h, path string, it *svcItem) {
	ds := k.owners[h]
	i, found := slices.BinarySearchFunc(ds, path, func(d decl, p string) int { return strings.Compare(d.path, p) })
	switch {
	case it == nil && found:
		ds = slices.Delete(ds, i, i+1)
	case it == nil:
	case found:
		ds[i].it = it
	default:
		ds = slices.Insert(ds, i, decl{path: path, it: it})
	}
	if len(ds) == 0 {
		delete(k.owners, h)
		return
	}
	k.owners[h] = ds
}
