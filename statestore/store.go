// Package statestore persists each registry's last accepted state in a
// directory, so that a restarted meshfed serves it at once (warm start)
// instead of an empty model while its backends are slow or down (see
// docs/architecture.md, "Warm start").
//
// One file per registry, <dir>/<name>.json, holds what the registry last
// published and the aggregator accepted, with the time it was accepted.
// Every write is atomic: the new content goes to a temporary file in the
// same directory, which is fsynced, renamed over the old file, and the
// directory is fsynced. A process killed at any point leaves either the
// old or the new file, never a mix; Open removes leftover temporary files.
//
// A removal wins: Delete leaves a tombstone for the name, so a Save that
// was already on its way (the aggregator accepted the registry's last
// update just before it was removed) is dropped instead of writing the
// file again, and Load finds nothing for the name, also when the file
// could not be removed. Revive ends the tombstone when the name is
// configured again; its new instance's states are then saved. Each Delete
// starts a new generation of the name: a state recorded before it is
// never written after it, also when its write was already under way (the
// generation is checked, under the lock, right before the rename), so a
// registry removed and quickly added back never finds its removed
// instance's state on disk. The store cannot tell instances apart in
// Save: its caller must not Save a removed instance's state once it
// called Delete (the aggregator's OnAccepted is never called for a
// registry once RemoveRegistry returned, and Delete follows that).
package statestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshfed/meshfed/model"
)

// formatVersion is the version of the file format; files of another
// version are not restored.
const formatVersion = 1

// tmpSuffix ends the names of temporary files.
const tmpSuffix = ".tmp"

// WritePauseEnv names an environment variable for tests only: a duration
// that each write pauses for after half of the temporary file is written,
// so that a test can kill the process in the middle of a write.
const WritePauseEnv = "MESHFED_TEST_STATE_WRITE_PAUSE"

// Entry is the content of one registry's file.
type Entry struct {
	Version  int               `json:"version"`
	Registry string            `json:"registry"`
	Kind     string            `json:"kind"`
	SavedAt  time.Time         `json:"savedAt"`
	Services []model.Service   `json:"services"`
	Rejected []model.Rejection `json:"rejected,omitempty"`

	gen uint64 // the name's generation when Save recorded it
}

// Store is a state directory. Save only records the latest state of a
// registry and returns; Serve writes it. Safe for concurrent use.
type Store struct {
	dir   string
	log   *slog.Logger
	now   func() time.Time
	pause time.Duration

	signal chan struct{}
	mu     sync.Mutex
	dirty  map[string]*Entry // latest unsaved state by registry; nil = delete the file
	tomb   map[string]bool   // deleted registries not revived since
	gen    map[string]uint64 // Deletes of each name: a write of an older generation is dropped

	written atomic.Uint64 // writes finished (Written)
}

// Open creates dir if needed (mode 0700), removes temporary files a killed
// process left behind, and returns the store. log may be nil.
func Open(dir string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state.dir: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("state.dir: %w", err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), tmpSuffix) {
			p := filepath.Join(dir, e.Name())
			log.Info("removing a state file left unfinished by a previous process", "file", p)
			if err := os.Remove(p); err != nil {
				log.Warn("cannot remove unfinished state file", "file", p, "error", err)
			}
		}
	}
	s := &Store{dir: dir, log: log, now: time.Now, signal: make(chan struct{}, 1), dirty: map[string]*Entry{},
		tomb: map[string]bool{}, gen: map[string]uint64{}}
	if v := os.Getenv(WritePauseEnv); v != "" {
		if s.pause, err = time.ParseDuration(v); err != nil {
			return nil, fmt.Errorf("%s: %w", WritePauseEnv, err)
		}
	}
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) path(name string) string { return filepath.Join(s.dir, name+".json") }

// Load returns the state saved for registry name of kind. It reports
// ok=false without an error when there is none; an error means the file
// exists but cannot be used (another kind, another format version, older
// than maxAge when maxAge > 0, unreadable): it is not restored. A name
// deleted and not revived since has none.
func (s *Store) Load(name, kind string, maxAge time.Duration) (e *Entry, ok bool, err error) {
	s.mu.Lock()
	dead := s.tomb[name]
	s.mu.Unlock()
	if dead {
		return nil, false, nil
	}
	b, err := os.ReadFile(s.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	e = new(Entry)
	if err := json.Unmarshal(b, e); err != nil {
		return nil, false, fmt.Errorf("%s: %w", s.path(name), err)
	}
	switch {
	case e.Version != formatVersion:
		return nil, false, fmt.Errorf("%s: format version %d, want %d", s.path(name), e.Version, formatVersion)
	case e.Registry != name || e.Kind != kind:
		return nil, false, fmt.Errorf("%s: saved for %s registry %q, not %s %q", s.path(name), e.Kind, e.Registry, kind, name)
	case maxAge > 0 && s.now().Sub(e.SavedAt) > maxAge:
		return nil, false, fmt.Errorf("%s: saved %s ago, older than state.maxAge (%s)", s.path(name),
			s.now().Sub(e.SavedAt).Truncate(time.Second), maxAge)
	}
	return e, true, nil
}

// Save records shard's latest accepted state; Serve writes it soon. It
// does not block on I/O. The slices are kept, not copied. A Save for a
// deleted name that was not revived since is dropped.
func (s *Store) Save(shard model.ShardKey, services []model.Service, rejected []model.Rejection) {
	e := &Entry{Version: formatVersion, Registry: shard.Name, Kind: shard.Kind, SavedAt: s.now(),
		Services: services, Rejected: rejected}
	s.mu.Lock()
	if s.tomb[shard.Name] {
		s.mu.Unlock()
		s.log.Debug("state of a removed registry not saved", "registry", shard.Name)
		return
	}
	e.gen = s.gen[shard.Name]
	s.dirty[shard.Name] = e
	s.mu.Unlock()
	s.wake()
}

// Delete removes a registry's saved state (it left the configuration) and
// leaves a tombstone: until Revive(name), Save drops the name's states and
// Load finds none.
func (s *Store) Delete(name string) {
	s.mu.Lock()
	s.dirty[name] = nil
	s.tomb[name] = true
	s.gen[name]++
	s.mu.Unlock()
	s.wake()
}

// Revive ends name's tombstone, if any: the registry is configured again,
// and the states its new instance publishes are saved. Call it after Load
// (which finds nothing for a deleted name) and before the new instance
// runs.
func (s *Store) Revive(name string) {
	s.mu.Lock()
	delete(s.tomb, name)
	s.mu.Unlock()
}

func (s *Store) wake() {
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// Serve writes saved states until ctx ends, then writes what is still
// pending and returns ctx.Err(). It implements suture.Service.
func (s *Store) Serve(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			s.flush()
			return ctx.Err()
		case <-s.signal:
			s.flush()
		}
	}
}

// flush writes every pending state.
func (s *Store) flush() {
	s.mu.Lock()
	dirty := s.dirty
	s.dirty = map[string]*Entry{}
	s.mu.Unlock()
	for name, e := range dirty {
		if e == nil {
			if err := os.Remove(s.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				s.log.Warn("cannot remove saved state", "registry", name, "error", err)
			}
			continue
		}
		err := s.write(e)
		s.written.Add(1)
		if errors.Is(err, errSuperseded) {
			s.log.Debug("state of a removed registry not saved", "registry", name)
			continue
		}
		if err != nil {
			writes.WithLabelValues("error").Inc()
			s.log.Warn("cannot save registry state; a restart will restore an older one", "registry", name, "error", err)
			continue
		}
		writes.WithLabelValues("ok").Inc()
	}
}

// Written counts the states Serve has finished writing (or failed to
// write) so far: a test or benchmark waits on it.
func (s *Store) Written() uint64 { return s.written.Load() }

// errSuperseded: the name was deleted after the state was saved.
var errSuperseded = errors.New("registry removed since the state was saved")

// write replaces the registry's file atomically: temporary file, fsync,
// rename, fsync of the directory. It returns errSuperseded, writing
// nothing, when the name was deleted since e was saved.
func (s *Store) write(e *Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(s.dir, e.Registry+".*"+tmpSuffix)
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if s.pause > 0 {
		half := len(b) / 2
		if _, err := f.Write(b[:half]); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		time.Sleep(s.pause)
		b = b[half:]
	}
	if _, err := f.Write(b); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	// The generation check and the rename under one lock: a Delete is
	// either seen here or comes after the rename (and removes the file).
	s.mu.Lock()
	if e.gen != s.gen[e.Registry] {
		s.mu.Unlock()
		return errSuperseded
	}
	err = os.Rename(tmp, s.path(e.Registry))
	s.mu.Unlock()
	if err != nil {
		return err
	}
	ok = true
	d, err := os.Open(s.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// String names the service in supervisor logs.
func (s *Store) String() string { return "state store " + s.dir }
