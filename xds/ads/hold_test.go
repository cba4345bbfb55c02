package ads

import (
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

var cdsKind = Kind{Class: ClassEnvoy, TypeURL: ClusterType}

// holdADS is a test stream of a server whose gate holds for bound, with
// the restored state applied (as xds.Server.Update does: store, then
// SetRestored).
func holdADS(t *testing.T, s *store, delta bool, bound time.Duration) *testADS {
	x := newTestADS(t, s, delta)
	x.a.gate.bound = bound
	x.a.gate.setRestored([]string{"reg"})
	t.Cleanup(func() { x.a.gate.release("test ended") })
	return x
}

// sotwNames is the sorted names of the one SotW response sent since the
// last call; ok is false when none was.
func (x *testADS) sotwNames() (names []string, ok bool) {
	x.t.Helper()
	x.woken()
	switch len(x.sotw) {
	case 0:
		return nil, false
	case 1:
	default:
		x.t.Fatalf("%d responses, want at most 1", len(x.sotw))
	}
	r := x.sotw[0]
	x.sotw = nil
	for _, a := range r.GetResources() {
		n, _ := decode(x.t, a)
		names = append(names, n)
	}
	slices.Sort(names)
	return names, true
}

// A SotW client that reconnects holding CDS (version_info set) while the
// state is restored is sent nothing: a full-state CDS response of the
// older restored state would remove the clusters it holds. A new client
// gets the restored state at once. When the registry's own state
// supersedes the restored one, the held client gets the current state.
// Not parallel: it reads the hold gauge.
func TestRestoreHoldSotw(t *testing.T) {
	s := newTestStore()
	applyTo(s, cdsKind, clusters("a")) // restored: a (b was registered while the disk was full)
	before := testutil.ToFloat64(restoreHeld)
	old := holdADS(t, s, false, time.Hour)
	old.sotwReq(&discovery.DiscoveryRequest{Node: &core.Node{Id: "old"}, TypeUrl: ClusterType, VersionInfo: "41"})
	if names, ok := old.sotwNames(); ok {
		t.Fatalf("reconnecting client sent %v while the state is restored; want nothing (it holds a and b)", names)
	}
	if got := testutil.ToFloat64(restoreHeld) - before; got != 1 {
		t.Errorf("held gauge rose by %v, want 1", got)
	}
	if p := old.a.tracker.snapshot(s.count); len(p) != 1 || !p[0].Types[0].HeldRestored {
		t.Errorf("status %+v: want the type shown held", p)
	}

	fresh := newTestADS(t, s, false)
	fresh.a = old.a // the same server
	fresh.st = old.a.open(false)
	fresh.sotwReq(&discovery.DiscoveryRequest{Node: &core.Node{Id: "new"}, TypeUrl: ClusterType})
	if names, ok := fresh.sotwNames(); !ok || !slices.Equal(names, []string{"a"}) {
		t.Fatalf("new client got %v (sent %v), want the restored [a] at once", names, ok)
	}

	// A change while held is not sent either.
	applyTo(s, cdsKind, clusters("c"))
	if names, ok := old.sotwNames(); ok {
		t.Fatalf("held client sent %v on a change", names)
	}
	// The registry syncs: its own state a, b, c, no longer restored.
	applyTo(s, cdsKind, clusters("b"))
	old.a.gate.setRestored(nil)
	if names, ok := old.sotwNames(); !ok || !slices.Equal(names, []string{"a", "b", "c"}) {
		t.Fatalf("released client got %v (sent %v), want the full current state [a b c]", names, ok)
	}
	if got := testutil.ToFloat64(restoreHeld) - before; got != 0 {
		t.Errorf("held gauge %v above its start after the release", got)
	}
	for _, p := range old.a.tracker.snapshot(s.count) {
		if p.ID == "old" && p.Types[0].HeldRestored {
			t.Errorf("status %+v: still held after the release", p)
		}
	}
}

// A delta client that reconnects with initial_resource_versions is held
// while the state is restored; one with none is served at once. After the
// release the held client is sent what differs and the removals the
// current state calls for, and nothing during the hold.
func TestRestoreHoldDelta(t *testing.T) {
	s := newTestStore()
	applyTo(s, edsKind, map[string]types.Resource{"a": cla("a", 1)}) // restored
	x := holdADS(t, s, true, time.Hour)
	// It holds a (same as restored), b (registered later) and gone (removed later).
	x.deltaReq(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "old"},
		InitialResourceVersions: map[string]string{"a": "va", "b": "vb", "gone": "vg"}})
	if names, removed, _, ok := x.takeDelta(); ok {
		t.Fatalf("held delta client sent %v, removed %v", names, removed)
	}
	fresh := newTestADS(t, s, true)
	fresh.a = x.a
	fresh.st = x.a.open(true)
	fresh.deltaReq(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "new"}})
	if names, _, _, ok := fresh.takeDelta(); !ok || !slices.Equal(names, []string{"a"}) {
		t.Fatalf("new delta client got %v (sent %v), want [a] at once", names, ok)
	}
	applyTo(s, edsKind, map[string]types.Resource{"b": cla("b", 2)})
	x.a.gate.setRestored(nil)
	names, removed, _, ok := x.takeDelta()
	if !ok || !slices.Equal(names, []string{"a", "b"}) || !slices.Equal(removed, []string{"gone"}) {
		t.Fatalf("released delta client got %v removed %v (sent %v), want [a b] removed [gone]", names, removed, ok)
	}
}

// With a registry that never syncs, the hold ends at the bound and the
// held client is sent the restored state.
func TestRestoreHoldReleasedAtBound(t *testing.T) {
	s := newTestStore()
	applyTo(s, cdsKind, clusters("a"))
	x := holdADS(t, s, false, 50*time.Millisecond)
	x.sotwReq(&discovery.DiscoveryRequest{Node: &core.Node{Id: "old"}, TypeUrl: ClusterType, VersionInfo: "9"})
	if len(x.sotw) != 0 {
		t.Fatalf("held client sent %d responses", len(x.sotw))
	}
	select {
	case <-x.st.w.wake:
		x.st.w.wake <- struct{}{} // for woken
	case <-time.After(10 * time.Second):
		t.Fatal("not woken within 10s of a 50ms bound")
	}
	if names, ok := x.sotwNames(); !ok || !slices.Equal(names, []string{"a"}) {
		t.Fatalf("after the bound got %v (sent %v), want the restored [a]", names, ok)
	}
	if r := x.a.gate.reason(); r == "" {
		t.Error("no release reason recorded")
	}
}

// Without a restored state, or after the release, a reconnecting client
// is never held; a stream that ends while held leaves the gauge.
func TestRestoreHoldOnlyWhileRestored(t *testing.T) {
	s := newTestStore()
	applyTo(s, cdsKind, clusters("a"))
	x := newTestADS(t, s, false)
	x.a.gate.bound = time.Hour
	x.sotwReq(&discovery.DiscoveryRequest{Node: &core.Node{Id: "n"}, TypeUrl: ClusterType, VersionInfo: "3"})
	if names, ok := x.sotwNames(); !ok || !slices.Equal(names, []string{"a"}) {
		t.Fatalf("not restored: got %v (sent %v), want [a]", names, ok)
	}

	before := testutil.ToFloat64(restoreHeld)
	y := holdADS(t, s, false, time.Hour)
	y.sotwReq(&discovery.DiscoveryRequest{Node: &core.Node{Id: "n"}, TypeUrl: ClusterType, VersionInfo: "3"})
	if got := testutil.ToFloat64(restoreHeld) - before; got != 1 {
		t.Fatalf("held gauge rose by %v, want 1", got)
	}
	y.a.close(y.st)
	if got := testutil.ToFloat64(restoreHeld) - before; got != 0 {
		t.Errorf("held gauge %v above its start after the held stream ended", got)
	}
	y.a.gate.setRestored(nil)
	y.a.gate.setRestored([]string{"late"}) // a registry restored later does not arm it again
	z := newTestADS(t, s, false)
	z.a = y.a
	z.st = y.a.open(false)
	z.sotwReq(&discovery.DiscoveryRequest{Node: &core.Node{Id: "m"}, TypeUrl: ClusterType, VersionInfo: "3"})
	if names, ok := z.sotwNames(); !ok || !slices.Equal(names, []string{"a"}) {
		t.Fatalf("after the release: got %v (sent %v), want [a]", names, ok)
	}
}
