package registries

import (
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshfed/meshfed/model"
)

// The publishing tail every platform registry shares
// (docs/architecture.md §3.1.1). A platform watches its backend its own way
// and hands each converted item (a service, a file...) to a Publisher
// under a key; the Publisher keeps the last conversion of every key,
// assembles the shard's state in key order (or, to a DeltaSink, only the
// services of the keys that changed: Update.Delta), hands it to the Sink
// as an Update only when it changed or the backend's condition did (never the
// same Update twice), logs failure/recovery transitions once, and observes
// meshfed_registry_ingest_latency_seconds. It holds no policy: what the
// Sink serves, and when, is the Sink's.
// As in Prometheus' discovery/refresh, the platform supplies the function
// (what a key converts to, when the state is complete) and the loop's tail
// is shared.

// Converted is what one key of a registry's state converts to: the
// services it yields (none when nothing valid is left) and every item
// rejected on the way. A Converted handed to a Publisher is never modified
// afterwards: a new conversion builds new values.
type Converted struct {
	Services []model.Service
	Rejected []model.Rejection
}

// One returns the Converted of a key that yields at most one service: svc
// when ok, none otherwise.
func One(svc model.Service, ok bool, rejected []model.Rejection) Converted {
	c := Converted{Rejected: rejected}
	if ok {
		c.Services = []model.Service{svc}
	}
	return c
}

// OK reports whether the key yields a service.
func (c Converted) OK() bool { return len(c.Services) > 0 }

// Service returns the key's first service (the zero Service if none).
func (c Converted) Service() model.Service {
	if len(c.Services) == 0 {
		return model.Service{}
	}
	return c.Services[0]
}

// Empty reports whether the key yields nothing at all, neither a service
// nor a rejection.
func (c Converted) Empty() bool { return len(c.Services) == 0 && len(c.Rejected) == 0 }

// Entry is one key with its conversion, as Assemble sees it.
type Entry[K comparable] struct {
	Key K
	Converted
}

// PublisherOptions configure a Publisher.
type PublisherOptions[K comparable] struct {
	// Compare orders keys; the state is assembled in this order. Required;
	// it returns 0 for equal keys only.
	Compare func(a, b K) int
	// Assemble turns every key's conversion, in key order, into the
	// shard's state. Nil: each entry's services then its rejections,
	// concatenated (Concat). A platform whose keys can collide (two
	// services with one hostname) checks that here. services must not be
	// nil (empty for none). entries is the Publisher's: read it during the
	// call only.
	Assemble func(entries []Entry[K]) (services []model.Service, rejected []model.Rejection)
	// CompleteWhileDegraded says the state is complete whenever the
	// platform calls Flush, even with a failing condition (the kube
	// registry flushes only once its informers listed everything; its
	// condition is the connection's health). Without it, a state flushed
	// with a failing condition is published as not Complete (Update): a
	// partial state, e.g. a cluster or file that cannot be read, which the
	// sink may refuse as a Run's first state while it serves another.
	CompleteWhileDegraded bool
	// ConcatUnlessDuplicate says Assemble returns what Concat does
	// whenever no two services of the state have one hostname (as DNS
	// names compare: case-insensitively, without a trailing dot), as an
	// Assemble that only rejects colliding hostnames does: the Publisher
	// may then send such states to a DeltaSink as deltas (see Flush), as
	// it does with the default Assemble.
	ConcatUnlessDuplicate bool
}

// Publisher is one Run's publishing tail. Build one per Run with
// NewPublisher. Set, Put, Delete, Retain, Changed, Forget, State and Len
// may be called from any goroutine. Flush, Report, Condition and Published
// read and write the condition the sink last heard without a lock: call them
// from one goroutine (the Run's loop), never concurrently with each
// other.
type Publisher[K comparable] struct {
	sink   Sink
	common Common
	shard  model.ShardKey
	log    *slog.Logger
	ingest interface{ Observe(float64) }
	opts   PublisherOptions[K]

	mu   sync.Mutex
	conv map[K]Converted
	// entries is conv in key order, nil when a key came or went since it
	// was sorted: a change of values only, the usual edit of a registry
	// with a key per service, updates its entry (found by binary search)
	// without sorting or looking up every key again.
	entries []Entry[K]
	// With the default Assemble (concat), flat is the services last
	// assembled (immutable once handed out: the model's contract) and
	// offs each entry's first index in it; patched lists the entries whose
	// services changed since, each as many as before. The next state is
	// flat copied at once with those entries written over, rather than
	// every entry appended again: a change costs one copy of the state.
	concat  bool
	deltas  bool // concat, or Assemble is Concat unless a duplicate
	flat    []model.Service
	offs    []int
	flatOK  bool
	patched []int
	// With the default Assemble, was holds each key changed since the
	// last publish with its conversion then (the zero Converted for a key
	// that was not known), hosts counts the hostnames of the state and
	// dups those counted more than once, and rejected is every rejection
	// in key order when rejOK: what a delta needs (see Flush).
	was      map[K]Converted
	hosts    map[string]int
	dups     int
	nEps     int // endpoints of the state
	rejected []model.Rejection
	rejOK    bool
	dirty    bool      // conv changed since the last publish
	pending  time.Time // oldest change not yet published; zero if none

	// Owned by the flushing goroutine.
	sent bool      // a state went out in this Run
	told Condition // the condition the sink last heard (healthy: none yet)
	// lastServices and lastRejected are the state Flush last published.
	lastServices []model.Service
	lastRejected []model.Rejection
	lastDelta    bool   // the last publish was a delta: Sent assembles
	sentDups     bool   // the last state published has a duplicate hostname: the next is full
	sent3        [3]int // services, endpoints and rejections last published (SentCounts)
}

// NewPublisher returns the publishing tail of one Run of the registry c,
// publishing to sink. log should be the registry's logger; nil discards.
func NewPublisher[K comparable](c Common, sink Sink, log *slog.Logger, opts PublisherOptions[K]) *Publisher[K] {
	if opts.Compare == nil {
		panic("registries.NewPublisher: Compare is required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	concat := opts.Assemble == nil
	if concat {
		opts.Assemble = Concat[K]
	}
	return &Publisher[K]{
		concat: concat,
		deltas: concat || opts.ConcatUnlessDuplicate,
		sink:   sink,
		common: c,
		shard:  c.Shard(),
		log:    log,
		ingest: ingestLatency.WithLabelValues(c.Name, c.Kind),
		opts:   opts,
		conv:   map[K]Converted{},
		was:    map[K]Converted{},
		hosts:  map[string]int{},
	}
}

// Concat is the default Assemble: every entry's services, then every
// entry's rejections, in key order.
func Concat[K comparable](entries []Entry[K]) ([]model.Service, []model.Rejection) {
	services := make([]model.Service, 0, len(entries))
	var rejected []model.Rejection
	for _, e := range entries {
		services = append(services, e.Services...)
		rejected = append(rejected, e.Rejected...)
	}
	return services, rejected
}

// Set stores key's conversion and reports whether it differs from the one
// stored before (deep equality). An Empty conversion deletes the key.
// Set and Put store the conversion with its endpoints' defaults filled in
// (Common.FillDefaults, on a copy of what lacks them), so that the
// aggregator's gate shares the endpoints it is published with instead of
// copying them.
func (p *Publisher[K]) Set(key K, c Converted) bool {
	c = p.common.fillDefaults(c)
	p.mu.Lock()
	defer p.mu.Unlock()
	old, had := p.conv[key]
	switch {
	case c.Empty() && !had:
		return false
	case c.Empty():
		delete(p.conv, key)
		p.entries = nil
		p.track(key, old, Converted{})
	case had && reflect.DeepEqual(old, c):
		return false
	default:
		p.store(key, c, had)
	}
	p.dirty = true
	return true
}

// Put stores key's conversion without comparing it with the previous one:
// for callers that already know it changed.
func (p *Publisher[K]) Put(key K, c Converted) {
	c = p.common.fillDefaults(c)
	p.mu.Lock()
	defer p.mu.Unlock()
	_, had := p.conv[key]
	p.store(key, c, had)
	p.dirty = true
}

// store sets key's conversion (had: the key was known). Called with mu
// held.
func (p *Publisher[K]) store(key K, c Converted, had bool) {
	p.track(key, p.conv[key], c)
	p.conv[key] = c
	if !had {
		p.entries = nil
	} else if i, ok := p.entry(key); !ok {
		p.entries = nil
	} else {
		if p.flatOK && len(p.entries[i].Services) == len(c.Services) {
			p.patched = append(p.patched, i)
		} else {
			p.flatOK = false
		}
		p.entries[i].Converted = c
	}
}

// Delete forgets key and reports whether it was known.
func (p *Publisher[K]) Delete(key K) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	old, had := p.conv[key]
	if had {
		delete(p.conv, key)
		p.entries = nil
		p.dirty = true
		p.track(key, old, Converted{})
	}
	return had
}

// Retain forgets every key keep rejects and reports whether any was known.
func (p *Publisher[K]) Retain(keep func(K) bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conv)
	maps.DeleteFunc(p.conv, func(k K, c Converted) bool {
		if keep(k) {
			return false
		}
		p.track(k, c, Converted{})
		return true
	})
	if len(p.conv) != n {
		p.entries = nil
		p.dirty = true
		return true
	}
	return false
}

// track records that key's conversion changes from old to c, for the
// next delta (see was). Called with mu held.
func (p *Publisher[K]) track(key K, old, c Converted) {
	if !p.deltas {
		return
	}
	if _, ok := p.was[key]; !ok {
		p.was[key] = old
	}
	for _, s := range old.Services {
		p.nEps -= len(s.Endpoints)
		h := hostKey(s.Hostname)
		switch p.hosts[h]--; p.hosts[h] {
		case 0:
			delete(p.hosts, h)
		case 1:
			p.dups--
		}
	}
	for _, s := range c.Services {
		p.nEps += len(s.Endpoints)
		h := hostKey(s.Hostname)
		if p.hosts[h]++; p.hosts[h] == 2 {
			p.dups++
		}
	}
	if len(old.Rejected) > 0 || len(c.Rejected) > 0 {
		p.rejOK = false
	}
}

// hostKey is a hostname as a DNS name compares (case-insensitively,
// without a trailing dot): two services of a state whose hostnames have
// one key are duplicates, and the order of the state decides which one
// the sink serves, so such a state is published in full.
func hostKey(h string) string { return strings.ToLower(strings.TrimSuffix(h, ".")) }

// Len is the number of keys stored.
func (p *Publisher[K]) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conv)
}

// Changed records that a change the backend announced at at (when its
// answer, push or event arrived) waits to be published. The next Flush
// observes the ingest latency from the oldest such time if it publishes,
// and drops the times if it does not (they changed nothing).
func (p *Publisher[K]) Changed(at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending.IsZero() || at.Before(p.pending) {
		p.pending = at
	}
}

// Forget drops the recorded change times: the changes they announced
// turned out to change nothing.
func (p *Publisher[K]) Forget() {
	p.mu.Lock()
	p.pending = time.Time{}
	p.mu.Unlock()
}

// Flush publishes the assembled state with condition c when the state
// changed since the last publish, nothing was published yet in this Run,
// or the backend is healthy again while the sink last heard it failing
// (an outage ended: the state is published again, which says so).
// Otherwise it only reports c, if it differs from what the sink last heard
// (Report). A state flushed with a failing c is current as far as it goes
// while part of the backend fails (one broken file of a directory): it is
// published with c in the same Update, marked not Complete unless
// PublisherOptions.CompleteWhileDegraded. What the sink does with a
// partial state (it may keep one it already serves) is its business.
// Flush reports whether it published.
func (p *Publisher[K]) Flush(c Condition) bool {
	p.mu.Lock()
	if !p.dirty && p.sent && (c.Failing() || !p.told.Failing()) {
		p.pending = time.Time{} // the changes recorded changed nothing
		p.mu.Unlock()
		p.Report(c)
		return false
	}
	u := Update{HasState: true, Complete: !c.Failing() || p.opts.CompleteWhileDegraded, Condition: c}
	var counts [3]int
	if p.deltas && p.sent && p.dups == 0 && !p.sentDups && TakesDelta(p.sink) {
		u.Delta = true
		u.Services, u.Removed, u.Rejected = p.delta()
		counts = [3]int{len(p.hosts), p.nEps, len(u.Rejected)}
	} else {
		u.Services, u.Rejected = p.assemble()
		counts = [3]int{len(u.Services), 0, len(u.Rejected)}
		for i := range u.Services {
			counts[1] += len(u.Services[i].Endpoints)
		}
	}
	if len(p.was) > 0 {
		p.was = map[K]Converted{} // not clear: a cleared map keeps its size, and ranging over it costs that
	}
	pending, dups := p.pending, p.dups > 0
	p.dirty, p.pending = false, time.Time{}
	p.mu.Unlock()

	p.sink.Publish(p.shard, u)
	if !pending.IsZero() {
		p.ingest.Observe(time.Since(pending).Seconds())
	}
	p.transition(c, counts[0])
	p.sent3 = counts
	p.sent, p.told = true, c
	p.lastDelta, p.sentDups = u.Delta, dups
	p.lastServices, p.lastRejected = nil, nil
	if !u.Delta {
		p.lastServices, p.lastRejected = u.Services, u.Rejected
	}
	return true
}

// delta returns the services of the keys changed since the last publish,
// the hostnames they no longer yield, and every rejection: a change of k
// keys costs O(k), not O(keys), unless rejections changed. Called with mu
// held, with the default Assemble (or one that is Concat unless a
// duplicate) and no duplicate hostname.
func (p *Publisher[K]) delta() (changed []model.Service, removed []string, rejected []model.Rejection) {
	keys := slices.SortedFunc(maps.Keys(p.was), p.opts.Compare)
	yields := make(map[string]bool)
	for _, k := range keys {
		for _, s := range p.conv[k].Services {
			changed = append(changed, s)
			yields[s.Hostname] = true
		}
	}
	for _, k := range keys {
		for _, s := range p.was[k].Services {
			// Unchanged keys yield none of these: the state published
			// last had no duplicate.
			if !yields[s.Hostname] {
				yields[s.Hostname] = true // listed once
				removed = append(removed, s.Hostname)
			}
		}
	}
	if !p.rejOK {
		p.rejected = nil
		if p.entries == nil {
			p.sortEntries()
		}
		for i := range p.entries {
			p.rejected = append(p.rejected, p.entries[i].Rejected...)
		}
		p.rejOK = true
	}
	// The flat state of the full form is not kept up to date meanwhile.
	p.flat, p.flatOK, p.patched = nil, false, nil
	return changed, removed, p.rejected
}

// Sent returns the state Flush last published in this Run (nil before
// the first), as the sink received it: read it, never modify it. Call it
// from the flushing goroutine. After a delta it is assembled (as State,
// O(keys)).
func (p *Publisher[K]) Sent() ([]model.Service, []model.Rejection) {
	if p.lastDelta {
		return p.State()
	}
	return p.lastServices, p.lastRejected
}

// SentCounts returns the numbers of services, endpoints and rejections
// of the state Flush last published in this Run, without assembling it.
// Call it from the flushing goroutine.
func (p *Publisher[K]) SentCounts() (services, endpoints, rejected int) {
	return p.sent3[0], p.sent3[1], p.sent3[2]
}

// Confirm sends the state last published again, marked Update.Confirm,
// for a registry that publishes only changes to confirm a state the sink
// may hold back (the hold-down): the sink applies it only while it holds
// an update of the shard. It sends nothing, and reports false, before the
// first publish of the Run, while the backend fails, or when a change is
// waiting for Flush (Flush sends that).
func (p *Publisher[K]) Confirm() bool {
	p.mu.Lock()
	if !p.sent || p.dirty || p.told.Failing() {
		p.mu.Unlock()
		return false
	}
	services, rejected := p.assemble()
	p.mu.Unlock()
	p.sink.Publish(p.shard, Update{HasState: true, Services: services, Rejected: rejected, Complete: true, Confirm: true})
	return true
}

// State returns the state as Flush would publish it now.
func (p *Publisher[K]) State() ([]model.Service, []model.Rejection) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.assemble()
}

// assemble runs Assemble over every key in order. Called with mu held.
func (p *Publisher[K]) assemble() ([]model.Service, []model.Rejection) {
	if p.entries == nil {
		p.sortEntries()
	}
	if p.concat {
		return p.assembleConcat()
	}
	services, rejected := p.opts.Assemble(p.entries)
	if services == nil {
		services = []model.Service{}
	}
	return services, rejected
}

// sortEntries sorts the keys into entries. Called with mu held.
func (p *Publisher[K]) sortEntries() {
	keys := slices.SortedFunc(maps.Keys(p.conv), p.opts.Compare)
	p.entries = make([]Entry[K], len(keys))
	for i, k := range keys {
		p.entries[i] = Entry[K]{Key: k, Converted: p.conv[k]}
	}
	p.flatOK = false
}

// entry returns key's index in entries, found by binary search (a map of
// positions would cost a map entry per key), and false when entries is
// nil or does not hold key. Called with mu held.
func (p *Publisher[K]) entry(key K) (int, bool) {
	i, ok := slices.BinarySearchFunc(p.entries, key, func(e Entry[K], k K) int { return p.opts.Compare(e.Key, k) })
	return i, ok && p.entries[i].Key == key
}

// assembleConcat is Concat over the entries, patching the last result
// when only values of known keys changed. Called with mu held.
func (p *Publisher[K]) assembleConcat() ([]model.Service, []model.Rejection) {
	var rejected []model.Rejection
	for i := range p.entries {
		rejected = append(rejected, p.entries[i].Rejected...)
	}
	p.rejected, p.rejOK = rejected, true
	if p.flatOK {
		if len(p.patched) > 0 {
			services := slices.Clone(p.flat)
			for _, i := range p.patched {
				copy(services[p.offs[i]:], p.entries[i].Services)
			}
			p.flat, p.patched = services, p.patched[:0]
		}
		return p.flat, rejected
	}
	services, _ := Concat(p.entries)
	p.offs = slices.Grow(p.offs[:0], len(p.entries))[:len(p.entries)]
	n := 0
	for i := range p.entries {
		p.offs[i] = n
		n += len(p.entries[i].Services)
	}
	p.flat, p.flatOK, p.patched = services, true, p.patched[:0]
	return services, rejected
}

// Report tells the sink c without publishing a state, once: a condition
// equal to the one the sink last heard is not repeated. A healthy report
// before the first publish of the Run is not passed on: the first Flush
// says it with the state.
func (p *Publisher[K]) Report(c Condition) {
	if c == p.told || (!c.Failing() && !p.sent) {
		return
	}
	p.transition(c, -1)
	p.told = c
	p.sink.Publish(p.shard, Update{Condition: c})
}

// Condition is the condition the sink last heard in this Run (healthy
// before the first publish or report).
func (p *Publisher[K]) Condition() Condition { return p.told }

// Published reports whether a state went out in this Run.
func (p *Publisher[K]) Published() bool { return p.sent }

// transition logs a change of the condition the sink hears: the first
// failure as a warning, a changed failure at debug level, the recovery as
// info. services < 0: not known (a report without a publish).
func (p *Publisher[K]) transition(c Condition, services int) {
	was := p.told
	switch {
	case !c.Failing() && was.Failing():
		args := []any{"was", was.Err}
		if services >= 0 {
			args = append(args, "services", services)
		}
		p.log.Info("registry backend answers again; state resynced", args...)
	case c.Failing() && !was.Failing():
		p.log.Warn("registry backend failing; keeping the last good state", "error", c.Err, "invalid", c.Invalid)
	case c.Failing() && was.Err != c.Err:
		p.log.Debug("registry backend still failing", "error", c.Err, "invalid", c.Invalid)
	}
}
