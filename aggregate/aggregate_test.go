package aggregate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/test/logbuf"
)

func TestNothingDeletedBeforeFirstSync(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	east, west := reg("east", "kubernetes", "svc.cluster.local"), reg("west", "kubernetes", "svc.cluster.local")
	a := newRunning(t, clock, east, west)

	if ok, reason := a.Ready(); ok || !strings.Contains(reason, "east (Starting)") || !strings.Contains(reason, "west (Starting)") {
		t.Errorf("Ready() = %v, %q before any sync; want false naming east and west", ok, reason)
	}
	report(a, shard(west), status{State: Degraded, Err: "connection refused"})
	replace(a, shard(east), []model.Service{svc("a.ns.svc.cluster.local", "10.0.0.1")}, nil)
	snap := waitVersion(t, a, 1)
	if got := addrs(snap, "a.ns.svc.cluster.local"); !slices.Equal(got, []string{"10.0.0.1"}) {
		t.Errorf("served %v, want east's endpoint while west has not synced", got)
	}
	st, _ := a.Registry("west")
	if st.State != Degraded || !st.LastSync.IsZero() || st.LastError != "connection refused" {
		t.Errorf("west = %+v, want Degraded with no LastSync and its error", st)
	}
	if ok, reason := a.Ready(); ok || !strings.Contains(reason, "west (Degraded: connection refused)") || strings.Contains(reason, "east") {
		t.Errorf("Ready() = %v, %q; want false waiting for west only", ok, reason)
	}

	replace(a, shard(west), []model.Service{svc("a.ns.svc.cluster.local", "10.1.0.1")}, nil)
	snap = waitVersion(t, a, 2)
	if got := addrs(snap, "a.ns.svc.cluster.local"); !slices.Equal(got, []string{"10.0.0.1", "10.1.0.1"}) {
		t.Errorf("served %v, want both clusters' endpoints", got)
	}
	eventually(t, "ready", func() bool { ok, _ := a.Ready(); return ok })

	// After the first sync an empty Replace does delete.
	replace(a, shard(west), nil, nil)
	snap = waitVersion(t, a, 3)
	if got := addrs(snap, "a.ns.svc.cluster.local"); !slices.Equal(got, []string{"10.0.0.1"}) {
		t.Errorf("served %v after west emptied, want east's only", got)
	}
}

func TestReadySyncTimeoutAndFailed(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	a := New(Options{Registries: []RegistryOptions{reg("a", "file", "a"), reg("b", "consul", "b")}, Now: clock.Now, SyncTimeout: time.Minute})
	report(a, model.ShardKey{Kind: "consul", Name: "b"}, status{State: Failed, Err: "bad token"})
	if ok, _ := a.Ready(); ok {
		t.Errorf("ready while a never synced and the timeout has not passed")
	}
	clock.Advance(time.Minute)
	ok, reason := a.Ready()
	if !ok || !strings.Contains(reason, "no first sync within 1m0s: a (Starting)") || !strings.Contains(reason, "failed: b (Failed: bad token)") {
		t.Errorf("Ready() = %v, %q; want true, naming a (timeout) and b (failed)", ok, reason)
	}
}

func TestDomainRejectedAndListed(t *testing.T) {
	t.Parallel()
	o := reg("vms", "file", "vm.internal")
	a := newRunning(t, newFakeClock(), o)
	replace(a, shard(o), []model.Service{svc("orders.vm.internal", "10.0.0.1"), svc("orders.consul", "10.0.0.2")},
		[]model.Rejection{{Subject: "services.yaml:7", Reason: "unknown key"}})
	snap := waitVersion(t, a, 1)
	if snap.Len() != 1 || addrs(snap, "orders.consul") != nil {
		t.Errorf("snapshot holds %d services; the one outside the domain must not be served", snap.Len())
	}
	cs := a.Conflicts()
	if !hasConflict(cs, CategoryDomain, "orders.consul") || !hasConflict(cs, CategoryRegistry, "services.yaml:7") {
		t.Errorf("conflicts = %v, want the domain rejection and the registry's own rejection", cs)
	}
	for _, c := range cs {
		if c.Registry != "vms" || c.Since.IsZero() {
			t.Errorf("conflict %+v: want registry vms and Since set", c)
		}
	}
	st, _ := a.Registry("vms")
	if st.Services != 1 || st.Endpoints != 1 {
		t.Errorf("status counts %d services / %d endpoints, want 1/1", st.Services, st.Endpoints)
	}
}

func TestMulticlusterMergeAndPortMismatch(t *testing.T) {
	t.Parallel()
	east, west := reg("east", "kubernetes", "svc.cluster.local"), reg("west", "kubernetes", "svc.cluster.local")
	a := newRunning(t, newFakeClock(), east, west)
	host := "orders.shop.svc.cluster.local"
	eastSvc := svc(host, "10.0.0.1")
	westSvc := svc(host, "10.1.0.1")
	westSvc.Ports = []model.Port{{Name: "http", Number: 8080, Protocol: model.ProtocolHTTP}}
	replace(a, shard(east), []model.Service{eastSvc}, nil)
	replace(a, shard(west), []model.Service{westSvc}, nil)
	eventually(t, "both clusters merged", func() bool { return len(addrs(a.Snapshot(), host)) == 2 })
	s, _ := a.Snapshot().Service(host)
	if !slices.Equal(s.Sources, []string{"east", "west"}) || s.Ports[0].Number != 80 {
		t.Errorf("merged service sources %v ports %v; want east,west and east's port 80", s.Sources, s.Ports)
	}
	if p, _ := s.Endpoints[1].PortFor(s.Ports[0]); p != 8080 || s.Endpoints[1].Source.Registry != "west" {
		t.Errorf("west endpoint serves port %d from %q; want 8080 from west", p, s.Endpoints[1].Source.Registry)
	}
	if cs := a.Conflicts(); len(cs) != 1 || cs[0].Category != CategoryPortMismatch || cs[0].Registry != "west" {
		t.Errorf("conflicts = %v, want one port-mismatch for west", cs)
	}

	// Fixing the ports clears the conflict.
	replace(a, shard(west), []model.Service{svc(host, "10.1.0.1")}, nil)
	eventually(t, "conflict cleared", func() bool { return len(a.Conflicts()) == 0 })
}

func TestUnchangedServicesKeepTheirPointer(t *testing.T) {
	t.Parallel()
	x, y := reg("x", "file", "x"), reg("y", "consul", "y")
	a := newRunning(t, newFakeClock(), x, y)
	replace(a, shard(x), []model.Service{svc("a.x", "10.0.0.1"), svc("b.x", "10.0.0.2")}, nil)
	replace(a, shard(y), []model.Service{svc("c.y", "10.0.0.3")}, nil)
	eventually(t, "all three services", func() bool { return a.Snapshot().Len() == 3 })
	s1 := a.Snapshot()

	// An identical Replace (new slices, equal content) publishes nothing;
	// a change to a.x replaces that pointer only.
	replace(a, shard(y), []model.Service{svc("c.y", "10.0.0.3")}, nil)
	replace(a, shard(x), []model.Service{svc("a.x", "10.0.0.9"), svc("b.x", "10.0.0.2")}, nil)
	s2 := waitVersion(t, a, s1.Version+1)
	if s2.Version != s1.Version+1 {
		t.Errorf("version %d after one change, want %d", s2.Version, s1.Version+1)
	}
	for _, h := range []string{"b.x", "c.y"} {
		old, _ := s1.Service(h)
		cur, _ := s2.Service(h)
		if old != cur {
			t.Errorf("%s: pointer changed though the service did not", h)
		}
	}
	old, _ := s1.Service("a.x")
	cur, _ := s2.Service("a.x")
	if old == cur || cur.Endpoints[0].Address != "10.0.0.9" {
		t.Errorf("a.x: want a new service with the new endpoint")
	}
	if old.Endpoints[0].Address != "10.0.0.1" {
		t.Errorf("the old snapshot changed: %v", old.Endpoints)
	}
}

func TestFreshness(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		policy        OutagePolicy
		report        State
		wantState     State // after ExpireAfter
		wantWithdrawn bool
	}{
		{name: "keep serves a stale registry", policy: OutageKeep, report: Degraded, wantState: Stale},
		{name: "default policy is keep", policy: "", report: Degraded, wantState: Stale},
		{name: "expire withdraws a stale registry", policy: OutageExpire, report: Degraded, wantState: Stale, wantWithdrawn: true},
		{name: "expire withdraws a failed registry", policy: OutageExpire, report: Failed, wantState: Failed, wantWithdrawn: true},
		{name: "keep serves a failed registry", policy: OutageKeep, report: Failed, wantState: Failed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := newFakeClock()
			o := reg("dc1", "consul", "consul")
			o.Outage = Outage{Policy: tt.policy, ExpireAfter: 5 * time.Minute}
			other := reg("vms", "file", "vm")
			a := newRunning(t, clock, o, other)
			replace(a, shard(other), []model.Service{svc("b.vm", "10.9.0.1")}, nil)
			replace(a, shard(o), []model.Service{svc("a.consul", "10.0.0.1")}, nil)
			eventually(t, "both served", func() bool { return a.Snapshot().Len() == 2 })
			before, _ := a.Snapshot().Service("a.consul")

			report(a, shard(o), status{State: tt.report, Err: "dial tcp: connection refused"})
			clock.Advance(time.Minute)
			report(a, shard(o), status{State: tt.report, Err: "still down"})
			st := waitState(t, a, "dc1", tt.report)
			if st.Since != clock.Now().Add(-time.Minute) || st.LastError != "still down" {
				t.Errorf("status %+v: want Since at the first report and the latest error", st)
			}
			if addrs(a.Snapshot(), "a.consul") == nil {
				t.Fatalf("the last good state must stay served during an outage")
			}

			advance(a, clock, 4*time.Minute) // outage = ExpireAfter
			st = waitState(t, a, "dc1", tt.wantState)
			eventually(t, "withdrawal applied", func() bool {
				st, _ = a.Registry("dc1")
				return st.Withdrawn == tt.wantWithdrawn && (addrs(a.Snapshot(), "a.consul") == nil) == tt.wantWithdrawn
			})
			if tt.wantWithdrawn && (st.Services != 0 || st.Endpoints != 0) {
				t.Errorf("withdrawn registry counts %d/%d, want 0/0", st.Services, st.Endpoints)
			}
			if addrs(a.Snapshot(), "b.vm") == nil {
				t.Errorf("another registry's service was withdrawn")
			}

			report(a, shard(o), status{State: Synced})
			waitState(t, a, "dc1", Synced)
			eventually(t, "served again", func() bool { return addrs(a.Snapshot(), "a.consul") != nil })
			if after, _ := a.Snapshot().Service("a.consul"); after != before {
				t.Errorf("the service came back as a new pointer; it did not change")
			}
		})
	}
}

func TestDegradedReportAfterExpiryIsStale(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	o := reg("dc1", "consul", "consul") // default ExpireAfter 10m
	a := New(Options{Registries: []RegistryOptions{o}, Now: clock.Now})
	report(a, shard(o), status{State: Degraded, Err: "down"})
	clock.Advance(DefaultExpireAfter)
	report(a, shard(o), status{State: Degraded, Err: "down"})
	if st, _ := a.Registry("dc1"); st.State != Stale {
		t.Errorf("state %s, want Stale", st.State)
	}
	replace(a, shard(o), nil, nil)
	if st, _ := a.Registry("dc1"); st.State != Synced || st.LastError != "" || st.LastSync != clock.Now() {
		t.Errorf("after Replace: %+v, want Synced with LastSync now and no error", st)
	}
}

func TestHoldDown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// after the held update: what happens next
		next      func(a *Aggregator, c *fakeClock, o RegistryOptions)
		wantAddrs int
	}{{
		name: "confirmed by the next drop",
		next: func(a *Aggregator, _ *fakeClock, o RegistryOptions) {
			replace(a, shard(o), []model.Service{svc("a.consul", ips(2)...)}, nil)
		},
		wantAddrs: 2,
	}, {
		name: "confirmed by a re-send of the held state",
		next: func(a *Aggregator, _ *fakeClock, o RegistryOptions) {
			u := registries.FullState([]model.Service{svc("a.consul", ips(3)...)}, nil)
			u.Confirm = true
			a.Publish(shard(o), u)
		},
		wantAddrs: 3,
	}, {
		name:      "applied after HoldDown",
		next:      func(a *Aggregator, c *fakeClock, _ RegistryOptions) { advance(a, c, time.Minute) },
		wantAddrs: 3,
	}, {
		name: "cleared by an update within the ratio",
		next: func(a *Aggregator, _ *fakeClock, o RegistryOptions) {
			replace(a, shard(o), []model.Service{svc("a.consul", ips(9)...)}, nil)
		},
		wantAddrs: 9,
	}, {
		name: "released by an operator",
		next: func(a *Aggregator, _ *fakeClock, o RegistryOptions) {
			st, err := a.Release(context.Background(), o.Name)
			if err != nil || st.State != Synced || st.Hold != nil || st.Endpoints != 3 {
				panic(fmt.Sprintf("Release = %+v, %v; want Synced with the 3 held endpoints served", st, err))
			}
		},
		wantAddrs: 3,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := newFakeClock()
			o := reg("hold-"+strings.ReplaceAll(tt.name, " ", "-"), "consul", "consul")
			o.MaxDeleteRatio = 0.5
			a := New(Options{Registries: []RegistryOptions{o}, Now: clock.Now, HoldDown: time.Minute})
			start(t, a)
			holds0 := testutil.ToFloat64(holddownsTotal.WithLabelValues(o.Name))
			replace(a, shard(o), []model.Service{svc("a.consul", ips(10)...)}, nil)
			waitVersion(t, a, 1)

			replace(a, shard(o), []model.Service{svc("a.consul", ips(3)...)}, nil)
			eventually(t, "hold-down listed", func() bool { return hasConflict(a.Conflicts(), CategoryHoldDown, "") })
			c := a.Conflicts()[0]
			if want := "update would remove 7 of 10 endpoints (70% > 50%)"; !strings.HasPrefix(c.Reason, want) || c.Registry != o.Name {
				t.Errorf("conflict %v, want reason starting %q for %s", c, want, o.Name)
			}
			if n := len(addrs(a.Snapshot(), "a.consul")); n != 10 {
				t.Errorf("served %d endpoints during the hold, want the old 10", n)
			}
			st, _ := a.Registry(o.Name)
			if st.State != Held || !st.HeldDown || st.Endpoints != 10 || st.Hold == nil {
				t.Fatalf("status %+v, want Held, HeldDown, 10 endpoints", st)
			}
			if h := *st.Hold; h.Served != 10 || h.Pending != 3 || h.Reason != c.Reason || !h.Since.Equal(clock.Now()) {
				t.Errorf("hold %+v, want served 10, pending 3, since now, the conflict's reason", h)
			}
			if code := testutil.ToFloat64(registryState.WithLabelValues(o.Name, "Held")); code != 1 {
				t.Errorf("meshfed_registry_state{state=Held} = %v, want 1", code)
			}
			if n := testutil.ToFloat64(holddownsTotal.WithLabelValues(o.Name)) - holds0; n != 1 {
				t.Errorf("meshfed_holddowns_total grew by %v, want 1", n)
			}

			tt.next(a, clock, o)
			eventually(t, "update applied", func() bool { return len(addrs(a.Snapshot(), "a.consul")) == tt.wantAddrs })
			eventually(t, "hold-down cleared", func() bool { return len(a.Conflicts()) == 0 })
			if st, _ := a.Registry(o.Name); st.HeldDown || st.Hold != nil || st.State != Synced || st.Endpoints != tt.wantAddrs {
				t.Errorf("status %+v, want Synced, no hold and %d endpoints", st, tt.wantAddrs)
			}
			if _, err := a.Release(context.Background(), o.Name); !errors.Is(err, ErrNothingHeld) {
				t.Errorf("Release with nothing held = %v, want ErrNothingHeld", err)
			}
		})
	}
}

func TestReleaseUnknown(t *testing.T) {
	t.Parallel()
	a := newRunning(t, newFakeClock())
	if _, err := a.Release(context.Background(), "nope"); !errors.Is(err, ErrUnknownRegistry) {
		t.Errorf("Release(unknown) = %v, want ErrUnknownRegistry", err)
	}
}

// TestInvalidDataIsNotAnOutage: with outage.policy expire, a registry whose
// backend answers with invalid data (a services file with a typo) stays
// Degraded and served past expireAfter; an unreachable one is withdrawn.
func TestInvalidDataIsNotAnOutage(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	o := reg("vms", "file", "vm")
	o.Outage = Outage{Policy: OutageExpire, ExpireAfter: time.Minute}
	a := newRunning(t, clock, o)
	replace(a, shard(o), []model.Service{svc("a.vm", ips(2)...)}, nil)
	waitVersion(t, a, 1)

	report(a, shard(o), status{State: Degraded, Err: "services.yaml:3:5: bad key", Invalid: true})
	advance(a, clock, 2*time.Minute)
	report(a, shard(o), status{State: Degraded, Err: "services.yaml:3:5: bad key", Invalid: true})
	advance(a, clock, 2*time.Minute)
	if st, _ := a.Registry("vms"); st.State != Degraded || st.Withdrawn || st.Endpoints != 2 {
		t.Errorf("invalid data past expireAfter: %+v, want Degraded and still served", st)
	}
	if n := len(addrs(a.Snapshot(), "a.vm")); n != 2 {
		t.Errorf("served %d endpoints, want 2", n)
	}

	// The file disappears: that is an outage, and expire withdraws.
	report(a, shard(o), status{State: Degraded, Err: "open services.yaml: no such file"})
	advance(a, clock, 2*time.Minute)
	waitState(t, a, "vms", Stale)
	eventually(t, "withdrawn", func() bool { return len(addrs(a.Snapshot(), "a.vm")) == 0 })
}

// TestReplaceStatusDegraded: a registry that publishes while part of its
// backend fails (one broken file of a directory) has its new state served
// and stays Degraded with the error: never Synced in between, and with
// Invalid never an outage.
func TestReplaceStatusDegraded(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	o := reg("vms", "file", "vm")
	o.Outage = Outage{Policy: OutageExpire, ExpireAfter: time.Minute}
	a := newRunning(t, clock, o)
	replace(a, shard(o), []model.Service{svc("a.vm", ips(1)...)}, nil)
	waitVersion(t, a, 1)
	bad := status{State: Degraded, Err: "b.yaml:3:5: bad key", Invalid: true}
	report(a, shard(o), bad)
	since := clock.Now()

	clock.Advance(time.Second)
	replaceStatus(a, shard(o), []model.Service{svc("a.vm", ips(3)...)}, nil, bad)
	st, _ := a.Registry("vms")
	if st.State != Degraded || st.LastError != bad.Err || st.Since != since || st.LastSync != clock.Now() {
		t.Errorf("after ReplaceStatus: %+v, want Degraded since the report, with its error, synced now", st)
	}
	eventually(t, "new state served", func() bool { return len(addrs(a.Snapshot(), "a.vm")) == 3 })
	advance(a, clock, 2*time.Minute)
	if st, _ := a.Registry("vms"); st.State != Degraded || st.Withdrawn {
		t.Errorf("invalid data past expireAfter: %+v, want Degraded and served", st)
	}

	replaceStatus(a, shard(o), []model.Service{svc("a.vm", ips(2)...)}, nil, status{State: Synced})
	if st, _ := a.Registry("vms"); st.State != Synced || st.LastError != "" {
		t.Errorf("after ReplaceStatus Synced: %+v, want Synced without error", st)
	}
}

// TestConfirmWithoutHoldIsNoNews: a state sent again only to confirm it
// (Update.Confirm) while nothing is held back changes nothing: no new
// input, no rebuild, and lastSync stays when the state was last synced
// (a file registry's first update re-sent 30 s after every start moved it).
func TestConfirmWithoutHoldIsNoNews(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	o := reg("confirm-no-hold", "file", "vm.internal")
	o.MaxDeleteRatio = 0.5
	a := newRunning(t, clock, o)
	state := []model.Service{svc("a.vm.internal", ips(2)...)}
	replace(a, shard(o), state, nil)
	waitVersion(t, a, 1)
	before, _ := a.Registry(o.Name)
	clock.Advance(30 * time.Second)
	u := registries.FullState(state, nil)
	u.Confirm = true
	a.Publish(shard(o), u)
	if in := a.inputOf(o.Name); in != nil {
		t.Errorf("a confirmation with nothing held became the next input")
	}
	st, _ := a.Registry(o.Name)
	if st.State != Synced || !st.LastSync.Equal(before.LastSync) || a.Snapshot().Version != 1 {
		t.Errorf("after a confirmation with nothing held: %+v (lastSync was %v), version %d; want Synced, lastSync unchanged, version 1",
			st, before.LastSync, a.Snapshot().Version)
	}
}

func TestHoldDownDisabledAndWithinRatio(t *testing.T) {
	t.Parallel()
	for _, ratio := range []float64{0, 0.8} {
		clock := newFakeClock()
		o := reg("r", "consul", "consul")
		o.MaxDeleteRatio = ratio
		a := newRunning(t, clock, o)
		replace(a, shard(o), []model.Service{svc("a.consul", ips(10)...)}, nil)
		waitVersion(t, a, 1)
		replace(a, shard(o), []model.Service{svc("a.consul", ips(3)...)}, nil)
		snap := waitVersion(t, a, 2)
		if n := len(addrs(snap, "a.consul")); n != 3 || len(a.Conflicts()) != 0 {
			t.Errorf("ratio %v: served %d endpoints, conflicts %v; want the drop applied at once", ratio, n, a.Conflicts())
		}
	}
}

func TestAddAndRemoveRegistry(t *testing.T) {
	t.Parallel()
	a := newRunning(t, newFakeClock())
	if ok, reason := a.Ready(); !ok || reason != "" {
		t.Errorf("no registries: Ready() = %v, %q; want true", ok, reason)
	}
	remote := reg("remote", "kubernetes", "svc.cluster.local")
	replace(a, shard(remote), []model.Service{svc("a.ns.svc.cluster.local", "10.0.0.1")}, nil) // unknown: ignored
	a.AddRegistry(remote)
	if _, ok := a.Registry("remote"); !ok {
		t.Fatalf("added registry not listed")
	}
	replace(a, shard(remote), []model.Service{svc("a.ns.svc.cluster.local", "10.0.0.1")}, nil)
	waitVersion(t, a, 1)
	replace(a, model.ShardKey{Kind: "consul", Name: "remote"}, nil, nil) // wrong kind: ignored

	// Changing the domain re-checks the state already received.
	moved := remote
	moved.Domain = "cluster.west"
	a.AddRegistry(moved)
	eventually(t, "service outside the new domain withdrawn", func() bool { return a.Snapshot().Len() == 0 })
	if !hasConflict(a.Conflicts(), CategoryDomain, "a.ns.svc.cluster.local") {
		t.Errorf("conflicts %v, want a domain rejection", a.Conflicts())
	}
	a.AddRegistry(remote)
	eventually(t, "served again", func() bool { return a.Snapshot().Len() == 1 })

	a.RemoveRegistry("remote")
	eventually(t, "removed", func() bool { return a.Snapshot().Len() == 0 })
	if _, ok := a.Registry("remote"); ok || len(a.Registries()) != 0 {
		t.Errorf("removed registry still listed")
	}
	eventually(t, "conflicts gone", func() bool { return len(a.Conflicts()) == 0 })
}

// TestRegistryAddedWhileReadyDoesNotUnready: a registry added at runtime
// (a remote cluster found by Secret) keeps Ready false only while the
// aggregator has never been ready; once it has, /readyz stays 200.
func TestRegistryAddedWhileReadyDoesNotUnready(t *testing.T) {
	t.Parallel()
	remote := reg("remote", "kubernetes", "svc.cluster.local")
	for _, tt := range []struct {
		name string
		// askReady: Ready() is called before the remote is added (else the
		// snapshot build alone latches readiness).
		askReady  bool
		syncFirst bool // the configured registry syncs before the remote is added
		wantReady bool
		wantWhy   string
	}{
		{name: "added after Ready was seen", askReady: true, syncFirst: true, wantReady: true,
			wantWhy: "added while ready, not synced yet: remote (Starting)"},
		{name: "added after a snapshot made it ready", syncFirst: true, wantReady: true,
			wantWhy: "added while ready, not synced yet: remote (Starting)"},
		{name: "added before ready", wantReady: false,
			wantWhy: "waiting for the first sync of local (Starting), remote (Starting)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			local := reg("local", "file", "vm")
			a := newRunning(t, newFakeClock(), local)
			if tt.syncFirst {
				replace(a, shard(local), []model.Service{svc("a.vm", "10.0.0.1")}, nil)
				eventually(t, "local applied", func() bool { st, _ := a.Registry("local"); return st.Services == 1 })
			}
			if tt.askReady {
				if ok, _ := a.Ready(); !ok {
					t.Fatal("not ready after the only registry synced")
				}
			}
			a.AddRegistry(remote)
			ok, why := a.Ready()
			if ok != tt.wantReady || why != tt.wantWhy {
				t.Errorf("Ready() = %v, %q; want %v, %q", ok, why, tt.wantReady, tt.wantWhy)
			}
			// Once the remote syncs it is reflected like any other registry.
			replace(a, shard(local), []model.Service{svc("a.vm", "10.0.0.1")}, nil)
			replace(a, shard(remote), []model.Service{svc("b.ns.svc.cluster.local", "10.0.0.2")}, nil)
			eventually(t, "ready with no reason", func() bool { ok, why := a.Ready(); return ok && why == "" })
		})
	}
}

func TestJSON(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	a := New(Options{Registries: []RegistryOptions{reg("b", "file", "b"), reg("a", "consul", "a")}, Now: clock.Now})
	report(a, model.ShardKey{Kind: "file", Name: "b"}, status{State: Degraded, Err: "no such file"})
	out, err := json.Marshal(a.Registries())
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"name":"a","kind":"consul","domain":"a","state":"Starting","since":"2025-01-01T00:00:00Z","services":0,"endpoints":0},` +
		`{"name":"b","kind":"file","domain":"b","state":"Degraded","since":"2025-01-01T00:00:00Z","lastError":"no such file","services":0,"endpoints":0}]`
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("registries JSON (-want +got):\n%s", diff)
	}
	c := newConflict(CategoryDomain, "vms", "a.consul", "a.consul", "outside")
	c.Since = clock.Now()
	out, err = json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"registry":"vms","host":"a.consul","subject":"a.consul","reason":"outside","category":"domain","since":"2025-01-01T00:00:00Z"}`; string(out) != want {
		t.Errorf("conflict JSON = %s, want %s", out, want)
	}
}

func TestServeOnce(t *testing.T) {
	t.Parallel()
	a := New(Options{})
	if a.Snapshot() == nil || a.Snapshot().Version != 0 || a.Snapshot().Len() != 0 {
		t.Fatalf("initial snapshot %+v, want empty version 0", a.Snapshot())
	}
	start(t, a)
	eventually(t, "Serve running", a.serving.Load)
	if err := a.Serve(context.Background()); err == nil {
		t.Errorf("a second concurrent Serve returned nil")
	}
}

// A subscriber that panics takes Serve down (its supervisor restarts it);
// the restarted Serve delivers the snapshot again.
func TestRestartedServeRedelivers(t *testing.T) {
	t.Parallel()
	o := reg("vms", "file", "vm")
	a := New(Options{Registries: []RegistryOptions{o}})
	var mu sync.Mutex
	var got []uint64
	delivered := func() []uint64 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
	a.Subscribe(func(s *model.Snapshot) {
		mu.Lock()
		got = append(got, s.Version)
		n := len(got)
		mu.Unlock()
		if n == 1 {
			panic("subscriber failed")
		}
	})
	replace(a, shard(o), []model.Service{svc("a.vm", "10.0.0.1")}, nil)
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		_ = a.Serve(context.Background())
	}()
	if p := <-panicked; p != "subscriber failed" {
		t.Fatalf("Serve recovered %v, want the subscriber's panic", p)
	}
	start(t, a)
	eventually(t, "redelivery", func() bool { return len(delivered()) == 2 })
	if diff := cmp.Diff([]uint64{1, 1}, delivered()); diff != "" {
		t.Errorf("delivered versions (-want +got):\n%s", diff)
	}
}

// TestRestore: a restored state is served at once, marked Restored, makes
// the aggregator Ready and is not handed back to OnAccepted; the
// registry's own first Replace supersedes it (and is handed over).
func TestRestore(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	o := reg("dc1", "consul", "consul")
	accepted := make(chan []model.Service, 10)
	a := New(Options{Registries: []RegistryOptions{o}, Now: clock.Now,
		OnAccepted: func(_ model.ShardKey, acc Accepted) { accepted <- acc.Services }})
	if !a.Restore(shard(o), []model.Service{svc("a.consul", ips(4)...)}, nil) {
		t.Fatal("Restore before the first sync = false")
	}
	start(t, a)
	waitVersion(t, a, 1)
	st, _ := a.Registry("dc1")
	if !st.Restored || st.State != Starting || st.Endpoints != 4 {
		t.Errorf("restored: %+v, want Starting, Restored, 4 endpoints", st)
	}
	if ok, _ := a.Ready(); !ok {
		t.Error("Ready() = false with a restored state")
	}
	replace(a, shard(o), []model.Service{svc("a.consul", ips(3)...)}, nil)
	eventually(t, "own state served", func() bool { return len(addrs(a.Snapshot(), "a.consul")) == 3 })
	if st, _ := a.Registry("dc1"); st.Restored || st.State != Synced {
		t.Errorf("after the first sync: %+v, want Synced, not Restored", st)
	}
	if got := <-accepted; len(got) != 1 || len(got[0].Endpoints) != 3 {
		t.Errorf("OnAccepted got %v, want the registry's own state", got)
	}
	if len(accepted) != 0 {
		t.Errorf("OnAccepted called %d more times; the restored state must not be saved again", len(accepted))
	}
	if a.Restore(shard(o), nil, nil) {
		t.Error("Restore after the first sync = true")
	}
}

// Snapshot.Restored names the registries served from a restored state;
// a registry whose own first state equals the restored one still gets a
// snapshot published, without it (the xDS server's restore hold ends on it).
func TestSnapshotNamesRestoredRegistries(t *testing.T) {
	t.Parallel()
	o, p := reg("dc1", "consul", "consul"), reg("dc2", "consul", "consul2")
	a := New(Options{Registries: []RegistryOptions{o, p}, Now: newFakeClock().Now})
	a.Restore(shard(o), []model.Service{svc("a.consul", ips(2)...)}, nil)
	a.Restore(shard(p), []model.Service{svc("b.consul2", ips(1)...)}, nil)
	start(t, a)
	s1 := waitVersion(t, a, 1)
	if !slices.Equal(s1.Restored, []string{"dc1", "dc2"}) {
		t.Fatalf("Restored = %v, want [dc1 dc2]", s1.Restored)
	}
	replace(a, shard(o), []model.Service{svc("a.consul", ips(2)...)}, nil) // equal to the restored state
	s2 := waitVersion(t, a, 2)
	if !slices.Equal(s2.Restored, []string{"dc2"}) || s2.Len() != 2 {
		t.Fatalf("after dc1 synced the same state: Restored = %v, %d services; want [dc2], 2", s2.Restored, s2.Len())
	}
	replace(a, shard(p), []model.Service{svc("b.consul2", ips(3)...)}, nil)
	s3 := waitVersion(t, a, 3)
	if s3.Restored != nil {
		t.Fatalf("after every registry synced: Restored = %v, want nil", s3.Restored)
	}
}

func TestConfigFlowsWithSnapshot(t *testing.T) {
	t.Parallel()
	x := reg("x", "file", "x")
	a := newRunning(t, newFakeClock(), x)
	replace(a, shard(x), []model.Service{svc("a.x", "10.0.0.1")}, nil)
	s1 := waitVersion(t, a, 1)

	// A config change alone publishes a snapshot with the same services.
	cfg := model.NewConfigSnapshot(1, []*model.ConfigObject{{Kind: "VirtualService", Namespace: "d", Name: "a"}})
	a.SetConfig(cfg)
	s2 := waitVersion(t, a, s1.Version+1)
	if s2.Config != cfg {
		t.Fatalf("snapshot config = %v, want the one set", s2.Config)
	}
	old, _ := s1.Service("a.x")
	if cur, _ := s2.Service("a.x"); cur != old {
		t.Error("a config change rebuilt an unchanged service")
	}
	// A registry change keeps the config.
	replace(a, shard(x), []model.Service{svc("a.x", "10.0.0.2")}, nil)
	s3 := waitVersion(t, a, s2.Version+1)
	if s3.Config != cfg {
		t.Error("a registry change dropped the config")
	}
	// Setting the same config again publishes nothing.
	a.SetConfig(cfg)
	replace(a, shard(x), []model.Service{svc("a.x", "10.0.0.2")}, nil)
	a.wake()
	time.Sleep(50 * time.Millisecond) // nothing to wait for: assert no publish happened meanwhile
	if v := a.Snapshot().Version; v != s3.Version {
		t.Errorf("version %d after an unchanged config, want %d", v, s3.Version)
	}
}

// TestNoAcceptAfterRemoveRegistry: once RemoveRegistry returns, OnAccepted
// is neither running nor called for that registry, so that the warm-start
// store's removal of the registry's state cannot be overwritten by an
// accept that was in flight.
func TestNoAcceptAfterRemoveRegistry(t *testing.T) {
	t.Parallel()
	o := reg("dc1", "consul", "consul")
	entered, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var events []string
	record := func(e string) { mu.Lock(); events = append(events, e); mu.Unlock() }
	var once sync.Once
	a := New(Options{Registries: []RegistryOptions{o}, OnAccepted: func(model.ShardKey, Accepted) {
		once.Do(func() {
			close(entered)
			<-release
			record("accept returned")
		})
	}})
	start(t, a)
	replace(a, shard(o), []model.Service{svc("a.consul", ips(2)...)}, nil)
	<-entered
	removed := make(chan struct{})
	go func() { a.RemoveRegistry("dc1"); record("removed"); close(removed) }()
	select {
	case <-removed: // the bug: RemoveRegistry returned while the accept runs
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	<-removed
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"accept returned", "removed"}; !slices.Equal(events, want) {
		t.Errorf("events %v, want %v", events, want)
	}
}

// TestHoldsFirst: a shard is served once a state was received or
// restored, so a registry's partial first state after a restart would be
// held back; on a fresh shard it would not, nor would a complete one.
func TestHoldsFirst(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	o, r := reg("fresh", "file", "fresh"), reg("restored", "file", "restored")
	a := newRunning(t, clock, o, r)
	part := registries.Update{HasState: true, Services: []model.Service{}, Condition: registries.Condition{Err: "b.yaml: bad"}}
	if a.HoldsFirst(shard(o), part) || a.HoldsFirst(shard(r), part) {
		t.Fatal("a shard that received nothing is served")
	}
	if !a.Restore(shard(r), []model.Service{svc("a.restored", ips(1)...)}, nil) {
		t.Fatal("Restore refused")
	}
	if !a.HoldsFirst(shard(r), part) {
		t.Error("a restored shard is not served")
	}
	if a.HoldsFirst(shard(r), registries.FullState([]model.Service{}, nil)) {
		t.Error("a complete first state would be held")
	}
	replace(a, shard(o), []model.Service{svc("a.fresh", ips(1)...)}, nil)
	if !a.HoldsFirst(shard(o), part) {
		t.Error("a shard that received a state is not served")
	}
	unknown := model.ShardKey{Name: "unknown", Kind: "file"}
	if a.HoldsFirst(unknown, part) || a.HoldsFirst(model.ShardKey{Name: "fresh", Kind: "consul"}, part) {
		t.Error("an unknown shard is served")
	}
	// Asking is not an update: it is not recorded (nor logged) as one from
	// an unknown registry.
	a.mu.Lock()
	recorded := a.unknown[unknown]
	a.mu.Unlock()
	if recorded {
		t.Error("HoldsFirst recorded an update from an unknown registry")
	}
}

// TestPartialFirstStateHeld (formerly the Publisher's): a partial first
// state of a Run is not applied while a state of the shard is served
// (restored after a restart): the registry is Degraded saying the update
// is held, with one warning; the first complete state is applied. A
// partial state once a state of the Run was applied is applied; a Run's
// end starts holding again.
// TestPartialFirstStateHeldWhileTaken: a restored state the Serve loop has
// taken but not yet written back is still served: a partial first state
// arriving in between is held, not applied (it used to slip through that
// window under load and drop the restored services it could not read).
func TestPartialFirstStateHeldWhileTaken(t *testing.T) {
	t.Parallel()
	o := reg("restored", "file", "restored")
	a := New(Options{Registries: []RegistryOptions{o}})
	if !a.Restore(shard(o), []model.Service{svc("a.restored", ips(2)...)}, nil) {
		t.Fatal("Restore refused")
	}
	a.mu.Lock()
	if in, _, _ := a.regs["restored"].take(); in == nil || !in.restored {
		t.Fatalf("took %+v, want the restored state", in)
	}
	a.mu.Unlock()
	part := registries.Update{HasState: true, Services: []model.Service{svc("a.restored", ips(1)...)},
		Condition: registries.Condition{Err: "b.yaml: no such file"}}
	a.Publish(shard(o), part)
	if st, _ := a.Registry("restored"); st.LastError != HeldPrefix+part.Err || !st.LastSync.IsZero() || a.inputOf("restored") != nil {
		t.Fatalf("a partial first state was applied while the restored one was in flight: %+v", st)
	}
}

func TestPartialFirstStateHeld(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	o := reg("restored", "file", "restored")
	var logs logbuf.Buffer
	a := New(Options{Registries: []RegistryOptions{o}, Now: clock.Now, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if !a.Restore(shard(o), []model.Service{svc("a.restored", ips(2)...)}, nil) {
		t.Fatal("Restore refused")
	}
	restored := a.inputOf("restored")
	part := registries.Update{HasState: true, Services: []model.Service{svc("a.restored", ips(1)...)},
		Condition: registries.Condition{Err: "cluster east: connection refused"}}
	for range 2 {
		a.Publish(shard(o), part)
	}
	report(a, shard(o), status{State: Degraded, Err: "cluster east: connection refused"})
	held := HeldPrefix + "cluster east: connection refused"
	if st, _ := a.Registry("restored"); st.State != Degraded || st.LastError != held || !st.LastSync.IsZero() || a.inputOf("restored") != restored {
		t.Fatalf("want Degraded saying the update is held, and nothing applied: %+v", st)
	}
	if n := strings.Count(logs.String(), `msg="first update held`); n != 1 {
		t.Errorf("held warning logged %d times, want once:\n%s", n, logs.String())
	}
	full := registries.FullState([]model.Service{svc("a.restored", ips(1)...)}, nil)
	a.Publish(shard(o), full)
	if st, _ := a.Registry("restored"); st.State != Synced || st.LastError != "" || a.inputOf("restored") == restored || a.inputOf("restored").restored {
		t.Fatalf("after the first complete state: %+v", st)
	}
	a.Publish(shard(o), part)
	if st, _ := a.Registry("restored"); st.State != Degraded || st.LastError != part.Err || len(a.inputOf("restored").services[0].Endpoints) != 1 {
		t.Fatalf("a partial state after the Run's first was not applied: %+v", st)
	}
	// The Run ends; the next Run's partial first state is held again.
	a.Publish(shard(o), registries.Update{Condition: registries.Condition{Err: "boom"}, Ended: true})
	before := a.inputOf("restored")
	a.Publish(shard(o), part)
	if st, _ := a.Registry("restored"); st.LastError != held || a.inputOf("restored") != before {
		t.Fatalf("a new Run's partial first state was applied: %+v", st)
	}
	if n := strings.Count(logs.String(), `msg="first update held`); n != 2 {
		t.Errorf("held warning logged %d times over two Runs, want twice", n)
	}
}

// TestPartialFirstStateAppliedWhenNothingServed: with nothing served yet
// (a fresh start), a partial first state is applied (one bad file must
// not keep the good ones from being served), Degraded in the same step.
func TestPartialFirstStateAppliedWhenNothingServed(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	o := reg("fresh", "file", "fresh")
	a := New(Options{Registries: []RegistryOptions{o}, Now: clock.Now})
	down := registries.Condition{Err: "b.yaml:3:1: bad key", Invalid: true}
	a.Publish(shard(o), registries.Update{HasState: true, Services: []model.Service{svc("a.fresh", ips(1)...)}, Condition: down})
	if st, _ := a.Registry("fresh"); st.State != Degraded || st.LastError != down.Err || st.LastSync.IsZero() || a.inputOf("fresh") == nil {
		t.Fatalf("want a.fresh applied with the Degraded status: %+v", st)
	}
}

// TestSwapWithUnchangedStateAppliesNewOptions: a reload that changes only a
// registry's options (its default locality) swaps in a new instance whose
// first state equals the old one's; the endpoints must be normalized again
// under the new options, not taken from what the old options made of the
// same input (found by test/chaos: kube endpoints kept a reload's locality
// after the next reload removed it).
func TestSwapWithUnchangedStateAppliesNewOptions(t *testing.T) {
	t.Parallel()
	east := reg("east", "kubernetes", "svc.cluster.local")
	east.Locality = model.Locality{Region: "edited"}
	a := newRunning(t, newFakeClock(), east)
	host := "orders.shop.svc.cluster.local"
	state := []model.Service{svc(host, "10.0.0.1")}
	replace(a, shard(east), state, nil)
	locality := func() string {
		s, ok := a.Snapshot().Service(host)
		if !ok || len(s.Endpoints) != 1 {
			return "-"
		}
		return s.Endpoints[0].Locality.Region
	}
	eventually(t, "the edited locality served", func() bool { return locality() == "edited" })

	plain := east
	plain.Locality = model.Locality{}
	a.Swap(plain, registries.Update{HasState: true, Services: state, Complete: true})
	eventually(t, "the locality of the new options served", func() bool { return locality() == "" })
}

// TestSwapDoesNotConfirmTheOldInstancesHold: a reload that swaps in a new
// instance while the backend restarts (chaos seed 25, reload-backend-down):
// the old instance's drop is held down, then the new instance's first
// state, read from the same restarting backend at about the same moment,
// drops as much again. That is not a second sighting that confirms the
// hold: the old state stays served, held, until the new instance's own
// next state (or HoldDown) says so.
func TestSwapDoesNotConfirmTheOldInstancesHold(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	o := reg("swap-hold", "consul", "consul")
	o.MaxDeleteRatio = 0.5
	a := New(Options{Registries: []RegistryOptions{o}, Now: clock.Now, HoldDown: time.Minute})
	start(t, a)
	replace(a, shard(o), []model.Service{svc("a.consul", ips(10)...), svc("b.consul", ips(6)...)}, nil)
	waitVersion(t, a, 1)

	// The old instance reads the restarting agent: its catalog lacks everything.
	replace(a, shard(o), nil, nil)
	eventually(t, "hold-down listed", func() bool { return hasConflict(a.Conflicts(), CategoryHoldDown, "") })
	since := clock.Now()

	// The reload swaps the new instance in; its first state is as empty.
	clock.Advance(300 * time.Millisecond)
	edited := o
	edited.Locality = model.Locality{Region: "edited"}
	a.Swap(edited, registries.Update{Condition: registries.Condition{Err: "connection refused"}},
		registries.Update{Ended: true, Condition: registries.Condition{Err: "connection refused"}},
		registries.FullState(nil, nil))
	eventually(t, "the new options applied", func() bool {
		s, ok := a.Snapshot().Service("a.consul")
		return ok && len(s.Endpoints) > 0 && s.Endpoints[0].Locality.Region == "edited"
	})
	if n, m := len(addrs(a.Snapshot(), "a.consul")), len(addrs(a.Snapshot(), "b.consul")); n != 10 || m != 6 {
		t.Fatalf("served %d and %d endpoints after the swap, want the held-back 10 and 6", n, m)
	}
	st, _ := a.Registry(o.Name)
	if st.Hold == nil || st.Endpoints != 16 || !st.Hold.Since.Equal(since) {
		t.Fatalf("status %+v, want the hold kept since %v and 16 endpoints served", st, since)
	}

	// The new instance's next state is the backend restored: the hold clears.
	replace(a, shard(o), []model.Service{svc("a.consul", ips(10)...), svc("b.consul", ips(6)...)}, nil)
	eventually(t, "hold-down cleared", func() bool { return len(a.Conflicts()) == 0 })
	if n := len(addrs(a.Snapshot(), "a.consul")); n != 10 {
		t.Errorf("served %d endpoints, want 10", n)
	}
}
