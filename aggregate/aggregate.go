// Package aggregate merges the full state every registry publishes into one
// immutable, versioned model.Snapshot. It implements registries.Sink, whose
// one method, Publish, hands it a registries.Update (a state may come as
// a delta: it implements registries.DeltaSink, and applies one in
// O(change)): what a registry knows
// (its state if any, whether that state is complete, its backend's
// condition, the end of a Run). Every policy about what that makes a
// registry show and serve lives here: the registry states (State:
// Starting, Synced, Degraded, Stale, Failed, Held), freshness (Outage),
// the hold of a partial first state, the hold-down and expiry.
//
// Per registry (shard) it keeps the last accepted state and passes every
// state through a normalization gate: invalid or duplicate items are
// quarantined alone and listed as Conflicts, the rest of each service is
// served; a service outside its registry's domain is rejected. Registries of
// kind kubernetes that share a domain form a multicluster set whose
// same-named services merge their endpoints.
//
// Freshness: a registry whose updates say its backend fails (Degraded, or
// Failed after a Permanent end of its Run) keeps serving its last good
// state. Once the outage lasts longer than Outage.ExpireAfter the
// registry is Stale: with policy expire its services are withdrawn from the
// snapshot, with keep they stay (RegistryStatus.State shows Stale). A
// state or a healthy condition ends the outage and, with expire, brings
// the services back. Only an unreachable backend is an outage: a failing
// condition with Invalid (the backend answered with data that does not
// parse) keeps the last good state served but never makes it Stale or
// withdraws it, and ends an outage in progress.
//
// Partial first state: a state that is not Complete, the first of a
// registry's Run, is held while a state of the shard is served (restored,
// or from an earlier Run or instance); see Publish.
//
// Hold-down: with RegistryOptions.MaxDeleteRatio r > 0, a state that
// would drop more than r of the registry's served endpoints (counting
// endpoints: served minus new, over served) is not applied at once: the old
// state stays served, a Conflict of category "hold-down" is listed and the
// registry is Held (RegistryStatus.Hold says since when, what is served and
// what is pending). The held update is applied when the next state again
// drops more than r of the served endpoints (confirmation: it was seen
// again; the newer update is applied; not the first state of an instance
// a reload swapped in, which read the backend at about the same moment as
// the old one: it only takes the held update's place), when Options.HoldDown has passed, or
// when an operator calls Release (the held update is applied). A state
// within the ratio clears the hold and is applied.
//
// Warm start: Restore hands a registry the state persisted by a previous
// process (see Options.OnAccepted) before its first sync. It is served at
// once, marked Restored, and counts as the registry's first sync for Ready,
// until the registry publishes its own. Snapshot.Restored names the
// registries served from a restored state; a snapshot is published when
// that list changes, even if no service did.
//
// Snapshots are immutable. Between two snapshots, a service that did not
// change is the same *model.Service pointer (xds relies on this to reuse the
// resources it marshalled); only hostnames touched by a changed shard are
// merged again, and a snapshot is published only when some pointer changed.
// Versions count published snapshots from 1 (0 is the empty initial one).
// Ports are sorted by number, endpoints by address, then ports, then source.
//
// Nothing is deleted before a shard's first sync: a registry that has not
// published yet contributes nothing and removes nothing.
//
// Publish, Swap, AddRegistry and RemoveRegistry only store and signal;
// normalization, merging and snapshot building happen in Serve's goroutine
// after a debounce (Options.Quiet, Options.MaxWait).
package aggregate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// Defaults for zero option values.
const (
	DefaultHoldDown    = time.Minute
	DefaultSyncTimeout = 30 * time.Second
)

// RegistryOptions are the aggregate-relevant settings of one clusters.yaml
// registry entry.
type RegistryOptions struct {
	registries.Common // Name, Kind, Domain, Locality (default locality of endpoints)
	// Outage is the registry's `outage:` block (the one type,
	// Outage, validated by the clusters.yaml loader); zero
	// fields mean the defaults (keep, 10m), and a policy other than expire
	// keeps.
	Outage Outage
	// MaxDeleteRatio enables the hold-down (see the package doc) when > 0,
	// e.g. 0.5.
	MaxDeleteRatio float64
	// Multicluster: registries of the same kind that share a domain and
	// both set it form a multicluster set (registries.Kind.Multicluster).
	Multicluster bool
	// ExportTo is the exportTo of the registry's services that set none
	// (model.Service.ExportTo); empty: every namespace.
	ExportTo []string
}

func (o RegistryOptions) withDefaults() RegistryOptions {
	o.Outage.ApplyDefaults()
	return o
}

// Options configure an Aggregator.
type Options struct {
	// Registries lists every registry in clusters.yaml, known up front.
	Registries []RegistryOptions
	// Quiet and MaxWait drive the debounce (see registries.Debouncer): a zero Quiet
	// builds a snapshot as soon as the Serve loop sees a change.
	Quiet, MaxWait time.Duration
	// HoldDown is how long a held-down update waits before it is applied
	// anyway; 0 is DefaultHoldDown.
	HoldDown time.Duration
	// SyncTimeout is how long a registry without a first sync keeps Ready
	// false; 0 is DefaultSyncTimeout. It counts from New (or AddRegistry).
	// A registry added once the aggregator has been ready never keeps Ready
	// false (see Ready).
	SyncTimeout time.Duration
	// OnAccepted, when set, is called from Serve's goroutine with a
	// registry's input each time a different one becomes its accepted
	// state (applied, not held; restored states excluded): in full, or
	// as its change to the one the previous call handed (see Accepted).
	// It must return promptly, not modify the slices and not call the
	// Aggregator: it runs with the aggregator's lock held, so that it is
	// never called for a registry once RemoveRegistry returned (a removal
	// wins over an accept in flight). The warm-start store persists them.
	OnAccepted func(shard model.ShardKey, acc Accepted)
	Logger     *slog.Logger // nil discards
	Now        func() time.Time
}

// Accepted is a registry's newly accepted input as Options.OnAccepted
// gets it. A delta is handed when the input was applied in place as a
// change to the one handed before (the common case of a registry that
// publishes deltas: O(change)); the input in full otherwise.
type Accepted struct {
	// Services is the full input, as given to Publish; nil when Delta.
	Services []model.Service
	// Delta: the input is the one the previous call handed for the
	// registry with the services of Changed (sorted by hostname) in place
	// of those of their hostnames or added, and the hostnames of Removed
	// (sorted) left out. That input has no two services of one hostname.
	Delta   bool
	Changed []model.Service
	Removed []string
	// Rejected is every rejection of the input.
	Rejected []model.Rejection
}

// RegistryStatus is one registry's state as shown on /healthz/registries.
type RegistryStatus struct {
	Name      string    `json:"name"`
	Kind      string    `json:"kind"`
	Domain    string    `json:"domain"`
	State     State     `json:"state"`
	Since     time.Time `json:"since"`             // when State last changed
	LastSync  time.Time `json:"lastSync,omitzero"` // last Replace received; zero if never
	LastError string    `json:"lastError,omitempty"`
	// Services and Endpoints count what is served from this registry now
	// (0 while nothing is served or its services are withdrawn).
	Services  int `json:"services"`
	Endpoints int `json:"endpoints"`
	// Withdrawn: the registry is Stale (or Failed) past ExpireAfter with
	// policy expire, and its services are not served.
	Withdrawn bool `json:"withdrawn,omitempty"`
	// HeldDown: an update is held back by MaxDeleteRatio (State is Held
	// unless the registry is also Degraded, Stale or Failed).
	HeldDown bool `json:"heldDown,omitempty"`
	// Hold describes the held update; nil when nothing is held.
	Hold *HoldStatus `json:"hold,omitempty"`
	// Restored: what is served from this registry was restored from the
	// state directory at start; the registry has not synced since.
	Restored bool `json:"restored,omitempty"`
}

// HoldStatus is an update held back by MaxDeleteRatio, as shown in a
// registry's JSON ("hold"). The admin page and `meshfed status` read it.
type HoldStatus struct {
	Since   time.Time `json:"since"`   // when the update was first held
	Served  int       `json:"served"`  // endpoints served now
	Pending int       `json:"pending"` // endpoints in the held update
	Reason  string    `json:"reason"`
}

// Aggregator is the per-shard store and merge; see the package doc. Create
// it with New, run Serve under a supervisor.
type Aggregator struct {
	log                                   *slog.Logger
	now                                   func() time.Time
	quiet, maxWait, holdDown, syncTimeout time.Duration
	onAccepted                            func(model.ShardKey, Accepted)

	signal  chan struct{} // capacity 1: "something changed"
	serving atomic.Bool
	snap    atomic.Pointer[model.Snapshot]

	mu         sync.Mutex
	regs       map[string]*regState
	subs       []func(*model.Snapshot)
	config     *model.ConfigSnapshot // latest from SetConfig
	configSeen time.Time             // when SetConfig last changed it
	conflicts  []Conflict
	unknown    map[model.ShardKey]bool // shards already logged as unknown
	wasReady   bool                    // Ready has held once; latched

	// Owned by the Serve goroutine.
	loop           map[string]*loopReg
	merged         map[string]*model.Service
	mergeConflicts map[string][]Conflict
	conflictSince  map[conflictKey]time.Time
	delivered      uint64 // version subscribers last received
}

// regState is the shared (mu-guarded) part of a registry.
type regState struct {
	opts  RegistryOptions
	gen   uint64 // bumped when AddRegistry changes opts
	added time.Time
	// late: added after the aggregator was ready; it never blocks Ready.
	late bool

	state       State
	since       time.Time
	lastSync    time.Time
	lastError   string
	outageSince time.Time     // zero when not in an outage
	synced      bool          // a state was received
	runApplied  bool          // a state of the registry's current Run was applied
	runHeld     bool          // a partial first state of the current Run was held (logged)
	pending     *input        // latest state not yet taken by the loop
	taken       bool          // the loop took a state and has not written back yet
	release     chan struct{} // Release waits; closed once the loop applied it
	swapped     bool          // Swap put a new instance in; the loop took no state since (see take, offer)
	// runHeldIn is the partial first state of the current Run that
	// publish held (nil if none): the base of the Run's next delta.
	runHeldIn *input

	// Written back by the Serve loop.
	applied             bool // first state is in the published snapshot
	withdrawn, restored bool
	hold                *HoldStatus
	shown               State // in the state metric
	services, endpoints int
}

type input struct {
	services []model.Service
	rejected []model.Rejection
	// delta, when set, gives the state as its change to the state taken
	// before it (the loop's last offered input): services is then nil
	// until the loop materializes it (see loopReg.materialize).
	delta    *delta
	seen     time.Time // when the oldest Replace this input stands for arrived
	restored bool      // from Restore, not from the registry
}

// delta is a state given as a change (registries.Update.Delta), by
// published hostname: every other service is as in the state before.
type delta struct {
	changed map[string]model.Service
	removed map[string]bool
}

// newDelta is u's change.
func newDelta(u registries.Update) *delta {
	d := &delta{changed: make(map[string]model.Service, len(u.Services)), removed: make(map[string]bool, len(u.Removed))}
	d.add(u)
	return d
}

// add composes u's change after d's.
func (d *delta) add(u registries.Update) {
	for _, h := range u.Removed {
		delete(d.changed, h)
		d.removed[h] = true
	}
	for _, s := range u.Services {
		d.changed[s.Hostname] = s
		delete(d.removed, s.Hostname)
	}
}

// applyDelta returns services with d applied: changed services replace
// those of their hostname in place or come after them, sorted, and
// removed ones are left out. services is not modified.
func applyDelta(services []model.Service, d *delta) []model.Service {
	out := make([]model.Service, 0, len(services)+len(d.changed))
	seen := make(map[string]bool, len(d.changed))
	for _, s := range services {
		if c, ok := d.changed[s.Hostname]; ok {
			if !seen[s.Hostname] {
				out = append(out, c)
				seen[s.Hostname] = true
			}
			continue
		}
		if !d.removed[s.Hostname] {
			out = append(out, s)
		}
	}
	for _, h := range slices.Sorted(maps.Keys(d.changed)) {
		if !seen[h] {
			out = append(out, d.changed[h])
		}
	}
	return out
}

// incoming is the input u's state makes, a delta composed onto the state
// it changes when that is still here: the Run's held partial first state,
// or the pending input (the delta then replaces it). A delta whose state
// the loop took stays a delta. Called with mu held.
func (rs *regState) incoming(u registries.Update) *input {
	if !u.Delta {
		return &input{services: u.Services, rejected: u.Rejected}
	}
	base := rs.pending
	if rs.runHeldIn != nil && !rs.runApplied {
		base = rs.runHeldIn
	}
	switch {
	case base == nil:
		return &input{delta: newDelta(u), rejected: u.Rejected}
	case base.delta != nil:
		d := &delta{changed: maps.Clone(base.delta.changed), removed: maps.Clone(base.delta.removed)}
		d.add(u)
		return &input{delta: d, rejected: u.Rejected}
	default:
		return &input{services: applyDelta(base.services, newDelta(u)), rejected: u.Rejected}
	}
}

// TakesDelta implements registries.DeltaSink: Publish takes deltas.
func (a *Aggregator) TakesDelta() bool { return true }

// New returns an aggregator whose Snapshot is the empty version 0.
func New(o Options) *Aggregator {
	a := &Aggregator{
		log:            o.Logger,
		now:            o.Now,
		quiet:          o.Quiet,
		maxWait:        o.MaxWait,
		holdDown:       o.HoldDown,
		syncTimeout:    o.SyncTimeout,
		onAccepted:     o.OnAccepted,
		signal:         make(chan struct{}, 1),
		regs:           make(map[string]*regState),
		unknown:        make(map[model.ShardKey]bool),
		loop:           make(map[string]*loopReg),
		merged:         make(map[string]*model.Service),
		mergeConflicts: make(map[string][]Conflict),
		conflictSince:  make(map[conflictKey]time.Time),
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	if a.holdDown <= 0 {
		a.holdDown = DefaultHoldDown
	}
	if a.syncTimeout <= 0 {
		a.syncTimeout = DefaultSyncTimeout
	}
	a.snap.Store(model.NewSnapshot(0, nil))
	for _, r := range o.Registries {
		a.AddRegistry(r)
	}
	return a
}

// AddRegistry adds a registry started at runtime (e.g. a Kubernetes remote
// cluster). Adding a name that exists updates its options (a different
// kind replaces it: its old state is dropped). A registry added once the
// aggregator has been ready does not make it unready (see Ready).
func (a *Aggregator) AddRegistry(o RegistryOptions) {
	o = o.withDefaults()
	now := a.now()
	a.mu.Lock()
	if rs, ok := a.regs[o.Name]; ok && rs.opts.Kind == o.Kind {
		rs.opts = o
		rs.gen++
	} else {
		a.regs[o.Name] = &regState{opts: o, added: now, since: now, late: a.wasReady}
		setStateMetric(o.Name, Starting)
		// Series exist at 0 from the start, for rate() and alerts.
		holddownsTotal.WithLabelValues(o.Name)
		registryServices.WithLabelValues(o.Name)
		registryEndpoints.WithLabelValues(o.Name)
	}
	delete(a.unknown, o.Shard())
	a.mu.Unlock()
	a.wake()
}

// Swap replaces a registry's options and starts a new Run of it in one
// step, for a registry reconfigured make-before-break: us, everything the
// new instance published while staged (its first full state among them,
// if it published one), are applied in order as Publish would apply them
// to the first Run of the registry (a partial first state is held while
// the old instance's state is served), and no snapshot is built in
// between. A different kind drops the old state as AddRegistry does.
func (a *Aggregator) Swap(o RegistryOptions, us ...registries.Update) {
	o = o.withDefaults()
	now := a.now()
	a.mu.Lock()
	rs, ok := a.regs[o.Name]
	if ok && rs.opts.Kind == o.Kind {
		rs.opts = o
		rs.gen++
	} else {
		rs = &regState{opts: o, added: now, since: now, late: a.wasReady}
		a.regs[o.Name] = rs
		setStateMetric(o.Name, Starting)
		holddownsTotal.WithLabelValues(o.Name)
		registryServices.WithLabelValues(o.Name)
		registryEndpoints.WithLabelValues(o.Name)
	}
	rs.runApplied, rs.runHeld, rs.runHeldIn = false, false, nil
	rs.swapped = true
	type logged struct {
		ev      published
		old     State
		changed bool
	}
	var logs []logged
	for _, u := range us {
		ev := rs.publish(u, now)
		old, changed := a.setState(rs, ev.next, now)
		logs = append(logs, logged{ev, old, changed})
	}
	delete(a.unknown, o.Shard())
	a.mu.Unlock()
	for _, l := range logs {
		a.logPublish(o.Shard(), l.ev, l.old, l.changed)
	}
	a.wake()
}

// RemoveRegistry drops a registry with its shard: its services and
// endpoints leave the next snapshot.
func (a *Aggregator) RemoveRegistry(name string) {
	a.mu.Lock()
	_, ok := a.regs[name]
	delete(a.regs, name)
	if ok {
		deleteRegistryMetrics(name)
	}
	a.mu.Unlock()
	if ok {
		a.log.Info("registry removed", "registry", name)
		a.wake()
	}
}

// HeldPrefix starts the error shown for a registry whose partial first
// state of a Run is held while a state of its shard is served (see
// Publish).
const HeldPrefix = "first update held, restored state kept until all parts read: "

// Publish implements registries.Sink, the one way a registry (and its
// Runner) tells the aggregator anything. The update's slices are kept, not
// copied. What it makes of u:
//
//   - A state (u.HasState) becomes the shard's next input and the
//     registry is Synced, or, with a failing condition, Degraded (or
//     Stale) in the same step, never Synced in between. A complete state,
//     or the ending of an outage, resets the outage clock; a Degraded
//     update with Invalid is not an outage (never Stale, never withdrawn)
//     and ends one in progress.
//   - Except a partial first state: a state that is not Complete, the
//     first of the registry's Run, while a state of the shard is served
//     or about to be (restored from disk, or from an earlier Run or
//     instance) is held: not applied (a file or cluster that cannot be
//     read after a restart must not drop what it held), the registry is
//     Degraded with the error prefixed by HeldPrefix (also for condition
//     updates until a state of the Run is applied), and a warning is
//     logged once per Run. With nothing served (a fresh start) it is
//     applied, so the readable part is served.
//   - A condition only (no state): a healthy one ends an outage (the
//     registry is Starting until its first state); a failing one starts
//     or continues one (a Stale registry stays Stale).
//   - u.Confirm (the last state sent again to confirm it): applied as a
//     state while the hold-down holds an update of the shard back (or one
//     is on its way to the Serve loop), otherwise ignored.
//   - u.Ended (the Run ended): Degraded, or Failed with u.Permanent; the
//     next state is the first of a new Run.
//   - u.Delta: the state is composed onto the one it changes (pending,
//     the Run's held partial first state, or the last one the Serve loop
//     took), and the loop applies it in place when it can (offerDelta),
//     with the result a full state would have had.
func (a *Aggregator) Publish(shard model.ShardKey, u registries.Update) {
	now := a.now()
	a.mu.Lock()
	rs := a.lookup(shard)
	if rs == nil {
		a.mu.Unlock()
		return
	}
	ev := rs.publish(u, now)
	old, changed := a.setState(rs, ev.next, now)
	a.mu.Unlock()
	a.logPublish(shard, ev, old, changed)
	a.wake()
}

// published is what publish made of an update, for the log.
type published struct {
	next     State
	state    bool   // a state was applied
	heldWarn bool   // a partial first state was held for the first time in the Run
	err      string // the error shown
}

// HoldsFirst reports whether u, as the first state of a new Run of shard,
// would be held (see Publish): it is partial while a state of the shard is
// served or about to be. A gate that stages a new registry instance asks,
// to know whether the instance published.
func (a *Aggregator) HoldsFirst(shard model.ShardKey, u registries.Update) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	// Not lookup: asking is no update, so an unknown shard is not logged.
	rs := a.regs[shard.Name]
	return rs != nil && rs.opts.Kind == shard.Kind && partial(u) && rs.serving()
}

// partial: u carries a state that does not cover all of the backend.
func partial(u registries.Update) bool { return u.HasState && !u.Complete }

// serving reports whether a state of the shard is served or about to be:
// restored from disk, or received from an earlier Run — pending, or taken
// by the Serve loop and not yet written back (between the two, a partial
// first state must still be held). Called with mu held.
func (rs *regState) serving() bool { return rs.applied || rs.pending != nil || rs.taken }

// take hands the Serve loop the pending state and Release waiter, and
// remembers that a state is in flight until the loop writes back (see
// serving). fresh reports that in is the first state taken since a Swap.
// Called with mu held.
func (rs *regState) take() (in *input, release chan struct{}, fresh bool) {
	in, release = rs.pending, rs.release
	rs.taken = rs.taken || in != nil
	rs.pending, rs.release = nil, nil
	if in != nil {
		fresh, rs.swapped = rs.swapped, false
	}
	return in, release, fresh
}

// publish applies u to rs at now (see Publish) and returns the state it
// makes. Called with mu held.
func (rs *regState) publish(u registries.Update, now time.Time) published {
	switch {
	case u.Ended:
		rs.runApplied, rs.runHeld, rs.runHeldIn = false, false, nil
		if u.Permanent {
			rs.lastError = u.Err
			if rs.outageSince.IsZero() {
				rs.outageSince = now
			}
			return published{next: Failed, err: u.Err}
		}
		return published{next: rs.degraded(u.Condition, now), err: u.Err}
	case u.Confirm && u.HasState && rs.hold == nil && rs.pending == nil && !rs.taken:
		// A re-send to confirm a state nothing holds back: no news (not a
		// sync: lastSync stays, nothing is rebuilt).
		return published{next: rs.state, err: rs.lastError}
	case partial(u) && !rs.runApplied && rs.serving():
		// Held until the backend reads in full (a typo must never
		// black-hole restored services), and said so: in the status
		// (/healthz/registries) and once per Run in the log.
		warn := !rs.runHeld
		rs.runHeld = true
		rs.runHeldIn = rs.incoming(u)
		c := u.Condition
		c.Err = HeldPrefix + c.Err
		return published{next: rs.degraded(c, now), heldWarn: warn, err: c.Err}
	case u.HasState:
		seen := now
		if rs.pending != nil && !rs.pending.seen.IsZero() {
			seen = rs.pending.seen // replaces an update not yet built: keep its age
		}
		in := rs.incoming(u)
		in.seen = seen
		rs.pending, rs.runHeldIn = in, nil
		rs.synced = true
		rs.runApplied = true
		rs.lastSync = now
		if !u.Failing() {
			rs.lastError = ""
			rs.outageSince = time.Time{}
			return published{next: Synced, state: true}
		}
		return published{next: rs.degraded(u.Condition, now), state: true, err: u.Err}
	case !u.Failing():
		rs.lastError = ""
		rs.outageSince = time.Time{}
		if rs.synced {
			return published{next: Synced}
		}
		return published{next: Starting}
	default:
		c := u.Condition
		if rs.runHeld && !rs.runApplied {
			c.Err = HeldPrefix + c.Err // the first state is still held
		}
		return published{next: rs.degraded(c, now), err: c.Err}
	}
}

// logPublish logs what Publish did: a held first state once per Run, and
// every change of state.
func (a *Aggregator) logPublish(shard model.ShardKey, ev published, old State, changed bool) {
	if ev.heldWarn {
		a.log.Warn("first update held: the state already served is kept until every part of the backend reads",
			"registry", shard.Name, "error", ev.err)
	}
	if !changed {
		return
	}
	switch {
	case ev.state && ev.next == Synced:
		a.log.Info("registry synced", "registry", shard.Name, "was", old)
	case ev.state:
		a.log.Warn("registry state changed", "registry", shard.Name, "state", ev.next, "was", old, "error", ev.err)
	default:
		lvl := slog.LevelWarn
		if ev.next == Synced || ev.next == Starting {
			lvl = slog.LevelInfo
		}
		a.log.Log(context.Background(), lvl, "registry state changed", "registry", shard.Name, "state", ev.next, "was", old, "error", ev.err)
	}
}

// degraded records a Degraded status st at now and returns the state it
// makes: Degraded, or Stale once an outage lasted the outage window.
// Called with mu held.
func (rs *regState) degraded(st registries.Condition, now time.Time) State {
	rs.lastError = st.Err
	if st.Invalid {
		// The backend answered: not an outage (never Stale, never withdrawn).
		rs.outageSince = time.Time{}
		return Degraded
	}
	if rs.outageSince.IsZero() {
		rs.outageSince = now
	}
	if !now.Before(rs.outageSince.Add(rs.opts.Outage.ExpireAfter)) {
		return Stale
	}
	return Degraded
}

// lookup returns the registry for shard, or nil (logged once) if it is
// unknown or its kind differs. Called with mu held.
func (a *Aggregator) lookup(shard model.ShardKey) *regState {
	rs := a.regs[shard.Name]
	if rs != nil && rs.opts.Kind == shard.Kind {
		return rs
	}
	if !a.unknown[shard] {
		a.unknown[shard] = true
		a.log.Warn("update from an unknown registry ignored", "registry", shard.Name, "kind", shard.Kind)
	}
	return nil
}

// setState changes rs's state, keeping Since when it does not change.
// Called with mu held.
func (a *Aggregator) setState(rs *regState, s State, at time.Time) (old State, changed bool) {
	old = rs.state
	if old == s {
		return old, false
	}
	rs.state = s
	rs.since = at
	rs.shown = rs.effective()
	setStateMetric(rs.opts.Name, rs.shown)
	return old, true
}

// effective is the state shown: Held while an update is held and the
// registry is otherwise Synced. Called with mu held.
func (rs *regState) effective() State {
	if rs.hold != nil && rs.state == Synced {
		return Held
	}
	return rs.state
}

// Errors of Release.
var (
	ErrUnknownRegistry = errors.New("no such registry")
	ErrNothingHeld     = errors.New("no update is held")
)

// Release applies the update held back by MaxDeleteRatio of the registry
// name now, as if its hold-down time had passed, and returns the
// registry's status once the Serve loop has applied it. It returns
// ErrUnknownRegistry or ErrNothingHeld (wrapped) without waiting, and
// ctx.Err() if ctx ends first (the release still happens).
func (a *Aggregator) Release(ctx context.Context, name string) (RegistryStatus, error) {
	a.mu.Lock()
	rs, ok := a.regs[name]
	switch {
	case !ok:
		a.mu.Unlock()
		return RegistryStatus{}, fmt.Errorf("%w: %q", ErrUnknownRegistry, name)
	case rs.hold == nil:
		a.mu.Unlock()
		return RegistryStatus{}, fmt.Errorf("registry %q: %w", name, ErrNothingHeld)
	}
	if rs.release == nil {
		rs.release = make(chan struct{})
	}
	done := rs.release
	a.mu.Unlock()
	a.wake()
	select {
	case <-done:
	case <-ctx.Done():
		return RegistryStatus{}, ctx.Err()
	}
	st, _ := a.Registry(name)
	return st, nil
}

// Restore gives a registry that has not published yet the state a
// previous process accepted from it (persisted through
// Options.OnAccepted). It is served as soon as Serve builds the next
// snapshot, marked Restored, and counts as the first sync for Ready; the
// registry's own first applied state supersedes it (through the hold-down). It
// reports false, and does nothing, for an unknown registry or one that
// already published.
func (a *Aggregator) Restore(shard model.ShardKey, services []model.Service, rejected []model.Rejection) bool {
	a.mu.Lock()
	rs := a.lookup(shard)
	if rs == nil || rs.synced || rs.pending != nil || rs.applied {
		a.mu.Unlock()
		return false
	}
	rs.pending = &input{services: services, rejected: rejected, restored: true}
	a.mu.Unlock()
	a.wake()
	return true
}

func (a *Aggregator) wake() {
	select {
	case a.signal <- struct{}{}:
	default:
	}
}

// SetConfig hands the aggregator the user traffic configuration in force
// (istioconfig). It is debounced with registry changes: the next snapshot
// published carries it as Snapshot.Config, with the services unchanged if
// only the configuration changed. c must not be modified afterwards.
func (a *Aggregator) SetConfig(c *model.ConfigSnapshot) {
	a.mu.Lock()
	if c != a.config {
		a.config, a.configSeen = c, a.now()
	}
	a.mu.Unlock()
	a.wake()
}

// Subscribe registers fn to receive every snapshot published after Serve
// starts (read Snapshot for the current one). Call it before Serve. fn is
// called in order, from Serve's goroutine, so it must return promptly; the
// snapshot and its services must not be modified.
func (a *Aggregator) Subscribe(fn func(*model.Snapshot)) {
	a.mu.Lock()
	a.subs = append(a.subs, fn)
	a.mu.Unlock()
}

// Snapshot returns the latest published snapshot (version 0, empty, until
// the first is built). Between snapshots, a service that did not change is
// the same *model.Service pointer.
func (a *Aggregator) Snapshot() *model.Snapshot { return a.snap.Load() }

// Registries returns every registry's status, sorted by name.
func (a *Aggregator) Registries() []RegistryStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]RegistryStatus, 0, len(a.regs))
	for _, rs := range a.regs {
		out = append(out, rs.status())
	}
	slices.SortFunc(out, func(x, y RegistryStatus) int { return strings.Compare(x.Name, y.Name) })
	return out
}

// Registry returns one registry's status.
func (a *Aggregator) Registry(name string) (RegistryStatus, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	rs, ok := a.regs[name]
	if !ok {
		return RegistryStatus{}, false
	}
	return rs.status(), true
}

func (rs *regState) status() RegistryStatus {
	state, since := rs.effective(), rs.since
	var hold *HoldStatus
	if rs.hold != nil {
		h := *rs.hold
		hold = &h
		if state == Held {
			since = h.Since
		}
	}
	return RegistryStatus{
		Name:      rs.opts.Name,
		Kind:      rs.opts.Kind,
		Domain:    rs.opts.Domain,
		State:     state,
		Since:     since,
		LastSync:  rs.lastSync,
		LastError: rs.lastError,
		Services:  rs.services,
		Endpoints: rs.endpoints,
		Withdrawn: rs.withdrawn,
		HeldDown:  rs.hold != nil,
		Hold:      hold,
		Restored:  rs.restored,
	}
}

// Conflicts returns everything rejected or quarantined as of the last
// snapshot build, sorted by registry, host, category, subject and reason.
func (a *Aggregator) Conflicts() []Conflict {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.conflicts)
}

// Ready reports whether every registry has had its first sync reflected in
// the published snapshot, is Failed, or has had SyncTimeout pass since it
// was added. Once that has held (latched when Ready is called or a snapshot
// is built), registries added later (AddRegistry, e.g. remote clusters
// found at runtime) do not count: a new cluster must not take a serving
// meshfed out of its Service. The reason names the registries that are not
// synced (also when the answer is true because of the timeout, a failure
// or a late addition); it is "" when all are synced.
func (a *Aggregator) Ready() (bool, string) {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.readyLocked(now)
}

// readyLocked is Ready; it latches wasReady. Called with mu held.
func (a *Aggregator) readyLocked(now time.Time) (bool, string) {
	names := make([]string, 0, len(a.regs))
	for n := range a.regs {
		names = append(names, n)
	}
	slices.Sort(names)
	var waiting, late, failed, added []string
	for _, n := range names {
		rs := a.regs[n]
		if rs.applied {
			continue
		}
		desc := n + " (" + rs.state.String()
		if rs.lastError != "" {
			desc += ": " + rs.lastError
		}
		desc += ")"
		switch {
		case rs.state == Failed:
			failed = append(failed, desc)
		case rs.late:
			added = append(added, desc)
		case now.Sub(rs.added) >= a.syncTimeout:
			late = append(late, desc)
		default:
			waiting = append(waiting, desc)
		}
	}
	var parts []string
	if len(waiting) > 0 {
		parts = append(parts, "waiting for the first sync of "+strings.Join(waiting, ", "))
	}
	if len(late) > 0 {
		parts = append(parts, fmt.Sprintf("no first sync within %s: %s", a.syncTimeout, strings.Join(late, ", ")))
	}
	if len(failed) > 0 {
		parts = append(parts, "failed: "+strings.Join(failed, ", "))
	}
	if len(added) > 0 {
		parts = append(parts, "added while ready, not synced yet: "+strings.Join(added, ", "))
	}
	ok := len(waiting) == 0
	a.wasReady = a.wasReady || ok
	return ok, strings.Join(parts, "; ")
}

// errServing is returned by a second concurrent Serve.
var errServing = errors.New("aggregate: Serve is already running")
