package registries

import (
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/meshfed/meshfed/model"
)

// The publishing tail every platform registry shares
// (docs/architecture.md §3.1.1). A platform watches its backend its own way
// and hands each converted item (a service, a file...) to a Publisher
// under a key; the Publisher keeps the last conversion of every key,
// assembles the shard's state in key order, hands it to the Sink only when
// it changed or the registry's status did, reports Synced/Degraded
// transitions once, and observes meshfed_registry_ingest_latency_seconds.
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
	// Compare orders keys; the state is assembled in this order. Required.
	Compare func(a, b K) int
	// Assemble turns every key's conversion, in key order, into the
	// shard's state. Nil: each entry's services then its rejections,
	// concatenated (Concat). A platform whose keys can collide (two
	// services with one hostname) checks that here. services must not be
	// nil (empty for none).
	Assemble func(entries []Entry[K]) (services []model.Service, rejected []model.Rejection)
	// CompleteWhileDegraded says the state is complete whenever the
	// platform calls Flush, even with a non-Synced status (the kube
	// registry flushes only once its informers listed everything; its
	// status is the connection's health). Without it, a non-Synced Flush
	// before anything was published in the Run only reports the status:
	// a partial first state (a cluster or file that cannot be read after
	// a restart) would replace the complete one the sink already serves
	// (restored or from the previous Run) and drop what it cannot see.
	CompleteWhileDegraded bool
}

// Publisher is one Run's publishing tail. Build one per Run with
// NewPublisher. Set, Put, Delete, Retain, Changed, Forget, State and Len
// may be called from any goroutine. Flush, Report, Status and Published
// read and write the status the sink last heard without a lock: call them
// from one goroutine (the Run's loop), never concurrently with each
// other.
type Publisher[K comparable] struct {
	sink   Sink
	shard  model.ShardKey
	log    *slog.Logger
	ingest interface{ Observe(float64) }
	opts   PublisherOptions[K]

	mu      sync.Mutex
	conv    map[K]Converted
	dirty   bool      // conv changed since the last publish
	pending time.Time // oldest change not yet published; zero if none

	// Owned by the flushing goroutine.
	published bool   // a state went out in this Run
	held      bool   // a partial first state was held (logged once)
	told      Status // the status the sink last heard (Starting: none yet)
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
	if opts.Assemble == nil {
		opts.Assemble = Concat[K]
	}
	return &Publisher[K]{
		sink:   sink,
		shard:  c.Shard(),
		log:    log,
		ingest: ingestLatency.WithLabelValues(c.Name, c.Kind),
		opts:   opts,
		conv:   map[K]Converted{},
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
func (p *Publisher[K]) Set(key K, c Converted) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	old, had := p.conv[key]
	switch {
	case c.Empty() && !had:
		return false
	case c.Empty():
		delete(p.conv, key)
	case had && reflect.DeepEqual(old, c):
		return false
	default:
		p.conv[key] = c
	}
	p.dirty = true
	return true
}

// Put stores key's conversion without comparing it with the previous one:
// for callers that already know it changed.
func (p *Publisher[K]) Put(key K, c Converted) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conv[key] = c
	p.dirty = true
}

// Delete forgets key and reports whether it was known.
func (p *Publisher[K]) Delete(key K) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, had := p.conv[key]
	if had {
		delete(p.conv, key)
		p.dirty = true
	}
	return had
}

// Retain forgets every key keep rejects and reports whether any was known.
func (p *Publisher[K]) Retain(keep func(K) bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conv)
	maps.DeleteFunc(p.conv, func(k K, _ Converted) bool { return !keep(k) })
	if len(p.conv) != n {
		p.dirty = true
		return true
	}
	return false
}

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

// Flush publishes the assembled state with status st when the state
// changed since the last publish, nothing was published yet in this Run,
// or st is Synced while the sink last heard otherwise (an outage ended: the
// state is published again, which says Synced). Otherwise it only reports
// st if it differs from what the sink last heard. st is Synced, or
// Degraded for a state that is current as far as it goes while part of the
// backend is failing (one broken file of a directory): it is published
// with Sink.ReplaceStatus, so the registry never shows Synced in between.
// A non-Synced Flush before anything was published in this Run only
// reports st (unless PublisherOptions.CompleteWhileDegraded) when the
// sink already serves a state of the shard (a restored state, the
// previous Run's; see ServingSink): the sink keeps it until the backend is
// read in full, and the reported error says so (HeldPrefix; a warning is
// logged once). With nothing served yet (a fresh start) the partial state
// is published, so the readable part is served while the rest is broken. Flush reports whether it published.
func (p *Publisher[K]) Flush(st Status) bool {
	if st.State != Synced {
		st.State = Degraded
		if !p.published && !p.opts.CompleteWhileDegraded && p.sinkServes() {
			// Held until the backend reads in full (a typo must never
			// black-hole restored services), and said so: in the status
			// (/healthz/registries) and once in the log.
			p.Forget()
			if !p.held {
				p.held = true
				p.log.Warn("first update held: the state already served is kept until every part of the backend reads", "error", st.Err)
			}
			st.Err = HeldPrefix + st.Err
			p.Report(st)
			return false
		}
	}
	p.mu.Lock()
	if !p.dirty && p.published && (st.State != Synced || p.told.State == Synced) {
		p.pending = time.Time{} // the changes recorded changed nothing
		p.mu.Unlock()
		p.Report(st)
		return false
	}
	services, rejected := p.assemble()
	pending := p.pending
	p.dirty, p.pending = false, time.Time{}
	p.mu.Unlock()

	if st.State == Synced {
		p.sink.Replace(p.shard, services, rejected)
	} else {
		p.sink.ReplaceStatus(p.shard, services, rejected, st)
	}
	if !pending.IsZero() {
		p.ingest.Observe(time.Since(pending).Seconds())
	}
	p.transition(st, len(services))
	p.published, p.told = true, st
	return true
}

// HeldPrefix starts the status error of a registry whose partial first
// state the Publisher holds back while the sink serves an earlier one.
const HeldPrefix = "first update held, restored state kept until all parts read: "

// sinkServes reports whether the sink already serves a state of the
// shard (see ServingSink); a sink that cannot say is assumed to.
func (p *Publisher[K]) sinkServes() bool {
	if s, ok := p.sink.(ServingSink); ok {
		return s.Serving(p.shard)
	}
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
	keys := slices.SortedFunc(maps.Keys(p.conv), p.opts.Compare)
	entries := make([]Entry[K], len(keys))
	for i, k := range keys {
		entries[i] = Entry[K]{Key: k, Converted: p.conv[k]}
	}
	services, rejected := p.opts.Assemble(entries)
	if services == nil {
		services = []model.Service{}
	}
	return services, rejected
}

// Report tells the sink st without publishing, once: a status equal to
// the one the sink last heard is not repeated. A Synced report before the
// first publish of the Run is not passed on (the sink would take it for
// "starting"); the first Flush says Synced.
func (p *Publisher[K]) Report(st Status) {
	if st == p.told || (st.State == Synced && !p.published) {
		return
	}
	p.transition(st, -1)
	p.told = st
	p.sink.Report(p.shard, st)
}

// Status is the status the sink last heard in this Run (Starting before
// the first publish or report).
func (p *Publisher[K]) Status() Status { return p.told }

// Published reports whether a state went out in this Run.
func (p *Publisher[K]) Published() bool { return p.published }

// transition logs a change of the status the sink hears: the first
// failure as a warning, a changed failure at debug level, the recovery as
// info. services < 0: not known (a report without a publish).
func (p *Publisher[K]) transition(st Status, services int) {
	was := p.told
	switch {
	case st.State == Synced && was.State != Synced && was.State != Starting:
		args := []any{"was", was.Err}
		if services >= 0 {
			args = append(args, "services", services)
		}
		p.log.Info("registry backend answers again; state resynced", args...)
	case st.State != Synced && was.State != st.State:
		p.log.Warn("registry backend failing; keeping the last good state", "error", st.Err, "invalid", st.Invalid)
	case st.State != Synced && was.Err != st.Err:
		p.log.Debug("registry backend still failing", "error", st.Err, "invalid", st.Invalid)
	}
}
