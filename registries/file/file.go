// Package file is the `file` registry: services declared in a YAML file
// (VM workloads, brownfield hosts), served as <name>.<domain>. It watches
// the file and republishes when its content changes; when the file is
// missing or invalid it keeps the last good state and reports Degraded.
package file

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
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

// New implements registries.Config. It does no I/O: a missing file is not
// an error at start (see Registry).
func (c *Config) New(common registries.Common, log *slog.Logger) (registries.Registry, error) {
	if c.Path == "" {
		return nil, registries.FieldErr("path", "is required")
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
		path:     filepath.Clean(c.Path),
		log:      log.With("path", c.Path),
		quiet:    debounceQuiet,
		maxWait:  debounceMax,
		settle:   settle,
		interval: resyncInterval,
	}, nil
}

// Registry publishes the services of one file.
//
// Run reads the file at start, then again after changes (it watches the
// file's directory, so editors that replace the file, `mv` and Kubernetes
// ConfigMap symlink swaps are seen) and every 30s. A file replaced by a
// rename is read 50 ms after the last event; a file written in place is
// read only once it stopped changing for the settle time (file.settle,
// default 1s), and a read during which its size or modification time
// changed is retried after another settle period: a half-written file is
// never published. Each successful read whose services differ from the
// last published ones is published with Replace. A file that is missing or
// unreadable is reported as Degraded (an outage); one that does not parse
// as Degraded with Status.Invalid (not an outage: outage.policy expire
// never withdraws it), with the error (file, line, key); either way the
// last good state stays published, Run keeps watching and recovers when
// the file is fixed. A Registry holds no state between Run calls.
type Registry struct {
	common   registries.Common
	path     string
	log      *slog.Logger
	quiet    time.Duration
	maxWait  time.Duration
	settle   time.Duration
	interval time.Duration
}

// Run implements registries.Registry. It fails only when the file watcher
// cannot be created or breaks.
func (r *Registry) Run(ctx context.Context, sink registries.Sink) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", r.path, err)
	}
	defer w.Close()

	s := &runState{Registry: r, sink: sink, watch: newWatchSet(w, r.path, r.log)}
	s.reload()

	resync := time.NewTicker(r.interval)
	defer resync.Stop()
	timer := time.NewTimer(time.Hour)
	timer.Stop() // armed while events wait for a read
	defer timer.Stop()
	// deb is the shared debounce helper: quiet/maxWait for a burst of
	// replacements, settle/settleMax once the file was written in place.
	deb := registries.Debouncer{Quiet: r.quiet, MaxWait: r.maxWait}
	arm := func(inPlace bool) {
		if inPlace && deb.Quiet < r.settle {
			deb.Quiet, deb.MaxWait = r.settle, max(settleMax, r.settle)
		}
		deb.Add(time.Now())
		_, d := deb.Next(time.Now())
		timer.Reset(d)
	}
	read := func() {
		deb.Done()
		deb.Quiet, deb.MaxWait = r.quiet, r.maxWait
		timer.Stop()
		if !s.reload() {
			arm(true) // changed while being read: wait for it to settle
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
			// once the file settled.
			r.log.Warn("file watcher error; re-reading the file", "error", err)
			arm(true)
		case <-timer.C:
			if due, d := deb.Next(time.Now()); !due {
				timer.Reset(d)
				continue
			}
			read()
		case <-resync.C:
			if !deb.Pending() {
				read()
			}
		}
	}
}

// runState is what one Run remembers between reads.
type runState struct {
	*Registry
	sink      registries.Sink
	watch     *watchSet
	last      []model.Service
	published bool   // Replace was called in this Run
	lastErr   string // error of the last read; "" after a good read
}

// reload reads the file and publishes it if it changed. It reports false
// when the file changed while it was read (nothing is published or
// reported: read it again once it settled).
func (s *runState) reload() bool {
	defer s.watch.refresh()
	services, err := s.load()
	shard := s.common.Shard()
	if errors.Is(err, errChanging) {
		s.log.Debug("services file changed while being read; waiting for it to settle")
		return false
	}
	if err != nil {
		reloads.WithLabelValues(s.common.Name, "error").Inc()
		if msg := err.Error(); msg != s.lastErr {
			s.lastErr = msg
			// A file that exists but does not parse is invalid data, not an
			// outage; a missing or unreadable one is an outage.
			var pathErr *fs.PathError
			invalid := !errors.As(err, &pathErr)
			s.log.Warn("services file rejected; keeping the last good state", "error", msg, "invalid", invalid)
			s.sink.Report(shard, registries.Status{State: registries.Degraded, Err: msg, Invalid: invalid})
		}
		return true
	}
	reloads.WithLabelValues(s.common.Name, "ok").Inc()
	if s.published && s.lastErr == "" && reflect.DeepEqual(services, s.last) {
		return true
	}
	s.log.Info("services file loaded", "services", len(services))
	s.last, s.published, s.lastErr = services, true, ""
	s.sink.Replace(shard, services, nil)
	return true
}

// errChanging: the file's size or modification time changed while it was
// read.
var errChanging = errors.New("services file changed while being read")

func (r *Registry) load() ([]model.Service, error) {
	before, err := os.Stat(r.path)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(r.path)
	if err != nil {
		return nil, err
	}
	after, err := os.Stat(r.path)
	if err != nil {
		return nil, err
	}
	if before.Size() != after.Size() || !before.ModTime().Equal(after.ModTime()) || int64(len(data)) != after.Size() {
		return nil, errChanging
	}
	return Parse(filepath.Base(r.path), data, r.common)
}

// watchSet watches the directories of the services file and of the file a
// symlink at its path resolves to, and tells which events are about it.
type watchSet struct {
	w      *fsnotify.Watcher
	path   string
	log    *slog.Logger
	dirs   map[string]bool // watched
	failed map[string]bool // could not be watched (logged once)
	names  map[string]bool // event names that concern the file
}

func newWatchSet(w *fsnotify.Watcher, path string, log *slog.Logger) *watchSet {
	ws := &watchSet{w: w, path: path, log: log, dirs: map[string]bool{}, failed: map[string]bool{}}
	ws.refresh()
	return ws
}

// refresh recomputes the names of interest and watches any new directory;
// called after every read, so a directory that appears later is picked up
// at the next periodic read.
func (ws *watchSet) refresh() {
	dir := filepath.Dir(ws.path)
	ws.names = map[string]bool{
		ws.path: true,
		// Kubernetes ConfigMap volumes swap this symlink on update.
		filepath.Join(dir, "..data"): true,
	}
	dirs := []string{dir}
	if real, err := filepath.EvalSymlinks(ws.path); err == nil && real != ws.path {
		ws.names[real] = true
		dirs = append(dirs, filepath.Dir(real))
	}
	for _, d := range dirs {
		if ws.dirs[d] {
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

func (ws *watchSet) relevant(ev fsnotify.Event) bool {
	return ev.Op != fsnotify.Chmod && ws.names[filepath.Clean(ev.Name)]
}
