// Package file is the `file` registry: services declared in a YAML file
// (VM workloads, brownfield hosts), served as <name>.<domain>. It watches
// the file and republishes when its content changes; when the file is
// missing or invalid it keeps the last good state and reports Degraded.
package file

import (
	"context"
	"errors"
	"fmt"
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
	// debounceQuiet collapses a burst of file events into one read: the
	// file is read once no event came for this long...
	debounceQuiet = 50 * time.Millisecond
	// ...or once the burst has lasted this long.
	debounceMax = 500 * time.Millisecond
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
	return &Registry{
		common:   common,
		path:     filepath.Clean(c.Path),
		log:      log.With("path", c.Path),
		quiet:    debounceQuiet,
		maxWait:  debounceMax,
		interval: resyncInterval,
	}, nil
}

// Registry publishes the services of one file.
//
// Run reads the file at start, then again after changes (it watches the
// file's directory, so editors that replace the file, `mv` and Kubernetes
// ConfigMap symlink swaps are seen) and every 30s. Each successful read
// whose services differ from the last published ones is published with
// Replace. A file that is missing, unreadable or invalid is reported as
// Degraded with the error (file, line, key) and the last good state stays
// published; Run keeps watching and recovers when the file is fixed. A
// Registry holds no state between Run calls.
type Registry struct {
	common   registries.Common
	path     string
	log      *slog.Logger
	quiet    time.Duration
	maxWait  time.Duration
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
	debounce := time.NewTimer(time.Hour)
	debounce.Stop() // armed by the first relevant event
	defer debounce.Stop()
	var pending <-chan time.Time // debounce.C while events wait for a read
	var firstEvent time.Time

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
			if pending == nil {
				firstEvent = time.Now()
				pending = debounce.C
			} else if time.Since(firstEvent) >= r.maxWait {
				continue // let the running timer fire
			}
			debounce.Reset(r.quiet)
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("file watcher closed")
			}
			// Typically an event queue overflow: events were lost, so read.
			r.log.Warn("file watcher error; re-reading the file", "error", err)
			s.reload()
		case <-pending:
			pending = nil
			s.reload()
		case <-resync.C:
			s.reload()
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

func (s *runState) reload() {
	defer s.watch.refresh()
	services, err := s.load()
	shard := s.common.Shard()
	if err != nil {
		reloads.WithLabelValues(s.common.Name, "error").Inc()
		if msg := err.Error(); msg != s.lastErr {
			s.lastErr = msg
			s.log.Warn("services file rejected; keeping the last good state", "error", msg)
			s.sink.Report(shard, registries.Status{State: registries.Degraded, Err: msg})
		}
		return
	}
	reloads.WithLabelValues(s.common.Name, "ok").Inc()
	if s.published && s.lastErr == "" && reflect.DeepEqual(services, s.last) {
		return
	}
	s.log.Info("services file loaded", "services", len(services))
	s.last, s.published, s.lastErr = services, true, ""
	s.sink.Replace(shard, services, nil)
}

func (r *Registry) load() ([]model.Service, error) {
	data, err := os.ReadFile(r.path)
	if err != nil {
		return nil, err
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
