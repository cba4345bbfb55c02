// Package statestore persists each registry's last accepted state in a
// directory, so that a restarted meshfed serves it at once (warm start)
// instead of an empty model while its backends are slow or down (see
// docs/architecture.md, "Warm start").
//
// Per registry, <dir>/<name>.json (the base) holds a state the aggregator
// accepted, with the time it was accepted, and <dir>/<name>.log may
// extend it: one record per later accepted change (SaveDelta: the
// services changed, the hostnames removed), each naming the base it
// extends and checksummed, so that a change costs a write of its own size
// instead of the whole registry's. When the log outgrows the base (or a
// full state is saved) a new base is written and the log starts again;
// Load replays the records of its base in order and stops at the first
// one that is incomplete or damaged, so it restores a state that was
// accepted: the base, or the base with its first k changes.
//
// A base is written atomically: the new content goes to a temporary file
// in the same directory, which is fsynced, renamed over the old file, and
// the directory is fsynced. A record is appended and the log fsynced. A
// process killed at any point leaves the old or the new state, never a
// mix; Open removes leftover temporary files, and a log left behind by a
// base written since is ignored (its records name the older base).
//
// A removal wins: Delete leaves a tombstone for the name, so a Save that
// was already on its way (the aggregator accepted the registry's last
// update just before it was removed) is dropped instead of writing the
// file again, and Load finds nothing for the name, also when the file
// could not be removed. Revive ends the tombstone when the name is
// configured again; its new instance's states are then saved. Each Delete
// starts a new generation of the name: a state recorded before it is
// never written after it, also when its write was already under way (the
// generation is checked, under the lock, right before the rename or the
// append), so a registry removed and quickly added back never finds its
// removed instance's state on disk. The store cannot tell instances apart
// in Save: its caller must not Save a removed instance's state once it
// called Delete (the aggregator's OnAccepted is never called for a
// registry once RemoveRegistry returned, and Delete follows that).
package statestore

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/model"
)

// formatVersion is the version of the file format; files of another
// version are not restored. Version 2 added the log (Entry.ID); a
// version 1 file is a base without one and is still restored.
const formatVersion = 2

// tmpSuffix ends the names of temporary files; logSuffix the logs'.
const (
	tmpSuffix = ".tmp"
	logSuffix = ".log"
)

// defaultMinCompact is the log size below which no new base is written
// for it: a small registry's log may grow to this before it is folded
// in. Above it, a new base is written once the log outgrows the base, so
// the writes a change costs are O(change) amortized and Load reads at
// most about twice the state.
const defaultMinCompact = 256 << 10

// WritePauseEnv names an environment variable for tests only: a duration
// that each write pauses for after half of the temporary file (or of the
// log record) is written, so that a test can kill the process in the
// middle of a write.
const WritePauseEnv = "MESHFED_TEST_STATE_WRITE_PAUSE"

// Entry is the content of one registry's base file, and what Load
// returns (the base with its log replayed).
type Entry struct {
	Version  int       `json:"version"`
	Registry string    `json:"registry"`
	Kind     string    `json:"kind"`
	SavedAt  time.Time `json:"savedAt"`
	// ID names the base; the log records that extend it carry it.
	ID       uint64            `json:"id,omitempty"`
	Services []model.Service   `json:"services"`
	Rejected []model.Rejection `json:"rejected,omitempty"`
}

// record is one line of a log: a change to the state before it.
type record struct {
	Base     uint64            `json:"base"`
	SavedAt  time.Time         `json:"savedAt"`
	Changed  []model.Service   `json:"changed,omitempty"`
	Removed  []string          `json:"removed,omitempty"`
	Rejected []model.Rejection `json:"rejected,omitempty"`
}

// pending is what Serve has still to write for a registry.
type pending struct {
	gen    uint64 // the name's generation when it was recorded
	del    bool   // Delete: remove the files
	full   *Entry // a full state (nil: the deltas change the state saved before)
	deltas []record
}

// saved is Serve's copy of a registry's saved state, which the deltas
// change and a new base is written from.
type saved struct {
	kind     string
	services map[string]model.Service
	rejected []model.Rejection
	id       uint64 // of the base on disk
	baseSize int64
	logSize  int64
	log      *os.File // open for appending; nil before the first record
	// stale: the files do not hold this state (a write failed); the
	// next write is a base.
	stale bool
}

// Store is a state directory. Save and SaveDelta only record the latest
// state of a registry and return; Serve writes it. Safe for concurrent
// use.
type Store struct {
	dir   string
	log   *slog.Logger
	now   func() time.Time
	pause time.Duration
	// minCompact is the log size below which no new base is written
	// (defaultMinCompact; tests lower it).
	minCompact int64

	signal chan struct{}
	mu     sync.Mutex
	dirty  map[string]*pending // by registry
	tomb   map[string]bool     // deleted registries not revived since
	gen    map[string]uint64   // Deletes of each name: a write of an older generation is dropped

	saved   map[string]*saved // owned by Serve
	written atomic.Uint64     // writes finished (Written)
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
	s := &Store{dir: dir, log: log, now: time.Now, signal: make(chan struct{}, 1), dirty: map[string]*pending{},
		tomb: map[string]bool{}, gen: map[string]uint64{}, saved: map[string]*saved{}, minCompact: defaultMinCompact}
	if v := os.Getenv(WritePauseEnv); v != "" {
		if s.pause, err = time.ParseDuration(v); err != nil {
			return nil, fmt.Errorf("%s: %w", WritePauseEnv, err)
		}
	}
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) path(name string) string    { return filepath.Join(s.dir, name+".json") }
func (s *Store) logPath(name string) string { return filepath.Join(s.dir, name+logSuffix) }

// Load returns the state saved for registry name of kind: its base with
// the log's records of that base applied in order, up to the first
// incomplete or damaged one. It reports ok=false without an error when
// there is none; an error means the base exists but cannot be used
// (another kind, another format version, older than maxAge when maxAge >
// 0, unreadable): it is not restored. A name deleted and not revived
// since has none.
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
	case e.Version != formatVersion && e.Version != 1:
		return nil, false, fmt.Errorf("%s: format version %d, want %d", s.path(name), e.Version, formatVersion)
	case e.Registry != name || e.Kind != kind:
		return nil, false, fmt.Errorf("%s: saved for %s registry %q, not %s %q", s.path(name), e.Kind, e.Registry, kind, name)
	}
	if e.ID != 0 {
		if err := s.replay(e); err != nil {
			return nil, false, err
		}
	}
	if maxAge > 0 && s.now().Sub(e.SavedAt) > maxAge {
		return nil, false, fmt.Errorf("%s: saved %s ago, older than state.maxAge (%s)", s.path(name),
			s.now().Sub(e.SavedAt).Truncate(time.Second), maxAge)
	}
	return e, true, nil
}

// replay applies to e the records of its log that extend it.
func (s *Store) replay(e *Entry) error {
	f, err := os.Open(s.logPath(e.Registry))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	var byHost map[string]model.Service
	r := bufio.NewReader(f)
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(line) > 0 {
				s.log.Warn("state log ends in an incomplete record; restoring the state before it", "file", f.Name(), "record", n)
			}
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", f.Name(), err)
		}
		rec, ok := parseRecord(line)
		if !ok {
			s.log.Warn("damaged state log record; restoring the state before it", "file", f.Name(), "record", n)
			break
		}
		if rec.Base != e.ID {
			continue // a log left behind by an older base
		}
		if byHost == nil {
			byHost = byHostname(e.Services)
		}
		rec.apply(byHost)
		e.Rejected, e.SavedAt = rec.Rejected, rec.SavedAt
	}
	if byHost != nil {
		e.Services = sortedServices(byHost)
	}
	return nil
}

// appendRecord appends r as a log line: its JSON's CRC-32 in hex, a
// space, the JSON, a newline.
func appendRecord(b []byte, r *record) ([]byte, error) {
	j, err := json.Marshal(r)
	if err != nil {
		return b, err
	}
	b = fmt.Appendf(b, "%08x ", crc32.ChecksumIEEE(j))
	b = append(b, j...)
	return append(b, '\n'), nil
}

// parseRecord reads a line appendRecord wrote; ok is false when it is
// damaged.
func parseRecord(line []byte) (r record, ok bool) {
	line = bytes.TrimSuffix(line, []byte{'\n'})
	sum, j, found := bytes.Cut(line, []byte{' '})
	want, err := strconv.ParseUint(string(sum), 16, 32)
	if !found || err != nil || crc32.ChecksumIEEE(j) != uint32(want) {
		return r, false
	}
	return r, json.Unmarshal(j, &r) == nil
}

// apply makes r's change to a state by hostname.
func (r *record) apply(byHost map[string]model.Service) {
	for _, h := range r.Removed {
		delete(byHost, h)
	}
	for _, svc := range r.Changed {
		byHost[svc.Hostname] = svc
	}
}

func byHostname(services []model.Service) map[string]model.Service {
	m := make(map[string]model.Service, len(services))
	for _, svc := range services {
		m[svc.Hostname] = svc
	}
	return m
}

func sortedServices(byHost map[string]model.Service) []model.Service {
	out := slices.Collect(maps.Values(byHost))
	slices.SortFunc(out, func(a, b model.Service) int { return cmp.Compare(a.Hostname, b.Hostname) })
	return out
}

// Save records shard's latest accepted state; Serve writes it soon, as a
// new base. It does not block on I/O. The slices are kept, not copied. A
// Save for a deleted name that was not revived since is dropped.
func (s *Store) Save(shard model.ShardKey, services []model.Service, rejected []model.Rejection) {
	e := &Entry{Version: formatVersion, Registry: shard.Name, Kind: shard.Kind, SavedAt: s.now(),
		Services: services, Rejected: rejected}
	s.mu.Lock()
	if s.tomb[shard.Name] {
		s.mu.Unlock()
		s.log.Debug("state of a removed registry not saved", "registry", shard.Name)
		return
	}
	s.dirty[shard.Name] = &pending{gen: s.gen[shard.Name], full: e}
	s.mu.Unlock()
	s.wake()
}

// SaveDelta records shard's latest accepted state as its change to the
// state saved before (by Save or SaveDelta): the services of changed
// replace those of their hostnames or are added, the hostnames of
// removed go (changed and removed are disjoint), rejected is every
// rejection. Serve appends it to the log. The state it changes must not
// have two services of one hostname. Like
// Save, it does not block on I/O, keeps the slices, and is dropped for a
// deleted name.
func (s *Store) SaveDelta(shard model.ShardKey, changed []model.Service, removed []string, rejected []model.Rejection) {
	r := record{SavedAt: s.now(), Changed: changed, Removed: removed, Rejected: rejected}
	s.mu.Lock()
	if s.tomb[shard.Name] {
		s.mu.Unlock()
		s.log.Debug("state of a removed registry not saved", "registry", shard.Name)
		return
	}
	p := s.dirty[shard.Name]
	if p == nil || p.del || p.gen != s.gen[shard.Name] {
		p = &pending{gen: s.gen[shard.Name]}
		s.dirty[shard.Name] = p
	}
	p.deltas = append(p.deltas, r)
	s.mu.Unlock()
	s.wake()
}

// Accept is the aggregator's Options.OnAccepted: it saves a full input
// with Save and a change with SaveDelta.
func (s *Store) Accept(shard model.ShardKey, acc aggregate.Accepted) {
	if acc.Delta {
		s.SaveDelta(shard, acc.Changed, acc.Removed, acc.Rejected)
		return
	}
	s.Save(shard, acc.Services, acc.Rejected)
}

// Delete removes a registry's saved state (it left the configuration) and
// leaves a tombstone: until Revive(name), Save drops the name's states and
// Load finds none.
func (s *Store) Delete(name string) {
	s.mu.Lock()
	s.dirty[name] = &pending{del: true}
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
	defer s.closeLogs()
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
	s.dirty = map[string]*pending{}
	s.mu.Unlock()
	for name, p := range dirty {
		if p.del {
			if sv := s.saved[name]; sv != nil {
				sv.closeLog()
				delete(s.saved, name)
			}
			for _, f := range []string{s.path(name), s.logPath(name)} {
				if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
					s.log.Warn("cannot remove saved state", "registry", name, "file", f, "error", err)
				}
			}
			continue
		}
		err := s.writeState(name, p)
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

// writeState brings name's files to p: a new base when p holds a full
// state, when the files do not hold the state p changes, or when the log
// has outgrown the base; else p's changes appended to the log.
func (s *Store) writeState(name string, p *pending) error {
	sv := s.saved[name]
	var list []model.Service // the base's services, in the order given
	savedAt := time.Time{}
	if p.full != nil {
		if sv != nil {
			sv.closeLog()
		}
		sv = &saved{kind: p.full.Kind, services: byHostname(p.full.Services), rejected: p.full.Rejected, stale: true}
		s.saved[name] = sv
		list, savedAt = p.full.Services, p.full.SavedAt
	}
	if sv == nil {
		return errors.New("a change to a state that was never saved; dropped")
	}
	var buf []byte
	for i := range p.deltas {
		r := &p.deltas[i]
		r.apply(sv.services)
		sv.rejected, savedAt, list = r.Rejected, r.SavedAt, nil
		if !sv.stale {
			r.Base = sv.id
			var err error
			if buf, err = appendRecord(buf, r); err != nil {
				sv.stale = true
				return err
			}
		}
	}
	if !sv.stale && sv.logSize+int64(len(buf)) <= max(sv.baseSize, s.minCompact) {
		if err := s.appendLog(name, sv, buf, p.gen); err != nil {
			if !errors.Is(err, errSuperseded) {
				sv.stale = true
			}
			return err
		}
		return nil
	}
	if list == nil {
		list = sortedServices(sv.services)
	}
	e := &Entry{Version: formatVersion, Registry: name, Kind: sv.kind, SavedAt: savedAt, ID: rand.Uint64() | 1,
		Services: list, Rejected: sv.rejected}
	n, err := s.write(e, p.gen)
	if err != nil {
		sv.stale = true
		return err
	}
	// The log extends the base before: a new one starts.
	sv.closeLog()
	if err := os.Remove(s.logPath(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("cannot remove a folded state log (its records are ignored)", "registry", name, "error", err)
	}
	sv.id, sv.baseSize, sv.logSize, sv.stale = e.ID, n, 0, false
	return nil
}

// appendLog appends b to name's log and fsyncs it. It returns
// errSuperseded, writing nothing, when the name was deleted since the
// records were saved.
func (s *Store) appendLog(name string, sv *saved, b []byte, gen uint64) error {
	if len(b) == 0 {
		return nil
	}
	if sv.log == nil {
		f, err := os.OpenFile(s.logPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		if err := syncDir(s.dir); err != nil {
			f.Close()
			return err
		}
		sv.log = f
	}
	if s.pause > 0 {
		half := len(b) / 2
		if _, err := sv.log.Write(b[:half]); err != nil {
			return err
		}
		if err := sv.log.Sync(); err != nil {
			return err
		}
		time.Sleep(s.pause)
		sv.logSize += int64(half)
		b = b[half:]
	}
	// The generation check and the write under one lock, as for a base.
	s.mu.Lock()
	if gen != s.gen[name] {
		s.mu.Unlock()
		return errSuperseded
	}
	_, err := sv.log.Write(b)
	s.mu.Unlock()
	sv.logSize += int64(len(b))
	if err != nil {
		return err
	}
	return sv.log.Sync()
}

// closeLogs closes the open logs. The states are kept: a Serve run again
// (after a panic) writes each registry's next state as a new base, as
// the files may not hold the last one.
func (s *Store) closeLogs() {
	for _, sv := range s.saved {
		sv.closeLog()
		sv.stale = true
	}
}

func (sv *saved) closeLog() {
	if sv.log != nil {
		sv.log.Close()
		sv.log = nil
	}
}

// write replaces the registry's base atomically: temporary file, fsync,
// rename, fsync of the directory. It returns the size written, or
// errSuperseded, writing nothing, when the name was deleted since the
// state was saved (gen is its generation then).
func (s *Store) write(e *Entry, gen uint64) (int64, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return 0, err
	}
	size := int64(len(b))
	f, err := os.CreateTemp(s.dir, e.Registry+".*"+tmpSuffix)
	if err != nil {
		return 0, err
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
			return 0, err
		}
		if err := f.Sync(); err != nil {
			return 0, err
		}
		time.Sleep(s.pause)
		b = b[half:]
	}
	if _, err := f.Write(b); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	// The generation check and the rename under one lock: a Delete is
	// either seen here or comes after the rename (and removes the file).
	s.mu.Lock()
	if gen != s.gen[e.Registry] {
		s.mu.Unlock()
		return 0, errSuperseded
	}
	err = os.Rename(tmp, s.path(e.Registry))
	s.mu.Unlock()
	if err != nil {
		return 0, err
	}
	ok = true
	return size, syncDir(s.dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// String names the service in supervisor logs.
func (s *Store) String() string { return "state store " + s.dir }
