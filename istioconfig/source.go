package istioconfig

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/debounce"
	"github.com/meshfed/meshfed/model"
)

// Dir is one directory config source (clusters.yaml `configSources`).
type Dir struct {
	// Name of the source; unique.
	Name string
	// Path of the directory; its *.yaml and *.yml files are read, not its
	// subdirectories.
	Path string
}

// Timing of the watch loop (registries.Debouncer).
const (
	// quiet: a burst of file events is read once no event came for this
	// long (a file may be half written when its first event arrives).
	quiet = 100 * time.Millisecond
	// feedQuiet, feedMaxWait: a feed change after feedQuiet without any
	// is read at once (Debouncer.Leading); the rest of a burst is read
	// once feedQuiet passed without another change, at most feedMaxWait
	// after the first. A read of a DeltaFeed costs what changed (update).
	feedQuiet   = 10 * time.Millisecond
	feedMaxWait = 100 * time.Millisecond
	// resync re-reads every directory (and feed part) even without
	// events, in case file events were missed. A Source without
	// directories does not resync: a Feed reports its every change.
	resync = 10 * time.Second
)

// Status is what /debug/configz shows.
type Status struct {
	// Version of the snapshot in force (0: none published yet).
	Version uint64 `json:"version"`
	// InForce lists every object in force, sorted by kind/namespace/name.
	InForce []ObjectStatus `json:"inForce"`
	// Rejected lists what the last read refused, in source order.
	Rejected []Rejection `json:"rejected"`
	// Merged lists the hosts whose DestinationRules are merged into one
	// (several rules for one host in one namespace), sorted by host.
	Merged []MergedRule `json:"merged"`
	// Sources is the state of every config source as of the last read
	// (one entry per cluster of a Kubernetes source), in config order.
	Sources []SourceState `json:"sources"`
}

// ObjectStatus is one object in force.
type ObjectStatus struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Source    string `json:"source"`
	Hash      string `json:"hash"`
	// Hosts are the hosts it applies to (a VirtualService's hosts, a
	// DestinationRule's host).
	Hosts []string `json:"hosts"`
}

// Source reads the config directories, keeps each object's last good
// version, and publishes the objects in force.
//
// It is safe for concurrent use; Run may be called once.
type Source struct {
	dirs  []Dir
	feeds []Feed
	log   *slog.Logger
	// readMu serialises reads (Reload, update) and guards views.
	readMu sync.Mutex
	// views: per feed, what the Source holds of a DeltaFeed's parts (nil
	// for a plain Feed, read with Parts).
	views []*feedView
	// compared counts the objects compared with the version in force.
	compared atomic.Uint64
	// memo: per-object hashes and validation results of the last read.
	memo objectMemo

	mu       sync.Mutex
	inForce  map[string]held // by Key
	rejected []Rejection
	merged   []MergedRule
	states   []SourceState
	version  uint64
	snap     *model.ConfigSnapshot

	// warned: the rejections already logged (warnKey), so a re-read of
	// unchanged files does not log them again.
	warned map[string]bool
}

// New returns a Source over dirs and feeds; it does no I/O.
func New(dirs []Dir, log *slog.Logger, feeds ...Feed) *Source {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Source{dirs: slices.Clone(dirs), feeds: slices.Clone(feeds), log: log, inForce: map[string]held{}}
	s.views = make([]*feedView, len(feeds))
	for i, f := range feeds {
		if _, ok := f.(DeltaFeed); ok {
			s.views[i] = &feedView{}
		}
	}
	return s
}

// Ready reports whether every config source has been read completely at
// least once (or cannot start: Failed), as of the last Reload; the reason
// names those still waiting. Directories are read by every Reload, so a
// Source of directories only is ready after the first. A Kubernetes
// cluster that is unreachable at start keeps its source waiting (the
// gateway bounds that wait: docs/architecture.md §3.6); a Failed one (no
// CRDs, no rights, credentials unusable: see Failures) does not.
func (s *Source) Ready() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.snap == nil {
		return false, "config sources not read yet"
	}
	var waiting []string
	for _, st := range s.states {
		if st.State == StateStarting {
			d := st.describe()
			if st.Error != "" {
				d += " (" + st.Error + ")"
			}
			waiting = append(waiting, d)
		}
	}
	if len(waiting) > 0 {
		return false, "waiting for the first sync of " + strings.Join(waiting, ", ")
	}
	return true, ""
}

// Failures describes the config sources that are Failed as of the last
// Reload, e.g. "config source k8s cluster east failed: <error>"; nil when
// none.
func (s *Source) Failures() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, st := range s.states {
		if st.State == StateFailed {
			out = append(out, st.describe()+" failed: "+st.Error)
		}
	}
	return out
}

// describe names a config source (and its Kubernetes cluster) in Ready
// and Failures: "config source k8s cluster east".
func (st SourceState) describe() string {
	d := "config source " + st.Name
	if st.Cluster != "" {
		d += " cluster " + st.Cluster
	}
	return d
}

// Snapshot returns the objects in force (nil before the first Reload).
func (s *Source) Snapshot() *model.ConfigSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap
}

// Status returns what is in force and what the last read rejected.
func (s *Source) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Version: s.version, InForce: []ObjectStatus{}, Rejected: slices.Clone(s.rejected), Sources: slices.Clone(s.states)}
	if st.Rejected == nil {
		st.Rejected = []Rejection{}
	}
	if st.Sources == nil {
		st.Sources = []SourceState{}
	}
	st.Merged = slices.Clone(s.merged)
	if st.Merged == nil {
		st.Merged = []MergedRule{}
	}
	for _, o := range s.snap.Objects() {
		st.InForce = append(st.InForce, ObjectStatus{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Source: o.Source, Hash: o.Hash, Hosts: Hosts(o)})
	}
	return st
}

// Hosts returns the hosts a config object applies to.
func Hosts(o *model.ConfigObject) []string {
	switch sp := o.Spec.(type) {
	case *networking.VirtualService:
		return slices.Clone(sp.GetHosts())
	case *networking.DestinationRule:
		return []string{sp.GetHost()}
	}
	return nil
}

// Work returns how many objects the Source has hashed (feed objects
// only: a file's are hashed as they are decoded) and validated since it
// was made. A read hashes and validates only the objects that changed
// since the previous read (objectMemo). For tests and diagnostics.
func (s *Source) Work() (hashed, validated uint64) {
	return s.memo.hashed.Load(), s.memo.validated.Load()
}

// Compared returns how many objects the Source has compared with the
// version in force since it was made: every object on a Reload, the
// objects a DeltaFeed changed on an update. For tests and diagnostics.
func (s *Source) Compared() uint64 { return s.compared.Load() }

// Reload reads every directory and feed once and applies it: valid
// objects come into force, objects no longer in any file (or cluster)
// leave it, and an object that is now invalid or conflicting is rejected
// while its last good version (if any) stays. A directory that cannot be
// listed, a file that cannot be parsed and a feed part not synced yet
// keep the objects they held. It reports whether the objects in force
// changed; the first call always publishes a snapshot.
func (s *Source) Reload() bool {
	s.readMu.Lock()
	defer s.readMu.Unlock()
	return s.reload()
}

// reload is Reload; s.readMu is held.
func (s *Source) reload() bool {
	var docs []*parsed
	var rejected []Rejection
	var states []SourceState
	failedFiles := map[string]bool{} // files, dirs (with a trailing separator) and feed groups whose objects stay
	for _, d := range s.dirs {
		files, err := listYAML(d.Path)
		if err != nil {
			rejected = append(rejected, Rejection{Source: d.Path, Reason: fmt.Sprintf("config source %q: %v", d.Name, err)})
			failedFiles[d.Path+string(filepath.Separator)] = true // keep everything from this dir
			states = append(states, SourceState{Name: d.Name, Kind: "dir", State: StateDegraded, Error: err.Error()})
			continue
		}
		states = append(states, SourceState{Name: d.Name, Kind: "dir", State: StateSynced})
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err == nil {
				var ps []*parsed
				ps, err = decodeFile(f, data)
				docs = append(docs, ps...)
			}
			if err != nil {
				rejected = append(rejected, Rejection{Source: f, Reason: err.Error()})
				failedFiles[f] = true
			}
		}
	}
	for i, f := range s.feeds {
		ps, keep, st := readFeed(f, s.views[i], &s.memo)
		docs = append(docs, ps...)
		states = append(states, st...)
		for _, g := range keep {
			failedFiles[g] = true
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.inForce
	next := map[string]held{}
	// Objects of files (or directories) that could not be read stay as they were.
	for k, h := range prev {
		if failedFiles[h.file] || failedFiles[filepath.Dir(h.file)+string(filepath.Separator)] {
			next[k] = h
		}
	}
	reject := func(p *parsed, err error) {
		_, kept := prev[p.key()]
		if p.kind == "" {
			kept = false
		}
		r := rejectionOf(p, err)
		r.KeptLastGood = kept
		rejected = append(rejected, r)
		if h, ok := prev[p.key()]; ok && p.kind != "" {
			if _, taken := next[p.key()]; !taken {
				next[p.key()] = h
			}
		}
	}
	var valid []*parsed
	// What a source that could not be read still holds counts as defined
	// there: another source's object of the same key is a duplicate.
	seen := map[string]*parsed{}
	for k, h := range next {
		seen[k] = &parsed{source: h.obj.Source, hash: h.obj.Hash, fromFeed: strings.HasPrefix(h.file, feedPrefix)}
	}
	for _, p := range docs {
		if p.err != nil {
			reject(p, p.err)
			continue
		}
		if first, dup := seen[p.key()]; dup {
			if p.fromFeed && first.fromFeed && p.hash == first.hash {
				// The same object applied to several clusters (as
				// multicluster meshes do): one object, from the first.
				continue
			}
			rejected = append(rejected, Rejection{Kind: p.kind, Namespace: p.namespace, Name: p.name, Source: p.source, Hosts: hostsOf(p),
				Reason: fmt.Sprintf("%s %s/%s is already defined at %s", p.kind, p.namespace, p.name, first.source)})
			continue
		}
		seen[p.key()] = p
		if err := s.memo.validate(p); err != nil {
			reject(p, err)
			continue
		}
		valid = append(valid, p)
	}
	// Conflicts: one VirtualService per host; Istio keeps the oldest.
	// The one already in force wins, then the oldest (model.CompareAge).
	// DestinationRules for one host in one namespace merge (drmerge);
	// a rule for the host from another namespace is refused, as Istio
	// would pick between them by the client's namespace, which meshfed
	// does not know (docs/architecture.md §3.6).
	objs := make(map[*parsed]*model.ConfigObject, len(valid))
	for _, p := range valid {
		var o *model.ConfigObject
		if p.view != nil {
			o = p.view.obj // a feed view's object is its own ConfigObject
		} else {
			o = &model.ConfigObject{Kind: p.kind, Namespace: p.namespace, Name: p.name, Source: p.source, Hash: p.hash,
				Created: p.created, Spec: p.spec}
		}
		if !p.fromFeed {
			o.File = p.file
			if p.node != nil {
				o.Line = p.node.Line
			}
		}
		if old := prev[p.key()].obj; old != nil && old.Hash == o.Hash && old.Source == o.Source && old.Created.Equal(o.Created) &&
			old.File == o.File && old.Line == o.Line {
			o = old
		}
		objs[p] = o
	}
	sort.SliceStable(valid, func(i, j int) bool {
		a, b := valid[i], valid[j]
		_, ai := prev[a.key()]
		_, aj := prev[b.key()]
		if ai != aj {
			return ai
		}
		return model.CompareAge(objs[a], objs[b]) < 0
	})
	owner := map[string]*model.ConfigObject{} // kind + "\x00" + host → holder
	for _, k := range next {                  // kept last-good objects hold their hosts
		for _, h := range claims(k.obj) {
			owner[k.obj.Kind+"\x00"+h] = k.obj
		}
	}
	for _, p := range valid {
		o := objs[p]
		var clash string
		for _, h := range claims(o) {
			w, ok := owner[p.kind+"\x00"+h]
			if !ok || w.Key() == o.Key() || (p.kind == KindDestinationRule && w.Namespace == o.Namespace) {
				continue
			}
			if p.kind == KindDestinationRule {
				clash = fmt.Sprintf("host %q already has DestinationRule %s/%s from another namespace (rules for one host merge only within a namespace)", h, w.Namespace, w.Name)
			} else {
				clash = fmt.Sprintf("host %q already has %s %s/%s (one %s per host)", h, p.kind, w.Namespace, w.Name, p.kind)
			}
			break
		}
		if clash != "" {
			reject(p, errors.New(clash))
			continue
		}
		for _, h := range claims(o) {
			if _, ok := owner[p.kind+"\x00"+h]; !ok {
				owner[p.kind+"\x00"+h] = o
			}
		}
		next[p.key()] = held{o, p.file}
	}

	changed := s.snap == nil || len(next) != len(prev)
	for k, h := range next {
		if prev[k].obj != h.obj {
			changed = true
		}
	}
	s.compared.Add(uint64(len(next)))
	s.inForce, s.rejected, s.states = next, rejected, states
	s.memo.done()
	s.merged = mergedRules(heldObjects(next))
	// Each rejection is logged once: again only after it went away (the
	// object was fixed or removed) or changed (another reason, source or
	// last good state).
	warned := make(map[string]bool, len(rejected))
	for _, r := range rejected {
		k := warnKey(r)
		if !s.warned[k] && !warned[k] {
			s.log.Warn("config object rejected", "source", r.Source, "kind", r.Kind, "object", r.Namespace+"/"+r.Name, "reason", r.Reason, "keptLastGood", r.KeptLastGood)
		}
		warned[k] = true
	}
	s.warned = warned
	inForce, rej := map[string]int{}, map[string]int{}
	for _, h := range next {
		inForce[h.obj.Kind]++
	}
	for _, r := range rejected {
		k := r.Kind
		if k == "" {
			k = "unknown"
		}
		rej[k]++
	}
	setObjectMetrics(inForce, rej)
	setSourceMetrics(states)
	if changed {
		snapshotsTotal.Inc()
		s.version++
		objs := make([]*model.ConfigObject, 0, len(next))
		for o := range heldObjects(next) {
			objs = append(objs, o)
		}
		s.snap = model.NewConfigSnapshot(s.version, objs)
	}
	return changed
}

// update reads what the DeltaFeeds changed and, when that is what a
// Reload would conclude, puts each changed object in force alone: an
// object in force from one part only, without any rejection, updated to
// a valid version that claims the same hosts (so no conflict outcome and
// no order changes). That is hashed, validated and compared once, and the
// snapshot is the previous one with the object replaced
// (model.ConfigSnapshot.Replace). Anything else — an object added or
// deleted, invalid or conflicting, in several parts or rejected, a part
// whose state changed, a plain Feed — is read by a full Reload, as are
// the directories (their events and the resync read them). It reports
// whether the objects in force changed.
func (s *Source) update() bool {
	s.readMu.Lock()
	defer s.readMu.Unlock()
	type change struct {
		feed int
		changedKey
	}
	var changes []change
	full := false
	for i, f := range s.feeds {
		v := s.views[i]
		if v == nil {
			full = true
			continue
		}
		ch, restate := v.apply(f.(DeltaFeed).Deltas())
		full = full || restate
		for _, c := range ch {
			changes = append(changes, change{i, c})
		}
	}
	s.mu.Lock()
	if full || s.snap == nil {
		s.mu.Unlock()
		return s.reload()
	}
	var next []*model.ConfigObject
	rules := false
	for _, c := range changes {
		v := s.views[c.feed]
		group := feedGroup(s.feeds[c.feed].Name(), v.parts[c.part].Name)
		key := c.key.Kind + "/" + c.key.Namespace + "/" + c.key.Name
		in := s.inForce[key]
		old := in.obj
		fo, ok := v.object(c.part, c.key)
		if old == nil || !ok || in.file != group || !s.alone(c.feed, c.part, c.key) || s.rejects(c.key) {
			s.mu.Unlock()
			return s.reload()
		}
		p := viewDoc(group, fo, &s.memo)
		s.compared.Add(1)
		if p.hash == old.Hash && p.source == old.Source && p.created.Equal(old.Created) {
			continue
		}
		o := fo.obj
		if s.memo.validate(p) != nil || !slices.Equal(claims(old), claims(o)) {
			s.mu.Unlock()
			return s.reload()
		}
		next = append(next, o)
		rules = rules || o.Kind == KindDestinationRule
	}
	defer s.mu.Unlock()
	if len(next) == 0 {
		return false
	}
	for _, o := range next {
		k := o.Key()
		s.inForce[k] = held{o, s.inForce[k].file}
	}
	if rules {
		s.merged = mergedRules(heldObjects(s.inForce))
	}
	snapshotsTotal.Inc()
	s.version++
	s.snap = s.snap.Replace(s.version, next...)
	return true
}

// held is an object in force and the file (or feed group: feedGroup) it
// was read from, by key in Source.inForce: one map, one key string.
type held struct {
	obj  *model.ConfigObject
	file string
}

// heldObjects yields the objects of inForce.
func heldObjects(inForce map[string]held) iter.Seq[*model.ConfigObject] {
	return func(yield func(*model.ConfigObject) bool) {
		for _, h := range inForce {
			if !yield(h.obj) {
				return
			}
		}
	}
}

// alone: no other part of a DeltaFeed holds key. s.readMu is held.
func (s *Source) alone(feed, part int, key FeedKey) bool {
	for i, v := range s.views {
		for j := range v.parts {
			if _, ok := v.object(j, key); ok && (i != feed || j != part) {
				return false
			}
		}
	}
	return true
}

// rejects: the last read rejected an object of key. s.mu is held.
func (s *Source) rejects(key FeedKey) bool {
	for _, r := range s.rejected {
		if r.Kind == key.Kind && r.Namespace == key.Namespace && r.Name == key.Name {
			return true
		}
	}
	return false
}

// warnKey identifies a rejection for logging it once.
func warnKey(r Rejection) string {
	return fmt.Sprintf("%s\x00%s\x00%s\x00%s\x00%s\x00%t", r.Kind, r.Namespace, r.Name, r.Source, r.Reason, r.KeptLastGood)
}

// claims are the hosts o holds exclusively: a DestinationRule's host, the
// hosts of a VirtualService that applies to the mesh (gateways empty or
// holding "mesh"). VirtualServices bound only to gateways claim nothing:
// they go to istiod as they are. Short names are resolved in the
// object's namespace, so "reviews" and its full name are one host.
func claims(o *model.ConfigObject) []string {
	if vs, ok := o.Spec.(*networking.VirtualService); ok {
		if gw := vs.GetGateways(); len(gw) > 0 && !slices.Contains(gw, "mesh") {
			return nil
		}
	}
	hosts := Hosts(o)
	for i, h := range hosts {
		hosts[i] = model.ConfigHost(h, o.Namespace)
	}
	return hosts
}

func validate(p *parsed) error {
	switch p.spec.(type) {
	case *networking.VirtualService, *networking.DestinationRule, *networking.Sidecar:
		return validateSpec(p.spec)
	}
	return fmt.Errorf("unsupported kind %q", p.kind)
}

// listYAML lists the *.yaml and *.yml files of dir, sorted.
func listYAML(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || strings.HasPrefix(n, ".") || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			continue
		}
		out = append(out, filepath.Join(dir, n))
	}
	return out, nil
}

// Run reads the directories, publishes the snapshot in force, then
// watches them and publishes again after every change of what is in
// force: file events are read 100ms after the last of a burst; a feed
// change after 10ms without any is read at once, the rest of a burst once
// 10ms passed without a change, at most 100ms after its first (a read of
// a DeltaFeed costs what changed: update); with directories, everything
// is re-read every 10s in case file events were missed. It runs
// every feed until it returns. publish is called from Run's goroutine
// only. Run returns ctx.Err() when ctx ends.
func (s *Source) Run(ctx context.Context, publish func(*model.ConfigSnapshot)) error {
	kick := make(chan struct{}, 1)
	changed := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	feedCtx, stopFeeds := context.WithCancel(ctx)
	var feeds sync.WaitGroup
	defer func() { stopFeeds(); feeds.Wait() }()
	for _, f := range s.feeds {
		feeds.Go(func() {
			if err := f.Run(feedCtx, changed); err != nil && feedCtx.Err() == nil {
				s.log.Error("config source stopped", "source", f.Name(), "err", err)
			}
		})
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		s.log.Warn("cannot watch config directories; re-reading every 10s", "err", err)
	} else {
		defer w.Close()
		for _, d := range s.dirs {
			if err := w.Add(d.Path); err != nil {
				s.log.Warn("cannot watch config directory; re-reading every 10s", "dir", d.Path, "err", err)
			}
		}
	}
	s.Reload()
	publish(s.Snapshot())
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		events, errs = w.Events, w.Errors
	}
	var tickC <-chan time.Time
	if len(s.dirs) > 0 {
		tick := time.NewTicker(resync)
		defer tick.Stop()
		tickC = tick.C
	}
	dirQuiet := time.NewTimer(time.Hour)
	dirQuiet.Stop()
	defer dirQuiet.Stop()
	feedDeb := debounce.Debouncer{Quiet: feedQuiet, MaxWait: feedMaxWait, Leading: true}
	wake := time.NewTimer(time.Hour)
	wake.Stop()
	defer wake.Stop()
	for {
		var changed bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-events:
			dirQuiet.Reset(quiet)
			continue
		case <-kick:
			feedDeb.Add(time.Now())
		case <-wake.C:
		case err := <-errs:
			s.log.Warn("config directory watch error", "err", err)
			continue
		case <-tickC:
			changed = s.Reload()
		case <-dirQuiet.C:
			changed = s.Reload()
		}
		if due, wait := feedDeb.Next(time.Now()); due {
			feedDeb.Done()
			changed = s.update() || changed
		} else if feedDeb.Pending() {
			wake.Reset(wait)
		}
		if changed {
			publish(s.Snapshot())
		}
	}
}

// Validate reads dirs once, offline, and returns what would be in force
// and what would be rejected (meshfed validate --config-dir).
func Validate(dirs ...Dir) Status {
	s := New(dirs, nil)
	s.Reload()
	return s.Status()
}

// ParseObjects decodes and validates the documents of one YAML file read
// from data (named file in sources), without conflict checks: the valid
// objects and the rejections. For tests and tools.
func ParseObjects(file string, data []byte) ([]*model.ConfigObject, []Rejection) {
	ps, err := decodeFile(file, data)
	if err != nil {
		return nil, []Rejection{{Source: file, Reason: err.Error()}}
	}
	var objs []*model.ConfigObject
	var rej []Rejection
	for _, p := range ps {
		if p.err == nil {
			p.err = validate(p)
		}
		if p.err != nil {
			rej = append(rej, rejectionOf(p, p.err))
			continue
		}
		o := &model.ConfigObject{Kind: p.kind, Namespace: p.namespace, Name: p.name, Source: p.source, Hash: p.hash, File: p.file, Spec: p.spec}
		if p.node != nil {
			o.Line = p.node.Line
		}
		objs = append(objs, o)
	}
	return objs, rej
}
