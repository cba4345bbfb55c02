package xds

import (
	"hash/maphash"
	"maps"
	"slices"
	"strconv"
	"sync"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// cachedRes is one version of a named resource. Its wire form is computed
// once, by the first stream that sends it, and shared by every response.
type cachedRes struct {
	name string
	msg  types.Resource
	wire func() (*wire, error) // sync.OnceValues
}

// wire is a resource serialized once: its version (a hash of the bytes,
// stable across restarts, so delta clients can resume with
// initial_resource_versions), and the read-only Any and delta Resource
// wrappers every response of every stream reuses.
type wire struct {
	version string
	any     *anypb.Any
	delta   *discovery.Resource
}

func newResource(typeURL, name string, msg types.Resource) *cachedRes {
	return &cachedRes{name: name, msg: msg, wire: sync.OnceValues(func() (*wire, error) {
		// go-control-plane's MarshalResource (deterministic) is the only
		// serializer of resources; the benchmarks count its calls.
		b, err := cache.MarshalResource(msg)
		if err != nil {
			return nil, err
		}
		v := cache.HashResource(b)
		a := &anypb.Any{TypeUrl: anyTypeURL(typeURL), Value: b}
		return &wire{version: v, any: a, delta: &discovery.Resource{Name: name, Version: v, Resource: a}}, nil
	})}
}

// collection is the current resources of one Kind and the index of the
// subscriptions that read them.
type collection struct {
	kind    Kind
	version uint64
	res     map[string]*cachedRes
	subs    map[string]*subscribers // name → explicit subscribers
	wild    map[*typeSub]struct{}   // wildcard subscribers
	peak    int                     // most entries subs held since it was last rebuilt
}

// shrinkMin is the size below which the subscription index is not rebuilt.
const shrinkMin = 1024

// shrink rebuilds the subscription index once it holds under a quarter of
// its peak: a Go map keeps its peak's memory after deletions, so without
// this one stream that subscribed to many names would leave that memory
// held after it ended. Callers hold store.mu.
func (c *collection) shrink() {
	if c.peak < shrinkMin || len(c.subs) > c.peak/4 {
		return
	}
	m := make(map[string]*subscribers, len(c.subs))
	for k, v := range c.subs {
		m[k] = v
	}
	c.subs = m
	c.peak = len(m)
}

// subscribers of one name. Every subscription refers to the one copy of
// the name held here, so requests' strings are not kept per stream.
type subscribers struct {
	name string
	set  map[*typeSub]struct{}
}

func (c *collection) versionString() string { return strconv.FormatUint(c.version, 10) }

// store holds every collection and the subscription index. A
// subscription is indexed once per name when it subscribes and stays
// indexed until it unsubscribes or its stream ends, so an update visits
// only the subscribers of the resources it changes, and a response or an
// ACK costs nothing per subscribed name.
//
// Lock order: store.mu, then stream.mu.
type store struct {
	mu    sync.RWMutex
	colls map[Kind]*collection
}

func newStore() *store {
	s := &store{colls: map[Kind]*collection{}}
	for _, k := range Kinds {
		s.colls[k] = &collection{kind: k, res: map[string]*cachedRes{},
			subs: map[string]*subscribers{}, wild: map[*typeSub]struct{}{}}
	}
	return s
}

// applyOrder is Kinds in the order Envoy applies types (CDS, EDS, LDS,
// RDS), then the MCP collections: a stream sends the types an update
// changed in that order.
var applyOrder = func() []Kind {
	var out []Kind
	for _, u := range slices.Concat(TypeURLs, MCPTypeURLs()) {
		for _, k := range Kinds {
			if k.TypeURL == u {
				out = append(out, k)
			}
		}
	}
	return out
}()

// apply installs ch and marks the changed names dirty on every subscriber;
// it wakes their streams, which compute and send what changed.
func (s *store) apply(ch Changes) {
	var woken []*stream
	s.mu.Lock()
	for _, k := range applyOrder {
		c := ch[k]
		coll := s.colls[k]
		if coll == nil || c == nil {
			continue
		}
		coll.version++
		for name, r := range c.Updated {
			coll.res[name] = newResource(k.TypeURL, name, r)
			woken = coll.mark(name, woken)
		}
		for _, name := range c.Removed {
			delete(coll.res, name)
			woken = coll.mark(name, woken)
		}
	}
	s.mu.Unlock()
	for _, st := range woken {
		st.wakeUp()
	}
}

// mark records name as dirty on its subscribers and appends the streams
// newly woken. Callers hold store.mu.
func (c *collection) mark(name string, woken []*stream) []*stream {
	if e := c.subs[name]; e != nil {
		for ts := range e.set {
			woken = ts.markDirty(name, woken)
		}
	}
	for ts := range c.wild {
		woken = ts.markDirty(name, woken)
	}
	return woken
}

// typeSub is one stream's subscription to one type URL.
type typeSub struct {
	st      *stream
	typeURL string
	coll    *collection // nil when meshfed does not serve the type
	status  *typeState

	// Guarded by store.mu.
	wildcard bool
	legacy   bool // no name sent yet: empty requests keep it wildcard
	names    map[string]struct{}

	// Guarded by st.mu: names whose current resource may differ from what
	// the client holds; all means every matching or known name; queued:
	// in st.queue.
	dirty  map[string]struct{}
	all    bool
	queued bool

	// Guarded by st.serve.
	known     map[string]string // name → version the client holds
	namesHash uint64            // SotW: hash of the last resource_names applied
	inflight  bool              // a response awaits the client's next request
	nonce     string            // of the last response
}

// markDirty records name and appends st to woken if it was not pending.
// Callers hold store.mu.
func (ts *typeSub) markDirty(name string, woken []*stream) []*stream {
	st := ts.st
	st.mu.Lock()
	if ts.dirty == nil {
		ts.dirty = map[string]struct{}{}
	}
	ts.dirty[name] = struct{}{}
	if !ts.queued {
		ts.queued = true
		st.queue = append(st.queue, ts)
	}
	first := !st.pending
	st.pending = true
	st.mu.Unlock()
	if first {
		woken = append(woken, st)
	}
	return woken
}

// addDirty records name from the stream's own goroutine, which computes
// its response next (no wake-up needed). Callers hold store.mu.
func (ts *typeSub) addDirty(name string) {
	ts.st.mu.Lock()
	if ts.dirty == nil {
		ts.dirty = map[string]struct{}{}
	}
	ts.dirty[name] = struct{}{}
	ts.st.mu.Unlock()
}

// markAll makes the next computation consider every matching or known
// name. Callers hold store.mu.
func (ts *typeSub) markAll() {
	ts.st.mu.Lock()
	ts.all = true
	ts.st.mu.Unlock()
}

// takeDirty returns and clears the dirty state.
func (ts *typeSub) takeDirty() (names map[string]struct{}, all bool) {
	ts.st.mu.Lock()
	defer ts.st.mu.Unlock()
	names, all = ts.dirty, ts.all
	ts.dirty, ts.all = nil, false
	return names, all
}

// addName subscribes ts to name. Callers hold store.mu.
func (s *store) addName(ts *typeSub, name string) {
	if _, ok := ts.names[name]; ok {
		return
	}
	ts.st.names++
	subscribedNames.Inc()
	if ts.coll == nil {
		ts.names[name] = struct{}{}
		return
	}
	e := ts.coll.subs[name]
	if e == nil {
		e = &subscribers{name: name, set: map[*typeSub]struct{}{}}
		if r := ts.coll.res[name]; r != nil {
			e.name = r.name
		}
		ts.coll.subs[name] = e
		ts.coll.peak = max(ts.coll.peak, len(ts.coll.subs))
	}
	ts.names[e.name] = struct{}{}
	e.set[ts] = struct{}{}
	ts.addDirty(e.name)
}

// removeName unsubscribes ts from name. Callers hold store.mu.
func (s *store) removeName(ts *typeSub, name string) {
	if _, ok := ts.names[name]; !ok {
		return
	}
	delete(ts.names, name)
	ts.st.names--
	subscribedNames.Dec()
	if ts.coll == nil {
		return
	}
	if e := ts.coll.subs[name]; e != nil {
		delete(e.set, ts)
		if len(e.set) == 0 {
			delete(ts.coll.subs, name)
		}
	}
}

// setWildcard changes whether ts subscribes to every resource. Callers
// hold store.mu.
func (s *store) setWildcard(ts *typeSub, w bool) {
	if ts.wildcard == w {
		return
	}
	ts.wildcard = w
	if ts.coll != nil {
		if w {
			ts.coll.wild[ts] = struct{}{}
		} else {
			delete(ts.coll.wild, ts)
		}
	}
	ts.markAll()
}

const wildcardName = "*"

// subscribeDelta applies a delta request's subscription changes, with
// the semantics of go-control-plane's stream.Subscription (legacy
// wildcard until the first name; unsubscribing a name while wildcard
// makes the server resend it or report it removed). first is the
// stream's first request for the type, whose initial_resource_versions
// are what the client already holds.
func (s *store) subscribeDelta(ts *typeSub, first bool, sub, unsub []string, initial map[string]string) {
	if !first && len(sub) == 0 && len(unsub) == 0 {
		return // an ACK or NACK: nothing to index
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if first {
		ts.known = maps.Clone(initial) // the request's map is not ours to write
		if ts.known == nil {
			ts.known = map[string]string{}
		}
		ts.legacy = true
		s.setWildcard(ts, len(sub) == 0)
		ts.markAll()
	}
	if ts.legacy {
		if len(sub) == 0 {
			return
		}
		ts.legacy = false
	}
	for _, n := range sub {
		if n == wildcardName {
			s.setWildcard(ts, true)
			continue
		}
		s.addName(ts, n)
	}
	for _, n := range unsub {
		if n == wildcardName {
			s.setWildcard(ts, false)
			continue
		}
		if _, ok := ts.names[n]; ok && ts.wildcard {
			ts.known[n] = ""
			ts.addDirty(n)
		} else {
			delete(ts.known, n)
		}
		s.removeName(ts, n)
	}
	if len(unsub) > 0 && ts.coll != nil {
		ts.coll.shrink()
	}
}

// subscribeSotw applies a SotW request's resource_names (the full set),
// with the semantics of go-control-plane's stream.Subscription: names no
// longer requested are forgotten, so subscribing again resends them. It
// reports whether the subscription may have changed.
func (s *store) subscribeSotw(ts *typeSub, first bool, names []string) bool {
	// Clients repeat their list on every ACK: applying the same list
	// again changes nothing, so a hash of the last one spares the work.
	h := hashNames(names)
	if !first && h == ts.namesHash {
		return false
	}
	ts.namesHash = h
	s.mu.Lock()
	defer s.mu.Unlock()
	if first {
		ts.known = map[string]string{}
		ts.legacy = true
		s.setWildcard(ts, len(names) == 0)
		ts.markAll()
	}
	if ts.legacy {
		if len(names) == 0 {
			return true
		}
		ts.legacy = false
	}
	want := make(map[string]struct{}, len(names))
	explicit := false
	for _, n := range names {
		if n == wildcardName {
			explicit = true
		} else {
			want[n] = struct{}{}
		}
	}
	if !explicit {
		for n := range ts.known {
			if _, ok := want[n]; !ok {
				delete(ts.known, n)
			}
		}
	}
	s.setWildcard(ts, explicit)
	for n := range ts.names {
		if _, ok := want[n]; !ok {
			s.removeName(ts, n)
		}
	}
	for n := range want {
		s.addName(ts, n)
	}
	if ts.coll != nil {
		ts.coll.shrink()
	}
	return true
}

// namesSeed keys the hash of SotW resource_names lists.
var namesSeed = maphash.MakeSeed()

// hashNames hashes a SotW request's resource_names, in order.
func hashNames(names []string) uint64 {
	var h maphash.Hash
	h.SetSeed(namesSeed)
	for _, n := range names {
		h.WriteString(n)
		h.WriteByte(0)
	}
	return h.Sum64()
}

// drop removes every subscription of a closing stream from the index.
func (s *store) drop(subs []*typeSub) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ts := range subs {
		for n := range ts.names {
			s.removeName(ts, n)
		}
		if ts.coll != nil {
			delete(ts.coll.wild, ts)
			ts.coll.shrink()
		}
	}
}

// candidate is a name to compare: the current resource if the
// subscription matches it, else nil.
type candidate struct {
	name string
	r    *cachedRes
}

// snapshot returns, for dirty names (every matching or known name with
// all), the current resource each subscription matches, the collection
// version and, when full is set, every resource the subscription matches.
// known is read only for all; callers hold st.serve.
func (s *store) snapshot(ts *typeSub, dirty map[string]struct{}, all, full bool) (cands []candidate, matching []*cachedRes, version string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	coll := ts.coll
	match := func(name string) *cachedRes {
		r := coll.res[name]
		if r == nil {
			return nil
		}
		if ts.wildcard {
			return r
		}
		if _, ok := ts.names[name]; ok {
			return r
		}
		return nil
	}
	if all {
		seen := map[string]struct{}{}
		add := func(n string) {
			if _, ok := seen[n]; !ok {
				seen[n] = struct{}{}
				cands = append(cands, candidate{n, match(n)})
			}
		}
		if ts.wildcard {
			for n := range coll.res {
				add(n)
			}
		}
		for n := range ts.names {
			add(n)
		}
		for n := range ts.known {
			add(n)
		}
		for n := range dirty {
			add(n)
		}
	} else {
		cands = make([]candidate, 0, len(dirty))
		for n := range dirty {
			cands = append(cands, candidate{n, match(n)})
		}
	}
	if full {
		if ts.wildcard {
			matching = slices.Collect(maps.Values(coll.res))
		} else {
			matching = make([]*cachedRes, 0, len(ts.names))
			for n := range ts.names {
				if r := coll.res[n]; r != nil {
					matching = append(matching, r)
				}
			}
		}
	}
	return cands, matching, coll.versionString()
}

// matching returns the names of the current resources ts matches, sorted,
// and the resources by name.
func (s *store) matching(ts *typeSub) ([]string, map[string]types.Resource) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ts.coll == nil {
		return nil, nil
	}
	out := map[string]types.Resource{}
	if ts.wildcard {
		for n, r := range ts.coll.res {
			out[n] = r.msg
		}
	} else {
		for n := range ts.names {
			if r := ts.coll.res[n]; r != nil {
				out[n] = r.msg
			}
		}
	}
	return slices.Sorted(maps.Keys(out)), out
}

// count returns how many current resources ts matches.
func (s *store) count(ts *typeSub) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ts.coll == nil {
		return 0
	}
	if ts.wildcard {
		return len(ts.coll.res)
	}
	n := 0
	for name := range ts.names {
		if _, ok := ts.coll.res[name]; ok {
			n++
		}
	}
	return n
}
