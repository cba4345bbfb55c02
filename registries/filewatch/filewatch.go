// Package filewatch is the watch loop of the registries that read files
// (registries/file, registries/serviceentry): it watches one file, or a
// directory or glob of files, re-reads only the files that changed once
// they settled, keeps each file's last good parse, and publishes the
// merge of every file's parse to a registries.Sink through the shared
// publishing tail, registries.Publisher (docs/architecture.md §3.1.1). A
// registry built on it supplies how one file parses and how the files'
// parses merge into services.
package filewatch

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
	"strconv"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// Timing of the watch loop (the defaults of Watch's fields).
const (
	// DefaultQuiet collapses a burst of file events that are neither a
	// rename into place nor a write in place (a file created, removed or
	// renamed away) into one read: the files are read once no event came
	// for this long...
	DefaultQuiet = 50 * time.Millisecond
	// ...or once the burst has lasted DefaultMaxWait.
	DefaultMaxWait = 500 * time.Millisecond
	// DefaultSettle: a file written in place (write events on the file
	// itself) is read only once it has not changed for this long, so that
	// a writer that pauses between chunks (0.4 s seen in the wild) is not
	// read half-way. A read whose size or modification time changed while
	// reading waits for another settle period.
	DefaultSettle = time.Second
	// settleMax bounds how long a file that never stops changing waits.
	settleMax = 10 * time.Second
	// DefaultInterval re-reads the files even without events, in case the
	// platform missed some (network file systems, a watched directory that
	// was itself replaced).
	DefaultInterval = 30 * time.Second
)

// File is one watched file and what its last good parse gave.
type File[T any] struct {
	Path  string
	Value T    // the last good parse; the zero T if never good
	Good  bool // Value is set
}

// Watch watches the files Patterns name and publishes the merge of their
// parses.
//
// Run reads the files at start, then again after changes (it watches their
// directories, so editors that replace a file, `mv` and Kubernetes
// ConfigMap symlink swaps are seen) and every Interval. When to read
// follows what the event says of the file (wake):
//
//   - a file renamed into place from a watched directory (an editor's or
//     an atomic writer's temporary file renamed over it, Kubernetes'
//     ..data symlink swap) is complete when the event comes: it is read
//     at once, unless other events already wait for a read (then it
//     joins them);
//   - a file written in place (a write event on the file itself: `cat >`,
//     `cp`, an editor that truncates and rewrites) is read only once it
//     stopped changing for Settle;
//   - any other event (a file created, removed, or renamed in from an
//     unwatched directory) is read Quiet after the last event, or after
//     MaxWait in a burst that does not stop.
//
// A file whose size or modification time changed while it was read keeps
// its previous state and is retried after another settle period: a
// half-written file is never parsed.
//
// Only files whose identity, size or modification time changed since
// their last read are read again (the periodic re-read reads every file
// but parses only those whose bytes changed); every other file keeps its
// parse as it is, so an edit costs the parse of the file that changed.
// Merge turns the files' last good parses, in path order, into the
// shard's state, published with Replace when any parse changed. A file
// matched by a directory or glob that disappears takes its parse with it.
//
// A file (or plain path) that is missing or unreadable is reported as
// Degraded (an outage); one whose Parse fails as Degraded with
// Status.Invalid (not an outage: outage.policy expire never withdraws it),
// with the error; either way that file's last good parse stays merged
// while the other files update, Run keeps watching and recovers when the
// file is fixed. While a file is broken the merge of the others is
// published as a partial state (registries.Update.Complete false): the
// aggregator keeps what it serves rather than take a Run's partial first
// state. An update that removed endpoints (and the first of a
// Run) is sent again once the files stayed unchanged and without errors
// for Confirm, which confirms it to the aggregator's hold-down
// (confirm.go). A Watch holds no state between Run calls.
type Watch[T any] struct {
	// Patterns are files, directories (every *.yaml, *.yml and *.json file
	// directly in it, hidden files left out) or globs (filepath.Match
	// syntax), cleaned and absolute.
	Patterns []string
	// Parse parses one file's content; path is the file's path. An error
	// rejects the whole file (its last good parse stays); problems of one
	// item of a file belong in T. Unused when ParseEdit is set.
	Parse func(path string, data []byte) (T, error)
	// ParseEdit, when set, is Parse for a registry that re-reads only
	// what an edit changed (registries/file): the Watch keeps each file's
	// last parsed bytes, reads the file into one of two buffers kept for
	// it (a read allocates nothing; the file's bytes are held twice),
	// compares each chunk read with the last parsed bytes while it is in
	// the CPU's cache, and tells ParseEdit where the bytes differ (e,
	// against e.Prev: the bytes of this path's last ParseEdit). An
	// unchanged file costs that compare and is not parsed. data stays
	// unchanged until the second ParseEdit of the same path after this
	// one returns, so that ParseEdit may keep it to read the next edit
	// against, and must not keep it longer. Without ParseEdit each read
	// allocates its buffer and a hash of the bytes tells an unchanged
	// file.
	ParseEdit func(path string, data []byte, e Edit) (T, error)
	// Merge returns the shard's state from every file with a good parse,
	// in path order, published under one key. It is called from Run's
	// goroutine only. Unused when Publish is set.
	Merge func(files []File[T]) ([]model.Service, []model.Rejection)
	// Publish, when set, replaces Merge for a registry that keeps its
	// state under one Publisher key per service or object: it brings pub
	// up to date with every file that has a good parse, in path order,
	// calling Set or Delete only for the keys whose conversion may have
	// changed, so that an edit compares what it changed rather than the
	// whole state (docs/architecture.md §3.1.1). It is called from Run's
	// goroutine when any file's parse changed.
	Publish func(files []File[T], pub *registries.Publisher[string])
	// Equal tells whether two parses are the same; nil is reflect.DeepEqual.
	Equal func(a, b T) bool
	// Shard is the key the state is published under.
	Shard model.ShardKey
	Log   *slog.Logger
	// Timing: Quiet, MaxWait, Settle, Interval and Confirm; zero means the
	// default above (Confirm: DefaultConfirmAfter).
	Timing
	// Read, when set, is told the result of each file read (for metrics).
	Read func(ok bool)
	// Parsed, when set (tests), is called after each parse of a file.
	Parsed func(path string)
}

// Run implements the loop of registries.Registry.Run. It fails only when
// the file watcher cannot be created or breaks.
func (wt *Watch[T]) Run(ctx context.Context, sink registries.Sink) error {
	quiet, maxWait := or(wt.Quiet, DefaultQuiet), or(wt.MaxWait, DefaultMaxWait)
	settle, interval := or(wt.Settle, DefaultSettle), or(wt.Interval, DefaultInterval)
	log := wt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", strings.Join(wt.Patterns, ","), err)
	}
	defer w.Close()

	s := wt.newRunState(sink, w, log)
	defer s.conf.timer.Stop()
	s.reload(true)

	resync := time.NewTicker(interval)
	defer resync.Stop()
	timer := time.NewTimer(time.Hour)
	timer.Stop() // armed while events wait for a read
	defer timer.Stop()
	// deb is the shared debounce helper: quiet/maxWait for a burst of
	// replacements, settle/settleMax once a file was written in place.
	deb := registries.Debouncer{Quiet: quiet, MaxWait: maxWait}
	arm := func(inPlace bool) {
		if inPlace && deb.Quiet < settle {
			deb.Quiet, deb.MaxWait = settle, max(settleMax, settle)
		}
		now := time.Now()
		deb.Add(now)
		s.pub.Changed(now)
		_, d := deb.Next(now)
		timer.Reset(d)
	}
	read := func(full bool) {
		deb.Done()
		deb.Quiet, deb.MaxWait = quiet, maxWait
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
			switch w := wake(ev); {
			case w == wakeNow && !deb.Pending():
				s.pub.Changed(time.Now())
				read(false)
			default:
				arm(w == wakeSettled)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("file watcher closed")
			}
			// Typically an event queue overflow: events were lost, so read
			// once the files settled.
			log.Warn("file watcher error; re-reading the files", "error", err)
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
		case <-s.conf.timer.C:
			// Hold-down confirmation (confirm.go): re-read; unchanged and
			// without errors, send the update again.
			seq := s.conf.seq
			if !deb.Pending() {
				read(true)
			}
			if s.conf.due(seq, deb.Pending(), s.pub.Condition().Failing()) {
				if s.pub.Confirm() {
					if s.conf.removed {
						log.Info("files unchanged: sending the update that removed endpoints again (hold-down confirmation)",
							"endpoints", s.conf.endpoints)
					} else {
						log.Debug("files unchanged: sending the run's first update again, confirming it if the hold-down holds it",
							"endpoints", s.conf.endpoints)
					}
				}
			}
		}
	}
}

// When an event asks for the files to be read (Run's doc).
const (
	wakeNow     = iota // a file renamed into place: complete, read it now
	wakeQuiet          // read once the burst of events is quiet
	wakeSettled        // written in place: read once it stopped changing
)

// wake says when ev asks for the files to be read.
func wake(ev fsnotify.Event) int {
	switch {
	case ev.Has(fsnotify.Write):
		return wakeSettled
	case ev.Op == fsnotify.Create && movedIn(ev):
		return wakeNow
	}
	return wakeQuiet
}

// movedIn: ev is a Create that fsnotify paired with the rename it ends
// (inotify's MOVED_FROM and MOVED_TO with the same cookie, the source in
// a watched directory); fsnotify shows the source only in the event's
// String, as `Op "name" ← "source"`. A plain create (then written in
// place) is not paired. TestRenameIntoPlaceIsReadAtOnce pins the format.
func movedIn(ev fsnotify.Event) bool {
	return strings.HasPrefix(ev.String(), fmt.Sprintf("%-13s %q ← ", ev.Op.String(), ev.Name))
}

func or(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// fileState is what a Run remembers of one file.
type fileState[T any] struct {
	info     os.FileInfo // at the last read; nil if never read or gone
	sum      uint64      // hash of the bytes last parsed (without ParseEdit)
	data     []byte      // the bytes last parsed (ParseEdit)
	spare    []byte      // the buffer the next read goes into (ParseEdit: the bytes parsed before data)
	parsed   bool        // sum or data, and parseErr are set
	parseErr error       // of the bytes last parsed
	value    T           // last good
	good     bool        // value is set
	err      error       // of the last attempt (stat, read or parse); nil if good
}

// runState is what one Run remembers between reads.
type runState[T any] struct {
	*Watch[T]
	log *slog.Logger
	// pub is the shared publishing tail (registries.Publisher): it holds
	// the merge of the files under one key (or, with Publish, one key per
	// service or object) and publishes it when it changed, with the
	// status, Synced/Degraded transitions once.
	pub   *registries.Publisher[string]
	conf  *confirmation
	watch *watchSet
	files map[string]*fileState[T]
	paths []string // matched at the last read, sorted
	merge bool     // a file's parse changed since the last merge
}

var hashSeed = maphash.MakeSeed()

func (wt *Watch[T]) newRunState(sink registries.Sink, w *fsnotify.Watcher, log *slog.Logger) *runState[T] {
	c := registries.Common{Name: wt.Shard.Name, Kind: wt.Shard.Kind}
	return &runState[T]{Watch: wt, log: log, files: map[string]*fileState[T]{}, watch: newWatchSet(w, wt.Patterns, log),
		pub:  registries.NewPublisher(c, sink, log, registries.PublisherOptions[string]{Compare: strings.Compare}),
		conf: newConfirmation(or(wt.Confirm, DefaultConfirmAfter)), merge: true}
}

// reload reads the files that changed (every file's bytes when full) and
// publishes the merge if any file's parse changed. It reports false
// when a file changed while it was read (that file keeps its previous
// state: read it again once it settled).
func (s *runState[T]) reload(full bool) bool {
	paths, keep, patErrs := s.match()
	// Watch before reading, so that a change made after a read is seen.
	s.watch.refresh(paths)
	settled := true
	if !slices.Equal(paths, s.paths) {
		s.merge = true
	}
	s.paths = paths
	for _, p := range paths {
		st := s.files[p]
		if st == nil {
			st = &fileState[T]{}
			s.files[p] = st
		}
		changed, ok := s.readOne(p, st, full)
		settled = settled && ok
		s.merge = s.merge || changed
	}
	for p, st := range s.files {
		if !slices.Contains(paths, p) && !keep(p) {
			delete(s.files, p)
			s.merge = s.merge || st.good
		}
	}

	var errs []error
	anyGood := false
	var files []File[T]
	for _, p := range s.merged() {
		st := s.files[p]
		anyGood = anyGood || st.good
		if st.err != nil {
			errs = append(errs, st.err)
		}
		if st.good {
			files = append(files, File[T]{Path: p, Value: st.value, Good: true})
		}
	}
	errs = append(patErrs, errs...)
	status := registries.Condition{}
	if msg := errors.Join(errs...); msg != nil {
		// A file that exists but does not parse is invalid data, not an
		// outage; a missing or unreadable one is an outage.
		status = registries.Condition{Err: msg.Error(), Invalid: true}
		for _, e := range errs {
			var pathErr *fs.PathError
			if errors.As(e, &pathErr) {
				status.Invalid = false
			}
		}
		if status != s.pub.Condition() {
			s.log.Warn("file rejected; keeping its last good state", "error", status.Err, "invalid", status.Invalid)
		}
	}
	// While some files are broken the others' changes are still published,
	// with the failing condition in the same step (never healthy between),
	// as a state that is not Complete: the aggregator holds such a state
	// when it is the Run's first and a state is already served (restored
	// or the previous Run's), so a restart with a file missing does not
	// drop that file's services. With no good file at all there is nothing
	// to publish yet.
	if anyGood || !status.Failing() {
		if s.merge {
			if s.Publish != nil {
				s.Publish(files, s.pub)
			} else {
				services, rejected := s.Merge(files)
				s.pub.Put("", registries.Converted{Services: services, Rejected: rejected})
			}
			s.merge = false
		}
		if s.pub.Flush(status) {
			services, endpoints, rejected := s.pub.SentCounts()
			s.log.Info("files loaded", "files", len(paths), "services", services, "conflicts", rejected)
			s.conf.published(endpoints)
		}
	} else {
		s.pub.Report(status)
	}
	return settled
}

// merged returns the paths of every file with state, sorted: the matched
// ones and those kept while their directory cannot be listed.
func (s *runState[T]) merged() []string {
	out := make([]string, 0, len(s.files))
	for p := range s.files {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

func (s *runState[T]) result(ok bool) {
	if s.Read != nil {
		s.Read(ok)
	}
}

// readOne brings st up to date with the file at p. It reports whether the
// file's parse changed, and false for ok when the file changed while it
// was read (st unchanged).
func (s *runState[T]) readOne(p string, st *fileState[T], full bool) (changed, ok bool) {
	info, err := os.Stat(p)
	if err != nil {
		st.info, st.err = nil, err
		s.result(false)
		return false, true
	}
	if !full && st.info != nil && os.SameFile(st.info, info) && st.info.Size() == info.Size() && st.info.ModTime().Equal(info.ModTime()) {
		return false, true // unchanged since the last read
	}
	keep := s.ParseEdit != nil
	var prev []byte // with ParseEdit, compared chunk by chunk as read
	if keep && st.parsed {
		prev = st.data
	}
	data, edit, err := readEdit(p, st.spare, prev, info.Size())
	if err != nil {
		st.info, st.err = nil, err
		s.result(false)
		return false, true
	}
	st.spare = data // until it is parsed
	after, err := os.Stat(p)
	if err != nil {
		st.info, st.err = nil, err
		s.result(false)
		return false, true
	}
	if info.Size() != after.Size() || !info.ModTime().Equal(after.ModTime()) || int64(len(data)) != after.Size() {
		s.log.Debug("file changed while being read; waiting for it to settle", "file", p)
		return false, false
	}
	st.info = after
	// With ParseEdit the last parsed bytes are kept (the read buffers are
	// reused, two per file, so that an edit of a large file allocates
	// nothing per read), and the read compared them with the new ones.
	var sum uint64
	same := st.parsed && edit.Prefix == len(data) && len(data) == len(prev)
	if !keep {
		st.spare = nil
		sum = maphash.Bytes(hashSeed, data)
		same = st.parsed && sum == st.sum
	}
	if !same {
		var value T
		if keep {
			value, err = s.ParseEdit(p, data, edit)
			st.data, st.spare = data, st.data
		} else {
			value, err = s.Parse(p, data)
		}
		if s.Parsed != nil {
			s.Parsed(p)
		}
		st.sum, st.parsed, st.parseErr = sum, true, err
		if err == nil {
			equal := s.Equal
			if equal == nil {
				equal = func(a, b T) bool { return reflect.DeepEqual(a, b) }
			}
			changed = !st.good || !equal(value, st.value)
			st.value, st.good = value, true
		}
	}
	st.err = st.parseErr
	s.result(st.err == nil)
	return changed, true
}

// extensions of the files a directory is read for.
var extensions = []string{".yaml", ".yml", ".json"}

func isGlob(p string) bool { return strings.ContainsAny(p, `*?[\`) }

// wanted: a file in a directory or glob: not hidden (editors' temporary
// files, Kubernetes' ..data), with a YAML or JSON extension.
func wanted(name string) bool {
	return !strings.HasPrefix(name, ".") && slices.Contains(extensions, strings.ToLower(filepath.Ext(name)))
}

// dirFiles lists the files directly in dir that a directory pattern
// reads, sorted.
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
func (s *runState[T]) match() (files []string, keep func(string) bool, errs []error) {
	var failed []string
	for _, p := range s.Patterns {
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
	realDirs := map[string]string{} // a directory's path with its symlinks resolved
	for _, f := range files {
		dir := filepath.Dir(f)
		ws.names[f] = true
		// Kubernetes ConfigMap volumes swap this symlink on update.
		ws.names[filepath.Join(dir, "..data")] = true
		dirs = append(dirs, dir)
		if real, err := realPath(f, realDirs); err == nil && real != f {
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

// realPath is filepath.EvalSymlinks(f), resolving f's directory once per
// refresh (dirs caches it): a file that is not itself a symlink costs one
// Lstat, not one per path element.
func realPath(f string, dirs map[string]string) (string, error) {
	fi, err := os.Lstat(f)
	if err != nil {
		return "", err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return filepath.EvalSymlinks(f)
	}
	dir := filepath.Dir(f)
	real, ok := dirs[dir]
	if !ok {
		if real, err = filepath.EvalSymlinks(dir); err != nil {
			return "", err
		}
		dirs[dir] = real
	}
	return filepath.Join(real, filepath.Base(f)), nil
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

// Files returns the files pattern names now, for `meshfed validate`: the
// files a directory or glob matches (none when it matches nothing), or
// the plain path itself whether or not it exists.
func Files(pattern string) []string {
	if isGlob(pattern) {
		return globFiles(pattern)
	}
	if fi, err := os.Stat(pattern); err == nil && fi.IsDir() {
		files, _ := dirFiles(pattern)
		return files
	}
	return []string{pattern}
}

// Patterns are the files, directories and globs a block names (its
// Options' Path and Paths), for validation and for the files to check.
type Patterns struct {
	Path  string
	Paths []string
}

// All returns Path and Paths, in that order.
func (p Patterns) All() []string {
	var out []string
	if p.Path != "" {
		out = append(out, p.Path)
	}
	return append(out, p.Paths...)
}

// Key returns the config key of All()[i]: "path" or "paths[j]".
func (p Patterns) Key(i int) string {
	if p.Path != "" {
		if i == 0 {
			return "path"
		}
		i--
	}
	return "paths[" + strconv.Itoa(i) + "]"
}

// Validate checks that there is at least one pattern and that each is a
// valid glob; errors are *registries.FieldError on path or paths[i].
func (p Patterns) Validate() error {
	if p.Path == "" && len(p.Paths) == 0 {
		return registries.FieldErr("path", "is required (or paths)")
	}
	for i, pat := range p.All() {
		if pat == "" {
			return registries.FieldErr(p.Key(i), "is empty")
		}
		if _, err := filepath.Match(pat, ""); err != nil {
			return registries.FieldErr(p.Key(i), "%q is not a valid glob: %v", pat, err)
		}
	}
	return nil
}

// Resolve makes *path and every paths[i] absolute against dir, in place.
func Resolve(dir string, path *string, paths []string) {
	abs := func(p string) string {
		if p != "" && !filepath.IsAbs(p) {
			return filepath.Join(dir, p)
		}
		return p
	}
	*path = abs(*path)
	for i := range paths {
		paths[i] = abs(paths[i])
	}
}

// Cleaned returns All() cleaned, for Watch.Patterns.
func (p Patterns) Cleaned() []string {
	var out []string
	for _, pat := range p.All() {
		out = append(out, filepath.Clean(pat))
	}
	return out
}

// FileRefs returns a registries.FileRef for every file the patterns name
// now (Files), each checked by check (its problems carry their own
// file:line), for a block's registries.FileReferrer.
func (p Patterns) FileRefs(check func(path string, data []byte) error) []registries.FileRef {
	var refs []registries.FileRef
	for i, pat := range p.All() {
		for _, f := range Files(pat) {
			refs = append(refs, registries.FileRef{Key: p.Key(i), Path: f, Check: func(b []byte) error { return check(f, b) }})
		}
	}
	return refs
}

// Loop is one Run's state without its event loop, for benchmarks and
// tests that drive the reads themselves.
type Loop[T any] struct {
	s *runState[T]
	w *fsnotify.Watcher
}

// NewLoop starts the state of a Run publishing to sink; nothing is read
// until Reload. Close it.
func (wt *Watch[T]) NewLoop(sink registries.Sink) (*Loop[T], error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	log := wt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Loop[T]{w: w, s: wt.newRunState(sink, w, log)}, nil
}

// Reload reads and publishes as Run does after an event (every file's
// bytes when full); false: a file changed while it was read.
func (l *Loop[T]) Reload(full bool) bool { return l.s.reload(full) }

// Close releases the loop's file watcher.
func (l *Loop[T]) Close() error {
	l.s.conf.timer.Stop()
	return l.w.Close()
}
