package ads

import (
	"hash/maphash"
	"maps"
	"slices"
	"strconv"
	"sync"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
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

	anyType  string
	variants sync.Map // variant key → func() (*wire, error), for a Variants msg
}

// Variants is a resource whose content depends on the client reading it
// (the per-locality EDS of docs/architecture.md §3.6). Each variant is
// marshalled once, by the first stream that sends it, and shared by
// every stream whose node maps to the same key. Config dumps show the
// resource itself.
type Variants interface {
	types.Resource
	// VariantKey names the variant node reads; "" is the resource itself.
	// It is called for every response and must be cheap.
	VariantKey(node *core.Node) string
	// Variant returns the resource of a key VariantKey returned.
	Variant(key string) types.Resource
}

// wireFor is the wire form node reads: a variant's for a Variants
// resource, the resource's own otherwise.
func (r *cachedRes) wireFor(node *core.Node) (*wire, error) {
	v, ok := r.msg.(Variants)
	if !ok {
		return r.wire()
	}
	key := v.VariantKey(node)
	if key == "" {
		return r.wire()
	}
	f, ok := r.variants.Load(key)
	if !ok {
		anyType := r.wireType()
		f, _ = r.variants.LoadOrStore(key, sync.OnceValues(func() (*wire, error) {
			return marshalWire(anyType, r.name, v.Variant(key))
		}))
	}
	return f.(func() (*wire, error))()
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

func newResource(anyType, name string, msg types.Resource) *cachedRes {
	return &cachedRes{name: name, msg: msg, wire: sync.OnceValues(func() (*wire, error) {
		return marshalWire(anyType, name, msg)
	}), anyType: anyType}
}

func (r *cachedRes) wireType() string { return r.anyType }

// marshalWire serializes msg once for every response.
func marshalWire(anyType, name string, msg types.Resource) (*wire, error) {
	// go-control-plane's MarshalResource (deterministic) is the only
	// serializer of resources; the benchmarks count its calls.
	b, err := cache.MarshalResource(msg)
	if err != nil {
		return nil, err
	}
	v := cache.HashResource(b)
	a := &anypb.Any{TypeUrl: anyType, Value: b}
	return &wire{version: v, any: a, delta: &discovery.Resource{Name: name, Version: v, Resource: a}}, nil
}

// collection is the current resources of one Kind and the index of the
// subscriptions that read them.
type collection struct {
	Collection
	version uint64
	res     map[string]*cachedRes
	subs    map[string]*subscribers    // name → explicit subscribers
	wild    map[*Subscription]struct{} // wildcard subscribers reading it unscoped
	views   map[*viewColl]struct{}     // the views' parts of it (views.go)
	peak    int                        // most entries subs held since it was last rebuilt
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
	set  map[*Subscription]struct{}
}

func (c *collection) versionString() string { return strconv.FormatUint(c.version, 10) }

// store holds every collection and the subscription index. A
// subscription is indexed once per name when it subscribes and stays
// indexed until it unsubscribes or its stream ends, so an update visits
// only the subscribers of the resources it changes, and a response or an
// ACK costs nothing per subscribed name.
//
// The store has two lock domains and touches nothing of the streams':
// store.mu guards the collections, the index and each Subscription's
// names; each watcher's mu guards what the store left for its stream
// (the queue of changed subscriptions and their dirty names). Lock
// order: store.mu, then watcher.mu. A stream's own state (what the
// client holds, nonces) is the stream's, under its serve lock.
type store struct {
	mu       sync.RWMutex
	colls    map[Kind]*collection
	order    []*collection // Config.Collections order: updates are sent in it
	views    map[string]*view
	watchers map[*watcher]struct{} // every open stream's (for Rescope)
}

func newStore(colls []Collection) *store {
	s := &store{colls: map[Kind]*collection{}, views: map[string]*view{}, watchers: map[*watcher]struct{}{}}
	for _, c := range colls {
		if c.AnyTypeURL == "" {
			c.AnyTypeURL = c.Kind.TypeURL
		}
		coll := &collection{Collection: c, res: map[string]*cachedRes{},
			subs: map[string]*subscribers{}, wild: map[*Subscription]struct{}{}, views: map[*viewColl]struct{}{}}
		s.colls[c.Kind] = coll
		s.order = append(s.order, coll)
	}
	return s
}

// lookup returns the collection a class reads for a type URL: its own,
// else the shared one; nil when the store holds none.
func (s *store) lookup(c Class, typeURL string) *collection {
	if coll := s.colls[Kind{Class: c, TypeURL: typeURL}]; coll != nil {
		return coll
	}
	return s.colls[Kind{TypeURL: typeURL}]
}

// apply installs ch, then the view updates vs, in one step, and marks
// the changed names dirty on every subscriber that reads them; it wakes
// their streams, which compute and send what changed.
func (s *store) apply(ch Changes, vs []ViewUpdate) {
	var woken []*watcher
	s.mu.Lock()
	for _, coll := range s.order {
		c := ch[coll.Kind]
		if c == nil {
			continue
		}
		coll.version++
		for name, r := range c.Updated {
			coll.res[name] = newResource(coll.AnyTypeURL, name, r)
			woken = coll.mark(name, woken)
		}
		for _, name := range c.Removed {
			delete(coll.res, name)
			woken = coll.mark(name, woken)
		}
	}
	woken = s.applyViews(vs, woken)
	s.mu.Unlock()
	for _, w := range woken {
		w.wakeUp()
	}
}

// mark records name as dirty on its subscribers and appends the watchers
// newly woken. Callers hold store.mu.
func (c *collection) mark(name string, woken []*watcher) []*watcher {
	if e := c.subs[name]; e != nil {
		for sub := range e.set {
			woken = sub.markDirty(name, woken)
		}
	}
	for sub := range c.wild {
		woken = sub.markDirty(name, woken)
	}
	for vc := range c.views {
		if vc.showsShared(name) {
			for sub := range vc.wild {
				woken = sub.markDirty(name, woken)
			}
		}
	}
	return woken
}

// watcher is where the store leaves work for one stream: the
// subscriptions updates changed, in the order they changed, and a
// wake-up.
type watcher struct {
	wake chan struct{}

	mu      sync.Mutex // guards pending, queue and the dirty state of its subscriptions
	pending bool       // woken and not yet taken
	queue   []*Subscription

	// Guarded by store.mu.
	names int             // names subscribed over all its subscriptions
	node  *core.Node      // the stream's first node (Rescope asks its view)
	class Class           // the stream's class
	view  *view           // the view its stream reads (nil: unscoped)
	subs  []*Subscription // every subscription of the stream
}

func newWatcher() *watcher { return &watcher{wake: make(chan struct{}, 1)} }

func (w *watcher) wakeUp() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// take returns the subscriptions queued since the last call, in the
// order they changed.
func (w *watcher) take() []*Subscription {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending = false
	queue := w.queue
	w.queue = nil
	for _, sub := range queue {
		sub.queued = false
	}
	return queue
}

// Subscription is the store's side of one stream's subscription to one
// type URL (as go-control-plane's stream.Subscription): which names it
// subscribes to, and which of them changed since the stream last looked.
type Subscription struct {
	w       *watcher
	typeURL string
	coll    *collection // nil when the store holds no collection for the type

	// Guarded by store.mu.
	view     *view // the watcher's view when it subscribed, or moved to
	wildcard bool
	legacy   bool // no name sent yet: empty requests keep it wildcard
	names    map[string]struct{}

	// Guarded by w.mu: names whose current resource may differ from what
	// the client holds; all means every matching or known name; queued:
	// in w.queue.
	dirty  map[string]struct{}
	all    bool
	queued bool
}

// subscription returns a new, empty subscription of w to typeURL in the
// collection c (nil for a type the store does not hold).
func (s *store) subscription(w *watcher, c *collection, typeURL string) *Subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := &Subscription{w: w, typeURL: typeURL, coll: c, names: map[string]struct{}{}, view: w.view}
	w.subs = append(w.subs, sub)
	return sub
}

// markDirty records name and appends the watcher to woken if it was not
// pending. Callers hold store.mu.
func (sub *Subscription) markDirty(name string, woken []*watcher) []*watcher {
	w := sub.w
	w.mu.Lock()
	if sub.dirty == nil {
		sub.dirty = map[string]struct{}{}
	}
	sub.dirty[name] = struct{}{}
	first := sub.queueLocked()
	w.mu.Unlock()
	if first {
		woken = append(woken, w)
	}
	return woken
}

// queueLocked queues sub on its watcher and marks the watcher pending;
// it reports whether it was not pending (it must be woken). Callers hold
// the watcher's mu.
func (sub *Subscription) queueLocked() bool {
	w := sub.w
	if !sub.queued {
		sub.queued = true
		w.queue = append(w.queue, sub)
	}
	first := !w.pending
	w.pending = true
	return first
}

// addDirty records name from the stream's own goroutine, which computes
// its response next (no wake-up needed). Callers hold store.mu.
func (sub *Subscription) addDirty(name string) {
	sub.w.mu.Lock()
	if sub.dirty == nil {
		sub.dirty = map[string]struct{}{}
	}
	sub.dirty[name] = struct{}{}
	sub.w.mu.Unlock()
}

// markAll makes the next computation consider every matching or known
// name. Callers hold store.mu.
func (sub *Subscription) markAll() {
	sub.w.mu.Lock()
	sub.all = true
	sub.w.mu.Unlock()
}

// takeDirty returns and clears the dirty state.
func (sub *Subscription) takeDirty() (names map[string]struct{}, all bool) {
	sub.w.mu.Lock()
	defer sub.w.mu.Unlock()
	names, all = sub.dirty, sub.all
	sub.dirty, sub.all = nil, false
	return names, all
}

// addName subscribes ts to name. Callers hold store.mu.
func (s *store) addName(ts *Subscription, name string) {
	if _, ok := ts.names[name]; ok {
		return
	}
	ts.w.names++
	subscribedNames.Inc()
	if ts.coll == nil {
		ts.names[name] = struct{}{}
		return
	}
	e := ts.coll.subs[name]
	if e == nil {
		e = &subscribers{name: name, set: map[*Subscription]struct{}{}}
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
func (s *store) removeName(ts *Subscription, name string) {
	if _, ok := ts.names[name]; !ok {
		return
	}
	delete(ts.names, name)
	ts.w.names--
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
func (s *store) setWildcard(ts *Subscription, w bool) {
	if ts.wildcard == w {
		return
	}
	ts.wildcard = w
	if ts.coll != nil {
		if w {
			ts.wildSet()[ts] = struct{}{}
		} else {
			delete(ts.wildSet(), ts)
		}
	}
	ts.markAll()
}

const wildcardName = "*"

// subscribeDelta applies a delta request's subscription changes, with
// the semantics of go-control-plane's stream.Subscription (legacy
// wildcard until the first name; unsubscribing a name while wildcard
// makes the server resend it or report it removed). first is the
// stream's first request for the type. known is what the client holds
// (the stream's, passed by its goroutine as go-control-plane passes
// Subscription.ReturnedResources to a cache): names unsubscribed are
// forgotten, or marked for a resend while wildcard.
func (s *store) subscribeDelta(ts *Subscription, known map[string]string, first bool, sub, unsub []string) {
	if !first && len(sub) == 0 && len(unsub) == 0 {
		return // an ACK or NACK: nothing to index
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if first {
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
			known[n] = ""
			ts.addDirty(n)
		} else {
			delete(known, n)
		}
		s.removeName(ts, n)
	}
	if len(unsub) > 0 && ts.coll != nil {
		ts.coll.shrink()
	}
}

// subscribeSotw applies a SotW request's resource_names (the full set),
// with the semantics of go-control-plane's stream.Subscription: names no
// longer requested are forgotten from known (what the client holds, the
// stream's), so subscribing again resends them. The caller skips a list
// equal to the last one (clients repeat theirs on every ACK).
func (s *store) subscribeSotw(ts *Subscription, known map[string]string, first bool, names []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if first {
		ts.legacy = true
		s.setWildcard(ts, len(names) == 0)
		ts.markAll()
	}
	if ts.legacy {
		if len(names) == 0 {
			return
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
		for n := range known {
			if _, ok := want[n]; !ok {
				delete(known, n)
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
func (s *store) drop(w *watcher, subs []*Subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ts := range subs {
		for n := range ts.names {
			s.removeName(ts, n)
		}
		if ts.coll != nil {
			delete(ts.wildSet(), ts)
			ts.coll.shrink()
		}
	}
	if w.view != nil {
		w.view.streams--
		w.view = nil
	}
	w.subs = nil
	delete(s.watchers, w)
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
// known (the stream's) is read only for all.
func (s *store) snapshot(ts *Subscription, known map[string]string, dirty map[string]struct{}, all, full bool) (cands []candidate, matching []*cachedRes, version string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	coll := ts.coll
	match := func(name string) *cachedRes {
		r := ts.resource(name)
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
			ts.eachVisible(func(n string, _ *cachedRes) { add(n) })
		}
		for n := range ts.names {
			add(n)
		}
		for n := range known {
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
		if ts.wildcard && ts.viewColl() == nil {
			matching = slices.Collect(maps.Values(coll.res))
		} else if ts.wildcard {
			ts.eachVisible(func(_ string, r *cachedRes) { matching = append(matching, r) })
		} else {
			matching = make([]*cachedRes, 0, len(ts.names))
			for n := range ts.names {
				if r := ts.resource(n); r != nil {
					matching = append(matching, r)
				}
			}
		}
	}
	return cands, matching, coll.versionString()
}

// matching returns the current resources ts matches, by name.
func (s *store) matching(ts *Subscription) map[string]types.Resource {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ts.coll == nil {
		return nil
	}
	out := map[string]types.Resource{}
	if ts.wildcard {
		ts.eachVisible(func(n string, r *cachedRes) { out[n] = r.msg })
	} else {
		for n := range ts.names {
			if r := ts.resource(n); r != nil {
				out[n] = r.msg
			}
		}
	}
	return out
}

// count returns how many current resources ts matches.
func (s *store) count(ts *Subscription) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ts.coll == nil {
		return 0
	}
	if ts.wildcard {
		if vc := ts.viewColl(); vc != nil {
			return vc.size(ts.coll)
		}
		return len(ts.coll.res)
	}
	n := 0
	for name := range ts.names {
		if ts.resource(name) != nil {
			n++
		}
	}
	return n
}
