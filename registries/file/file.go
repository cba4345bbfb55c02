// Package file is the `file` registry: services declared in YAML files
// (VM workloads, brownfield hosts), served as <name>.<domain>. It watches
// one file, or a directory or glob of files (one team, one file), re-reads
// only the files that changed and republishes the merge of all of them;
// a file that is missing or invalid keeps its last good services and is
// reported as Degraded.
package file

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// Timing of the watch loop.
const (
	// debounceQuiet collapses a burst of file events that only replace the
	// file (a rename over it, a ConfigMap symlink swap: the new content is
	// complete at once) into one read: the file is read once no event came
	// for this long...
	debounceQuiet = 50 * time.Millisecond
	// ...or once the burst has lasted this long.
	debounceMax = 500 * time.Millisecond
	// DefaultSettle: a file written in place (write events on the file
	// itself) is read only once it has not changed for this long, so that
	// a writer that pauses between chunks (0.4 s seen in the wild) is not
	// read half-way. A read whose size or modification time changed while
	// reading waits for another settle period.
	DefaultSettle = time.Second
	// settleMax bounds how long a file that never stops changing waits.
	settleMax = 10 * time.Second
	// resyncInterval re-reads the file even without events, in case the
	// platform missed some (network file systems, a watched directory that
	// was itself replaced).
	resyncInterval = 30 * time.Second
)

// Registry publishes the services of one file, or of every file a
// directory or glob matches.
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
// watching and recovers when the file is fixed. A Registry holds no state
// between Run calls.
type Registry struct {
	common   registries.Common
	patterns []string // files, directories or globs; cleaned
	log      *slog.Logger
	quiet    time.Duration
	maxWait  time.Duration
	settle   time.Duration
	interval time.Duration
	// parsed, when set (tests), is called after each parse of a file.
	parsed func(path string)
}

// Run implements registries.Registry. It fails only when the file watcher
// cannot be created or breaks.
func (r *Registry) Run(ctx context.Context, sink registries.Sink) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", strings.Join(r.patterns, ","), err)
	}
	defer w.Close()

	s := newRunState(r, sink, w)
	s.reload(true)

	resync := time.NewTicker(r.interval)
	defer resync.Stop()
	timer := time.NewTimer(time.Hour)
	timer.Stop() // armed while events wait for a read
	defer timer.Stop()
	// deb is the shared debounce helper: quiet/maxWait for a burst of
	// replacements, settle/settleMax once a file was written in place.
	deb := registries.Debouncer{Quiet: r.quiet, MaxWait: r.maxWait}
	arm := func(inPlace bool) {
		if inPlace && deb.Quiet < r.settle {
			deb.Quiet, deb.MaxWait = r.settle, max(settleMax, r.settle)
		}
		now := time.Now()
		deb.Add(now)
		s.pub.Changed(now)
		_, d := deb.Next(now)
		timer.Reset(d)
	}
	read := func(full bool) {
		deb.Done()
		deb.Quiet, deb.MaxWait = r.quiet, r.maxWait
		timer.Stop()
		if !s.reload(full) {
			arm(true) // a file changed while being read: wait for it to settle
		}
	}

	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("file watcher closed")
			}
			if !s.watch.relevant(ev) {
				continue
			}
			arm(ev.Has(fsnotify.Write))
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("file watcher closed")
			}
			// Typically an event queue overflow: events were lost, so read
			// once the files settled.
			r.log.Warn("file watcher error; re-reading the files", "error", err)
			arm(true)
		case <-timer.C:
			if due, d := deb.Next(time.Now()); !due {
				timer.Reset(d)
				continue
			}
			read(false)
		case <-resync.C:
			if !deb.Pending() {
				read(true)
			}
		}
	}
}

// fileState is what a Run remembers of one services file.
type fileState struct {
	info     os.FileInfo     // at the last read; nil if never read or gone
	sum      uint64          // hash of the bytes last parsed
	parsed   bool            // sum, parseErr are set
	parseErr error           // of the bytes last parsed
	services []model.Service // last good; nil if never good
	good     bool            // services is set
	err      error           // of the last attempt (stat, read or parse); nil if good
}

// runState is what one Run remembers between reads.
type runState struct {
	*Registry
	// pub holds each good file's services by path and publishes their
	// merge.
	pub   *registries.Publisher[string]
	watch *watchSet
	files map[string]*fileState
	paths []string // matched at the last read, sorted
}

func newRunState(r *Registry, sink registries.Sink, w *fsnotify.Watcher) *runState {
	s := &runState{Registry: r, files: map[string]*fileState{}, watch: newWatchSet(w, r.patterns, r.log)}
	s.pub = registries.NewPublisher(r.common, sink, r.log, registries.PublisherOptions[string]{
		Compare: strings.Compare, Assemble: s.merge,
	})
	return s
}

var hashSeed = maphash.MakeSeed()

// reload reads the files that changed (every file's bytes when full) and
// publishes the merge if any file's services changed. It reports false
// when a file changed while it was read (that file keeps its previous
// state: read it again once it settled).
func (s *runState) reload(full bool) bool {
	paths, keep, patErrs := s.match()
	// Watch before reading, so that a change made after a read is seen.
	s.watch.refresh(paths)
	settled := true
	s.paths = paths
	for _, p := range paths {
		st := s.files[p]
		if st == nil {
			st = &fileState{}
			s.files[p] = st
		}
		changed, ok := s.readOne(p, st, full)
		settled = settled && ok
		if changed {
			s.pub.Put(p, registries.Converted{Services: st.services})
		}
	}
	for p := range s.files {
		if !slices.Contains(paths, p) && !keep(p) {
			delete(s.files, p)
			s.pub.Delete(p)
		}
	}

	var errs []error
	anyGood := false
	for _, p := range s.merged() {
		st := s.files[p]
		anyGood = anyGood || st.good
		if st.err != nil {
			errs = append(errs, st.err)
		}
	}
	errs = append(patErrs, errs...)
	status := registries.Status{State: registries.Synced}
	if msg := errors.Join(errs...); msg != nil {
		// A file that exists but does not parse is invalid data, not an
		// outage; a missing or unreadable one is an outage.
		status = registries.Status{State: registries.Degraded, Err: msg.Error(), Invalid: true}
		for _, e := range errs {
			var pathErr *fs.PathError
			if errors.As(e, &pathErr) {
				status.Invalid = false
			}
		}
		if status != s.pub.Status() {
			s.log.Warn("services file rejected; keeping its last good state", "error", status.Err, "invalid", status.Invalid)
		}
	}
	// While some files are broken the others' changes are still published,
	// with the Degraded status in the same step (no Synced in between).
	// With no good file at all there is nothing to publish yet.
	if anyGood || status.State == registries.Synced {
		if s.pub.Flush(status) {
			s.log.Info("services files loaded", "files", len(paths))
		}
	} else {
		s.pub.Report(status)
	}
	return settled
}

// merged returns the paths of every file with state, sorted: the matched
// ones and those kept while their directory cannot be listed.
func (s *runState) merged() []string {
	out := make([]string, 0, len(s.files))
	for p := range s.files {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// merge assembles the shard's state from every good file's services in
// path order, a service declared again in a later file rejected.
func (s *runState) merge(files []registries.Entry[string]) ([]model.Service, []model.Rejection) {
	services := []model.Service{}
	var rejected []model.Rejection
	first := map[string]string{} // hostname → file
	for _, f := range files {
		for _, svc := range f.Services {
			if other, dup := first[svc.Hostname]; dup {
				rejected = append(rejected, model.Rejection{
					Registry: s.common.Name, Host: svc.Hostname, Subject: "service in " + f.Key,
					Reason: "also declared in " + other + ", which is served (the first file in path order wins)",
				})
				continue
			}
			first[svc.Hostname] = f.Key
			services = append(services, svc)
		}
	}
	return services, rejected
}

// readOne brings st up to date with the file at p. It reports whether the
// file's services changed, and false for ok when the file changed while
// it was read (st unchanged).
func (s *runState) readOne(p string, st *fileState, full bool) (changed, ok bool) {
	info, err := os.Stat(p)
	if err != nil {
		st.info, st.err = nil, err
		reloads.WithLabelValues(s.common.Name, "error").Inc()
		return false, true
	}
	if !full && st.info != nil && os.SameFile(st.info, info) && st.info.Size() == info.Size() && st.info.ModTime().Equal(info.ModTime()) {
		return false, true // unchanged since the last read
	}
	data, err := os.ReadFile(p)
	if err != nil {
		st.info, st.err = nil, err
		reloads.WithLabelValues(s.common.Name, "error").Inc()
		return false, true
	}
	after, err := os.Stat(p)
	if err != nil {
		st.info, st.err = nil, err
		reloads.WithLabelValues(s.common.Name, "error").Inc()
		return false, true
	}
	if info.Size() != after.Size() || !info.ModTime().Equal(after.ModTime()) || int64(len(data)) != after.Size() {
		s.log.Debug("services file changed while being read; waiting for it to settle", "file", p)
		return false, false
	}
	st.info = after
	sum := maphash.Bytes(hashSeed, data)
	if !st.parsed || st.sum != sum {
		services, err := Parse(filepath.Base(p), data, s.common)
		if s.parsed != nil {
			s.parsed(p)
		}
		st.sum, st.parsed, st.parseErr = sum, true, err
		if err == nil {
			changed = !st.good || !reflect.DeepEqual(services, st.services)
			st.services, st.good = services, true
		}
	}
	st.err = st.parseErr
	if st.err != nil {
		reloads.WithLabelValues(s.common.Name, "error").Inc()
	} else {
		reloads.WithLabelValues(s.common.Name, "ok").Inc()
	}
	return changed, true
}

// services file extensions a directory is read for.
var extensions = []string{".yaml", ".yml", ".json"}

func isGlob(p string) bool { return strings.ContainsAny(p, `*?[\`) }

// wanted: a services file in a directory or glob: not hidden (editors'
// temporary files, Kubernetes' ..data), with a services file extension.
func wanted(name string) bool {
	return !strings.HasPrefix(name, ".") && slices.Contains(extensions, strings.ToLower(filepath.Ext(name)))
}

// dirFiles lists the services files directly in dir, sorted.
func dirFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() || !wanted(e.Name()) {
			continue
		}
		out = append(out, filepath.Join(dir, e.Name()))
	}
	return out, nil
}

// globFiles lists the files pattern matches that are not hidden and not
// directories, sorted.
func globFiles(pattern string) []string {
	m, _ := filepath.Glob(pattern) // the pattern was validated
	var out []string
	for _, f := range m {
		if strings.HasPrefix(filepath.Base(f), ".") {
			continue
		}
		if fi, err := os.Stat(f); err == nil && fi.IsDir() {
			continue
		}
		out = append(out, f)
	}
	return out
}

// match returns the files the patterns name now, sorted and unique; keep
// tells which files not matched keep their state because their pattern
// could not be read (a plain path or directory that is missing); errs
// names those patterns.
func (s *runState) match() (files []string, keep func(string) bool, errs []error) {
	var failed []string
	for _, p := range s.patterns {
		if isGlob(p) {
			files = append(files, globFiles(p)...)
			continue
		}
		fi, err := os.Stat(p)
		switch {
		case err == nil && fi.IsDir():
			inDir, err := dirFiles(p)
			if err != nil {
				errs = append(errs, err)
				failed = append(failed, p)
			}
			files = append(files, inDir...)
		case err != nil && s.watch.wasDir[p]:
			// A directory that went away: keep its files' last good state.
			errs = append(errs, err)
			failed = append(failed, p)
		default:
			// A file, present or not: its own state says what is wrong.
			files = append(files, p)
		}
		if err == nil && fi.IsDir() {
			s.watch.wasDir[p] = true
		}
	}
	slices.Sort(files)
	files = slices.Compact(files)
	keep = func(f string) bool { return slices.Contains(failed, filepath.Dir(f)) }
	return files, keep, errs
}

// watchSet watches the directories of the patterns and of the files they
// match (and of the files symlinks resolve to), and tells which events are
// about them.
type watchSet struct {
	w        *fsnotify.Watcher
	patterns []string
	log      *slog.Logger
	dirs     map[string]bool // watched
	failed   map[string]bool // could not be watched (logged once)
	names    map[string]bool // event names that concern a file
	wasDir   map[string]bool // patterns seen as directories
}

func newWatchSet(w *fsnotify.Watcher, patterns []string, log *slog.Logger) *watchSet {
	return &watchSet{w: w, patterns: patterns, log: log, dirs: map[string]bool{}, failed: map[string]bool{}, wasDir: map[string]bool{}}
}

// refresh recomputes the names of interest and watches any new directory;
// called before every read, so a directory that appears later is picked up
// at the next periodic read.
func (ws *watchSet) refresh(files []string) {
	ws.names = map[string]bool{}
	var dirs []string
	for _, p := range ws.patterns {
		switch {
		case isGlob(p):
			dirs = append(dirs, filepath.Dir(p))
		case ws.wasDir[p]:
			dirs = append(dirs, p)
		default:
			dirs = append(dirs, filepath.Dir(p))
		}
	}
	for _, f := range files {
		dir := filepath.Dir(f)
		ws.names[f] = true
		// Kubernetes ConfigMap volumes swap this symlink on update.
		ws.names[filepath.Join(dir, "..data")] = true
		dirs = append(dirs, dir)
		if real, err := filepath.EvalSymlinks(f); err == nil && real != f {
			ws.names[real] = true
			dirs = append(dirs, filepath.Dir(real))
		}
	}
	for _, d := range dirs {
		if ws.dirs[d] || isGlob(d) {
			continue
		}
		if err := ws.w.Add(d); err != nil {
			if !ws.failed[d] {
				ws.log.Warn("cannot watch directory; relying on periodic re-reads until it can", "dir", d, "error", err)
				ws.failed[d] = true
			}
			continue
		}
		ws.dirs[d] = true
		delete(ws.failed, d)
	}
}

// relevant: the event is about a matched file, or about a name a pattern
// would match (a file added to the directory).
func (ws *watchSet) relevant(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		return false
	}
	name := filepath.Clean(ev.Name)
	if ws.names[name] {
		return true
	}
	for _, p := range ws.patterns {
		if isGlob(p) {
			if ok, _ := filepath.Match(p, name); ok && !strings.HasPrefix(filepath.Base(name), ".") {
				return true
			}
		} else if ws.wasDir[p] && filepath.Dir(name) == p && wanted(filepath.Base(name)) {
			return true
		} else if name == p {
			return true
		}
	}
	return false
}
