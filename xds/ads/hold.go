package ads

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshfed/meshfed/metric"
)

// The restore hold (docs/architecture.md §3.4.1, "Warm start"). A
// restarted meshfed serves the states restored from its state directory
// at once. Those may be older than what a client received from the
// process before it (a full or read-only state directory cannot record
// that its content is stale), so a client that reconnects holding
// configuration would be told to drop what was registered since. While
// the store holds resources derived from restored, unconfirmed registry
// states, such a subscription is held: it is sent nothing, and the client
// keeps what it has, as if meshfed were still restarting. It is released
// when no registry is restored any more (each registry's own state
// superseded the restored one) or when the bound passes, whichever comes
// first; then it is answered with the current state. A subscription of a
// client that holds nothing of its type is served at once: that is what
// warm start is for.
//
// Granularity is per type URL per stream: a SotW response of CDS or LDS
// is the full set, so any part of it could remove what the client holds.
//
// The gate arms once, with the first restored state (before xDS serves);
// a registry restored later (added by a reload) does not hold clients,
// which cannot hold anything of it from a previous process.

var (
	restoreHeld      = metric.Gauge("meshfed_xds_restore_held_subscriptions", "Subscriptions (per stream and xDS type) held because the client reconnected holding configuration while the served state is restored from state.dir and not yet confirmed by its registry (released when confirmed, or after syncTimeout).")
	restoreHeldTotal = metric.Counter("meshfed_xds_restore_holds_total", "Subscriptions held by the restore hold since start (see meshfed_xds_restore_held_subscriptions).")
)

// restoreGate is the server's restore hold: whether it holds, and the
// subscriptions it holds.
type restoreGate struct {
	bound   time.Duration // 0: no hold
	holding atomic.Bool   // read on every push of a held subscription

	mu    sync.Mutex // guards the fields below; holding changes under it
	armed bool       // armed once; never again after the release
	timer *time.Timer
	held  map[*Subscription]struct{}
	why   string // why it was released
}

// setRestored records which registries the store's state is restored
// from (nil: none). The first non-empty list arms the gate for the bound;
// an empty one releases it.
func (g *restoreGate) setRestored(restored []string) {
	if g.bound <= 0 {
		return
	}
	g.mu.Lock()
	switch {
	case len(restored) > 0 && !g.armed:
		g.armed = true
		g.holding.Store(true)
		g.timer = time.AfterFunc(g.bound, func() { g.release("bound passed: serving the restored state") })
		g.mu.Unlock()
	case len(restored) == 0 && g.holding.Load():
		g.mu.Unlock()
		g.release("every restored registry synced")
	default:
		g.mu.Unlock()
	}
}

// hold holds sub if the gate holds; it reports whether it did.
func (g *restoreGate) hold(sub *Subscription) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.holding.Load() {
		return false
	}
	if g.held == nil {
		g.held = map[*Subscription]struct{}{}
	}
	g.held[sub] = struct{}{}
	restoreHeld.Inc()
	restoreHeldTotal.Inc()
	return true
}

// forget drops a held subscription whose stream ended.
func (g *restoreGate) forget(sub *Subscription) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.held[sub]; ok {
		delete(g.held, sub)
		restoreHeld.Dec()
	}
}

// release ends the hold and wakes every held subscription; its stream
// then sends the current state (push).
func (g *restoreGate) release(why string) {
	g.mu.Lock()
	if !g.holding.Load() {
		g.mu.Unlock()
		return
	}
	g.holding.Store(false)
	g.why = why
	if g.timer != nil {
		g.timer.Stop()
	}
	held := g.held
	g.held = nil
	restoreHeld.Sub(float64(len(held)))
	g.mu.Unlock()
	for sub := range held {
		sub.requeue()
	}
}

// reason says why the gate released.
func (g *restoreGate) reason() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.why
}

// requeue makes sub's stream compare every name it matches or its client
// holds, and wakes it.
func (sub *Subscription) requeue() {
	w := sub.w
	w.mu.Lock()
	sub.all = true
	sub.queueLocked()
	w.mu.Unlock()
	w.wakeUp()
}

// holdIfRestored holds ts, on its first request, when its client holds
// configuration of its type (held: SotW version_info or delta
// initial_resource_versions) and the gate holds. Logged once per stream.
func (a *ads) holdIfRestored(st *stream, ts *typeSub, held bool) {
	if !held || ts.sub.coll == nil || !a.gate.hold(ts.sub) {
		return
	}
	ts.held = true
	a.tracker.setHeld(st.status, ts.status, true)
	if !st.holdLogged {
		st.holdLogged = true
		a.tracker.log.Info("xds stream held: it reconnected holding configuration while the served state is restored and not yet confirmed by its registry; it keeps what it has until then or syncTimeout",
			"node", st.node.GetId(), "stream", streamKind(st.status.key), "streamId", st.status.key.id, "type", ts.typeURL)
	}
}

// holding reports whether ts is still held. The first call after the
// release clears the hold; the stream then answers as if asked (reply).
func (a *ads) holding(st *stream, ts *typeSub) bool {
	if !ts.held {
		return false
	}
	if a.gate.holding.Load() {
		return true
	}
	ts.held = false
	a.tracker.setHeld(st.status, ts.status, false)
	a.tracker.log.Debug("xds subscription released from the restore hold", "node", st.node.GetId(),
		"streamId", st.status.key.id, "type", ts.typeURL, "reason", a.gate.reason())
	return false
}

// setHeld records whether the restore hold holds a type (TypeStatus.Held).
func (t *tracker) setHeld(s *streamState, ts *typeState, held bool) {
	s.mu.Lock()
	ts.HeldRestored = held
	s.mu.Unlock()
}
