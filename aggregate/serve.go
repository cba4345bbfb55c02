package aggregate

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// loopReg is the Serve goroutine's view of a registry.
type loopReg struct {
	shared  *regState // identity: a re-added registry has a new one
	opts    RegistryOptions
	domain  string // normalized opts.Domain
	gen     uint64
	cur     shardState // accepted state
	raw     *input     // input cur was built from
	applied bool       // cur holds a published (or a restored) state
	visible bool       // cur is served (not withdrawn)
	saved   *input     // last input handed to OnAccepted
	// deltaOf: raw was applied in place as its delta to this input
	// (offerDelta); nil when raw was applied in full.
	deltaOf *input
	hold    *hold
	memo    *normMemo // of the last normalization under opts
	memoOf  *input    // the input memo's entries are (see materialize)
}

// base is the input a delta taken now changes: the last one offered,
// held or applied.
func (lr *loopReg) base() *input {
	if lr.hold != nil {
		return lr.hold.in
	}
	return lr.raw
}

// materialize returns in's full list of services. An input taken as a
// delta and applied in place (offerDelta) has none until asked: it is
// then read from the memo, whose entries are its services while memoOf
// is in (in hostname order). ok is false for one that can no longer be
// read (none is kept that way: see pin).
func (lr *loopReg) materialize(in *input) (services []model.Service, ok bool) {
	if in.delta == nil || in.services != nil {
		return in.services, true
	}
	if lr.memoOf != in || lr.memo == nil {
		return nil, false
	}
	in.services = make([]model.Service, 0, len(lr.memo.entries))
	for _, h := range slices.Sorted(maps.Keys(lr.memo.entries)) {
		in.services = append(in.services, lr.memo.entries[h].in)
	}
	return in.services, true
}

// pin materializes the accepted input before the memo changes to
// another one.
func (lr *loopReg) pin() {
	if lr.raw != nil {
		lr.materialize(lr.raw)
	}
}

// accepted is raw as OnAccepted gets it, a delta when raw was applied
// in place onto the input handed before; raw becomes the input handed.
func (lr *loopReg) accepted() Accepted {
	acc := Accepted{Rejected: lr.raw.rejected}
	if d := lr.raw.delta; d != nil && lr.saved != nil && lr.deltaOf == lr.saved {
		acc.Delta = true
		for _, h := range slices.Sorted(maps.Keys(d.changed)) {
			acc.Changed = append(acc.Changed, d.changed[h])
		}
		acc.Removed = slices.Sorted(maps.Keys(d.removed))
	} else {
		lr.pin()
		acc.Services = lr.raw.services
	}
	lr.saved = lr.raw
	return acc
}

// hold is an update held back by MaxDeleteRatio.
type hold struct {
	since    time.Time
	in       *input
	st       shardState
	conflict Conflict
}

// Serve runs the debounce and freshness timers and builds snapshots until
// ctx ends; it returns ctx.Err(). It implements suture.Service; only one
// Serve may run at a time.
func (a *Aggregator) Serve(ctx context.Context) error {
	if !a.serving.CompareAndSwap(false, true) {
		return errServing
	}
	defer a.serving.Store(false)

	deb := registries.Debouncer{Quiet: a.quiet, MaxWait: a.maxWait}
	deb.Add(a.now()) // pick up whatever arrived before Serve
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		now := a.now()
		expired, next := a.tick(now)
		due, wait := deb.Next(now)
		if expired || due {
			deb.Done()
			a.rebuild(now)
			continue
		}
		sleep := time.Duration(-1)
		if deb.Pending() {
			sleep = wait
		}
		if !next.IsZero() {
			if d := next.Sub(now); sleep < 0 || d < sleep {
				sleep = d
			}
		}
		var fire <-chan time.Time
		if sleep >= 0 {
			timer.Reset(sleep)
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-a.signal:
			deb.Add(a.now())
		case <-fire:
		}
		timer.Stop()
	}
}

// visible reports whether rs's accepted state is served at now. Called with
// mu held.
func visible(rs *regState, now time.Time) bool {
	return rs.opts.Outage.Policy != OutageExpire || rs.outageSince.IsZero() ||
		now.Before(rs.outageSince.Add(rs.opts.Outage.ExpireAfter))
}

// tick applies the freshness transitions due at now (Degraded → Stale). It
// reports whether a timer expired that needs a rebuild (a withdrawal, a
// return, a hold-down timeout) and the next time one will.
func (a *Aggregator) tick(now time.Time) (expired bool, next time.Time) {
	earliest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	var stale []string
	a.mu.Lock()
	for name, rs := range a.regs {
		if !rs.outageSince.IsZero() {
			dl := rs.outageSince.Add(rs.opts.Outage.ExpireAfter)
			if now.Before(dl) {
				earliest(dl)
			} else if rs.state == Degraded {
				a.setState(rs, Stale, dl)
				stale = append(stale, name)
			}
		}
		lr := a.loop[name]
		if lr == nil || lr.shared != rs {
			continue // new: the signal from AddRegistry brings a rebuild
		}
		if visible(rs, now) != lr.visible {
			expired = true
		}
		if lr.hold != nil {
			if dl := lr.hold.since.Add(a.holdDown); now.Before(dl) {
				earliest(dl)
			} else {
				expired = true
			}
		}
	}
	a.mu.Unlock()
	for _, name := range stale {
		a.log.Warn("registry stale: outage longer than outage.expireAfter", "registry", name)
	}
	return expired, next
}

// rebuild takes the pending updates, normalizes them, applies hold-downs
// and visibility, merges the touched hostnames, and publishes a snapshot if
// any service pointer changed.
func (a *Aggregator) rebuild(now time.Time) {
	start := time.Now()
	type job struct {
		lr      *loopReg
		in      *input
		fresh   bool // in is a swapped-in instance's first state
		reopts  bool
		visible bool
		release chan struct{}
	}
	var jobs []job
	touched := map[string]bool{}
	touch := func(services map[string]*model.Service) {
		for h := range services {
			touched[h] = true
		}
	}

	a.mu.Lock()
	for name, lr := range a.loop {
		if rs := a.regs[name]; rs != lr.shared {
			touch(lr.cur.services) // removed, or replaced by a new registry of that name
			delete(a.loop, name)
		}
	}
	for name, rs := range a.regs {
		lr := a.loop[name]
		if lr == nil {
			lr = &loopReg{shared: rs, opts: rs.opts, domain: normDomain(rs.opts.Domain), gen: rs.gen, visible: true}
			a.loop[name] = lr
		}
		in, release, fresh := rs.take()
		j := job{lr: lr, in: in, fresh: fresh, visible: visible(rs, now), release: release}
		if rs.gen != lr.gen {
			lr.opts, lr.domain, lr.gen = rs.opts, normDomain(rs.opts.Domain), rs.gen
			j.reopts = true
		}
		jobs = append(jobs, j)
	}
	a.mu.Unlock()

	changedAt := now // timers: when they fired
	for _, j := range jobs {
		if j.in != nil && !j.in.seen.IsZero() && j.in.seen.Before(changedAt) {
			changedAt = j.in.seen
		}
	}
	for _, j := range jobs {
		lr := j.lr
		log := a.log.With("registry", lr.opts.Name)
		if j.reopts {
			// Its results were made under the old options, also for an
			// input that arrives with the new ones (a reload's swap: the
			// new instance's first state often equals the old one's).
			lr.pin()
			lr.memo, lr.memoOf = nil, nil
		}
		if j.reopts {
			// What is served and held is made again under the new
			// options first: an input offered now may be held, and then
			// the served state must show the new options all the same.
			if lr.hold != nil {
				lr.hold.st, lr.memo = normalizeWith(lr.opts, lr.hold.in.services, lr.hold.in.rejected, nil)
				lr.memoOf = lr.hold.in
			}
			if lr.raw != nil {
				var st shardState
				st, lr.memo = normalizeWith(lr.opts, lr.raw.services, lr.raw.rejected, lr.memo)
				lr.memoOf = lr.raw
				a.apply(lr, st, lr.raw, touched)
			}
		}
		if j.in != nil {
			a.offer(lr, j.in, j.fresh, now, touched, log)
		}
		switch {
		case lr.hold != nil && j.release != nil:
			log.Warn("applying held-down update: released by an operator",
				"endpoints", lr.hold.st.endpoints, "was", lr.cur.endpoints)
			a.apply(lr, lr.hold.st, lr.hold.in, touched)
			lr.hold = nil
		case lr.hold != nil && !now.Before(lr.hold.since.Add(a.holdDown)):
			log.Warn("applying held-down update: hold-down time passed", "holdDown", a.holdDown,
				"endpoints", lr.hold.st.endpoints, "was", lr.cur.endpoints)
			a.apply(lr, lr.hold.st, lr.hold.in, touched)
			lr.hold = nil
		}
		if a.onAccepted != nil && lr.raw != lr.saved && lr.raw != nil && !lr.raw.restored {
			acc := lr.accepted()
			a.mu.Lock()
			if a.regs[lr.opts.Name] == lr.shared { // not removed since the jobs were taken
				a.onAccepted(lr.opts.Shard(), acc)
			}
			a.mu.Unlock()
		}
		if j.visible != lr.visible {
			lr.visible = j.visible
			touch(lr.cur.services)
			if lr.visible {
				log.Info("registry services served again", "services", len(lr.cur.services))
			} else {
				log.Warn("registry services withdrawn: outage longer than outage.expireAfter with policy expire",
					"services", len(lr.cur.services))
			}
		}
	}

	names := make([]string, 0, len(a.loop))
	for n := range a.loop {
		names = append(names, n)
	}
	slices.Sort(names)

	changed := map[string]bool{} // hostnames whose served pointer changed
	for h := range touched {
		var cs []contribution
		for _, n := range names {
			lr := a.loop[n]
			if s, ok := lr.cur.services[h]; ok && lr.visible {
				cs = append(cs, contribution{name: n, kind: lr.opts.Kind, domain: lr.domain, multicluster: lr.opts.Multicluster, svc: s})
			}
		}
		prev := a.merged[h]
		svc, conflicts := mergeHost(h, cs, prev)
		if len(conflicts) > 0 {
			a.mergeConflicts[h] = conflicts
		} else {
			delete(a.mergeConflicts, h)
		}
		switch {
		case svc == nil && prev != nil:
			delete(a.merged, h)
			changed[h] = true
		case svc != nil && svc != prev:
			a.merged[h] = svc
			changed[h] = true
		}
	}

	conflicts := a.collectConflicts(names, now)

	a.mu.Lock()
	cfg, cfgSeen := a.config, a.configSeen
	a.mu.Unlock()
	var restored []string
	for _, n := range names {
		if lr := a.loop[n]; lr.raw != nil && lr.raw.restored && lr.visible {
			restored = append(restored, n)
		}
	}
	var snap *model.Snapshot
	// A snapshot is also published when only Restored changed (a registry's
	// own state equal to the restored one): the xDS server learns from it
	// that the restored state is confirmed.
	if prev := a.snap.Load(); len(changed) > 0 || cfg != prev.Config || !slices.Equal(restored, prev.Restored) {
		if cfg != prev.Config && !cfgSeen.IsZero() && cfgSeen.Before(changedAt) {
			changedAt = cfgSeen
		}
		hosts := slices.Sorted(maps.Keys(changed))
		snap = prev.Next(prev.Version+1, hosts, func(h string) *model.Service { return a.merged[h] })
		if prev.Version > 0 {
			snap.DeltaFrom, snap.DeltaHosts = prev.Version, hosts
		}
		snap.Config = cfg
		snap.Changed = changedAt
		snap.Restored = restored
		a.snap.Store(snap)
		snapshotsTotal.Inc()
	}

	a.mu.Lock()
	for _, n := range names {
		lr := a.loop[n]
		rs := lr.shared
		rs.applied = rs.applied || lr.applied
		rs.taken = false
		rs.hold = nil
		if h := lr.hold; h != nil {
			rs.hold = &HoldStatus{Since: h.since, Served: lr.cur.endpoints, Pending: h.st.endpoints, Reason: h.conflict.Reason}
		}
		rs.restored = lr.raw != nil && lr.raw.restored
		rs.withdrawn = !lr.visible
		rs.services, rs.endpoints = 0, 0
		if lr.visible {
			rs.services, rs.endpoints = len(lr.cur.services), lr.cur.endpoints
		}
		if a.regs[n] == rs {
			if st := rs.effective(); st != rs.shown {
				rs.shown = st
				setStateMetric(n, st)
			}
			registryServices.WithLabelValues(n).Set(float64(rs.services))
			registryEndpoints.WithLabelValues(n).Set(float64(rs.endpoints))
		}
	}
	a.conflicts = conflicts
	if !a.wasReady {
		a.readyLocked(now)
	}
	subs := slices.Clone(a.subs)
	a.mu.Unlock()

	for _, j := range jobs {
		if j.release != nil {
			close(j.release)
		}
	}
	setConflictMetrics(conflicts)
	snapshotBuildSeconds.Observe(time.Since(start).Seconds())
	if snap != nil {
		a.log.Debug("snapshot published", "version", snap.Version, "services", snap.Len(), "touched", len(touched))
	}
	// Deliver the latest snapshot unless subscribers have it: after a
	// subscriber panicked and Serve was restarted, this redelivers it.
	if cur := a.snap.Load(); cur.Version > a.delivered {
		for _, fn := range subs {
			fn(cur)
		}
		a.delivered = cur.Version
	}
}

// offer passes a published state through normalization and the hold-down.
// fresh: in is the first state of an instance swapped in by a reload
// (Swap); it does not confirm an update the old instance had held down,
// since both instances read the backend at about the same moment (a
// backend restarting answers both with the same partial catalog): it
// takes the held update's place, and the hold keeps its start.
//
// A delta is applied in place when it can be (offerDelta); otherwise it
// is applied to the input it changes and offered as a full state.
func (a *Aggregator) offer(lr *loopReg, in *input, fresh bool, now time.Time, touched map[string]bool, log *slog.Logger) {
	if in.delta != nil {
		if a.offerDelta(lr, in, touched) {
			return
		}
		base := lr.base()
		var services []model.Service
		ok := base != nil
		if ok {
			services, ok = lr.materialize(base)
		}
		if !ok {
			log.Error("state given as a change to a state the aggregator does not hold; ignored (a registry's first state of a Run must be full)")
			return
		}
		in = &input{services: applyDelta(services, in.delta), rejected: in.rejected, seen: in.seen}
	}
	lr.pin()
	st, memo := normalizeWith(lr.opts, in.services, in.rejected, lr.memo)
	lr.memo, lr.memoOf = memo, in
	r := lr.opts.MaxDeleteRatio
	confirmed := false
	if served := lr.cur.endpoints; r > 0 && lr.applied && served > 0 {
		drop := served - st.endpoints
		if float64(drop) > r*float64(served) {
			reason := fmt.Sprintf("update would remove %d of %d endpoints (%.0f%% > %.0f%%); held until seen again or for %s",
				drop, served, 100*float64(drop)/float64(served), 100*r, a.holdDown)
			if lr.hold == nil {
				lr.hold = &hold{
					since:    now,
					in:       in,
					st:       st,
					conflict: newConflict(CategoryHoldDown, lr.opts.Name, "", "", reason),
				}
				holddownsTotal.WithLabelValues(lr.opts.Name).Inc()
				log.Warn("update held down by maxDeleteRatio", "served", served, "offered", st.endpoints, "maxDeleteRatio", r)
				return
			}
			if fresh {
				lr.hold.in, lr.hold.st = in, st
				lr.hold.conflict = newConflict(CategoryHoldDown, lr.opts.Name, "", "", reason)
				log.Warn("update held down by maxDeleteRatio: the first state of the instance a reload swapped in does not confirm the held one",
					"served", served, "offered", st.endpoints, "maxDeleteRatio", r)
				return
			}
			confirmed = true
			log.Warn("held-down update confirmed: applying", "served", served, "offered", st.endpoints)
		}
	}
	if lr.hold != nil && !confirmed {
		log.Info("hold-down cleared by an update within maxDeleteRatio")
	}
	lr.hold = nil
	a.apply(lr, st, in, touched)
}

// offerDelta applies the delta in to lr's accepted state in place, in
// O(change): it normalizes only the changed services (reusing the memo's
// result for an unchanged one), and updates the served map, the endpoint
// count and the conflicts. It reports false, changing nothing, when the
// result could differ from offering the full state: an update is held
// down, the accepted state is not the one the delta changes or not the
// memo's, a hostname is published twice, or the change would make the
// hold-down hold it.
func (a *Aggregator) offerDelta(lr *loopReg, in *input, touched map[string]bool) bool {
	m := lr.memo
	if lr.hold != nil || lr.raw == nil || !lr.applied || lr.memoOf != lr.raw || m == nil || lr.cur.dups > 0 {
		return false
	}
	d := in.delta
	m.visits += len(d.changed) + len(d.removed)
	eps := lr.cur.endpoints
	freed := map[string]*model.Service{} // served hostnames the changed and removed inputs had
	free := func(h string) {
		if e, ok := m.entries[h]; ok && e.out != nil {
			freed[e.out.Hostname] = lr.cur.services[e.out.Hostname]
			eps -= len(e.out.Endpoints)
		}
	}
	for h := range d.removed {
		free(h)
	}
	for h := range d.changed {
		free(h)
	}
	type result struct {
		in  model.Service
		out *model.Service
		cs  []Conflict
	}
	results := make(map[string]result, len(d.changed))
	claimed := make(map[string]bool, len(d.changed))
	for h, s := range d.changed {
		r := result{in: s}
		if e, ok := m.entries[h]; ok && sameInput(&e.in, &s) {
			r.out, r.cs = e.out, e.cs
		} else {
			r.out, r.cs = m.normalize(lr.opts, lr.domain, &s)
		}
		if r.out != nil {
			_, taken := lr.cur.services[r.out.Hostname]
			_, isFreed := freed[r.out.Hostname]
			if claimed[r.out.Hostname] || taken && !isFreed {
				return false // a duplicate: the order decides
			}
			claimed[r.out.Hostname] = true
			eps += len(r.out.Endpoints)
		}
		results[h] = r
	}
	if r, served := lr.opts.MaxDeleteRatio, lr.cur.endpoints; r > 0 && served > 0 && float64(served-eps) > r*float64(served) {
		return false
	}

	for h := range freed {
		delete(lr.cur.services, h)
	}
	for h := range d.removed {
		delete(m.entries, h)
		delete(m.withCS, h)
	}
	for h, r := range results {
		m.entries[h] = memoEntry{in: r.in, out: r.out, cs: r.cs, gen: m.gen}
		if len(r.cs) > 0 {
			m.withCS[h] = true
		} else {
			delete(m.withCS, h)
		}
		if r.out == nil {
			continue
		}
		if old := freed[r.out.Hostname]; old != nil && (old == r.out || equalService(old, r.out)) {
			lr.cur.services[r.out.Hostname] = old
			delete(freed, r.out.Hostname)
			continue
		}
		lr.cur.services[r.out.Hostname] = r.out
		touched[r.out.Hostname] = true
	}
	for h := range freed {
		if _, back := lr.cur.services[h]; !back {
			touched[h] = true
		}
	}
	lr.cur.endpoints = eps
	lr.cur.conflicts = registryConflicts(lr.opts.Name, in.rejected)
	for _, h := range slices.Sorted(maps.Keys(m.withCS)) {
		lr.cur.conflicts = append(lr.cur.conflicts, m.entries[h].cs...)
	}
	lr.deltaOf = lr.raw
	lr.raw, lr.memoOf = in, in
	return true
}

// apply makes st the accepted state of lr, reusing the pointers of
// unchanged services, and marks the hostnames that changed.
func (a *Aggregator) apply(lr *loopReg, st shardState, in *input, touched map[string]bool) {
	for _, h := range reuse(lr.cur.services, st.services) {
		touched[h] = true
	}
	lr.cur, lr.raw, lr.applied, lr.deltaOf = st, in, true, nil
}

// collectConflicts lists every conflict of the accepted states, the holds
// and the merge, keeping Since of those seen before, and logs new ones.
func (a *Aggregator) collectConflicts(names []string, now time.Time) []Conflict {
	var all []Conflict
	for _, n := range names {
		lr := a.loop[n]
		all = append(all, lr.cur.conflicts...)
		if lr.hold != nil {
			all = append(all, lr.hold.conflict)
		}
	}
	for _, cs := range a.mergeConflicts {
		all = append(all, cs...)
	}
	sortConflicts(all)
	since := make(map[conflictKey]time.Time, len(all))
	const maxLogged = 10
	fresh := 0
	for i := range all {
		k := all[i].key()
		t, ok := a.conflictSince[k]
		if !ok {
			if t, ok = since[k]; !ok {
				t = now
				if fresh++; fresh <= maxLogged {
					a.log.Warn("conflict", "registry", all[i].Registry, "host", all[i].Host,
						"category", all[i].Category, "subject", all[i].Subject, "reason", all[i].Reason)
				}
			}
		}
		all[i].Since = t
		since[k] = t
	}
	if fresh > maxLogged {
		a.log.Warn("more new conflicts not logged; see /debug/conflictz", "count", fresh-maxLogged)
	}
	a.conflictSince = since
	return all
}

func normDomain(d string) string { return strings.ToLower(strings.TrimSuffix(d, ".")) }
