package istioconfig

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	networking "istio.io/api/networking/v1alpha3"
)

// fakeFeed is a Feed whose parts the test sets.
type fakeFeed struct {
	mu    sync.Mutex
	parts []FeedPart
	name  string // "k8s" when empty
}

// Name is "k8s" unless the test named the feed: a test that reads the
// source gauges gives its feed a name of its own, since the gauges are
// shared by the package's parallel tests.
func (f *fakeFeed) Name() string {
	if f.name == "" {
		return "k8s"
	}
	return f.name
}

func (f *fakeFeed) Run(ctx context.Context, _ func()) error { <-ctx.Done(); return ctx.Err() }

func (f *fakeFeed) Parts() []FeedPart {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.parts)
}

func (f *fakeFeed) set(parts ...FeedPart) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.parts = parts
}

func feedVS(cluster, name string, weights ...int32) FeedObject {
	vs := &networking.VirtualService{Hosts: []string{name + ".shop.svc.cluster.local"}, Http: []*networking.HTTPRoute{{}}}
	for i, w := range weights {
		vs.Http[0].Route = append(vs.Http[0].Route, &networking.HTTPRouteDestination{
			Destination: &networking.Destination{Host: name + ".shop.svc.cluster.local", Subset: "v" + string(rune('1'+i))}, Weight: w})
	}
	return FeedObject{Kind: KindVirtualService, Namespace: "shop", Name: name, Source: "shop/" + name + " (" + cluster + ")", Spec: vs}
}

func TestFeedGate(t *testing.T) {
	t.Parallel()
	f := &fakeFeed{name: "gate"}
	f.set(FeedPart{Name: "east"}, FeedPart{Name: "west", Failed: true, Err: "kubeconfig: no such file"})
	s := New(nil, nil, f)
	s.Reload()
	if ok, why := s.Ready(); ok || !strings.Contains(why, "config source gate cluster east") || strings.Contains(why, "west") {
		t.Errorf("Ready() = %v, %q; want waiting for east only", ok, why)
	}
	st := s.Status()
	if want := []SourceState{{Name: "gate", Kind: "kubernetes", Cluster: "east", State: StateStarting},
		{Name: "gate", Kind: "kubernetes", Cluster: "west", State: StateFailed, Error: "kubeconfig: no such file"}}; !slices.Equal(st.Sources, want) {
		t.Errorf("sources = %+v, want %+v", st.Sources, want)
	}

	if got := testutil.ToFloat64(sourceState.WithLabelValues("gate", "west", StateFailed)); got != 1 {
		t.Errorf(`meshfed_config_source_state{source="gate",cluster="west",state="Failed"} = %v, want 1`, got)
	}

	// Synced: objects come into force; the same object in two clusters
	// is one, a differing one is rejected; an invalid one alone.
	bad := feedVS("east", "bad", 1, 1)
	bad.Spec.(*networking.VirtualService).Http[0].Route[0].Weight = -1
	f.set(FeedPart{Name: "east", Synced: true, Objects: []FeedObject{feedVS("east", "orders", 90, 10), feedVS("east", "cart", 1), bad}},
		FeedPart{Name: "west", Synced: true, Objects: []FeedObject{feedVS("west", "orders", 90, 10), feedVS("west", "cart", 2)}})
	if !s.Reload() {
		t.Fatal("synced feed changed nothing")
	}
	if ok, _ := s.Ready(); !ok {
		t.Error("not ready once every part synced")
	}
	st = s.Status()
	if got, want := keys(st), []string{"VirtualService/shop/cart", "VirtualService/shop/orders"}; !slices.Equal(got, want) {
		t.Fatalf("in force = %v, want %v", got, want)
	}
	if st.InForce[1].Source != "shop/orders (east)" {
		t.Errorf("orders source = %q", st.InForce[1].Source)
	}
	var reasons []string
	for _, r := range st.Rejected {
		reasons = append(reasons, r.Source+": "+r.Reason)
	}
	if want := []string{"shop/bad (east): spec.http[0].route[0].weight -1: must not be negative",
		"shop/cart (west): VirtualService shop/cart is already defined at shop/cart (east)"}; !slices.Equal(reasons, want) {
		t.Errorf("rejected = %q, want %q", reasons, want)
	}

	// East becomes unreadable again (not synced, e.g. a new connection):
	// its objects stay; west's go on.
	before := s.Snapshot()
	f.set(FeedPart{Name: "east", Err: "connection refused"}, FeedPart{Name: "west", Synced: true, Objects: []FeedObject{feedVS("west", "orders", 90, 10)}})
	if s.Reload() {
		t.Error("a part that is not synced changed what is in force")
	}
	if s.Snapshot() != before {
		t.Error("snapshot replaced")
	}
	// East is read again without orders: orders stays from west.
	f.set(FeedPart{Name: "east", Synced: true}, FeedPart{Name: "west", Synced: true, Objects: []FeedObject{feedVS("west", "orders", 90, 10)}})
	s.Reload()
	st = s.Status()
	if got := keys(st); !slices.Equal(got, []string{"VirtualService/shop/orders"}) || st.InForce[0].Source != "shop/orders (west)" {
		t.Errorf("in force = %v from %q, want orders from west", got, st.InForce[0].Source)
	}
}

// TestFeedConflictOldestWins: two VirtualServices of one host, neither in
// force: the older one wins, as in Istio; once in force it stays.
func TestFeedConflictOldestWins(t *testing.T) {
	t.Parallel()
	older, newer := feedVS("east", "orders", 1), feedVS("east", "orders", 1)
	older.Name, older.Source = "z-old", "shop/z-old (east)"
	newer.Name, newer.Source = "a-new", "shop/a-new (east)"
	older.Created = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	newer.Created = older.Created.Add(time.Hour)
	f := &fakeFeed{}
	f.set(FeedPart{Name: "east", Synced: true, Objects: []FeedObject{newer, older}})
	s := New(nil, nil, f)
	s.Reload()
	st := s.Status()
	if got := keys(st); !slices.Equal(got, []string{"VirtualService/shop/z-old"}) {
		t.Fatalf("in force = %v, want the older z-old", got)
	}
	if len(st.Rejected) != 1 || st.Rejected[0].Name != "a-new" || !strings.Contains(st.Rejected[0].Reason, "already has VirtualService shop/z-old") {
		t.Errorf("rejected = %+v", st.Rejected)
	}
}

// TestFeedDestinationRuleMergeByAge: DestinationRules of one host from a
// cluster merge by creationTimestamp, not by name: the older rule's
// subset and policy win.
func TestFeedDestinationRuleMergeByAge(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	dr := func(name string, created time.Time, lb networking.LoadBalancerSettings_SimpleLB, version string) FeedObject {
		return FeedObject{Kind: KindDestinationRule, Namespace: "shop", Name: name, Source: "shop/" + name + " (east)", Created: created,
			Spec: &networking.DestinationRule{Host: "orders.vm.internal",
				TrafficPolicy: &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: lb}}},
				Subsets:       []*networking.Subset{{Name: "v1", Labels: map[string]string{"version": version}}}}}
	}
	f := &fakeFeed{}
	f.set(FeedPart{Name: "east", Synced: true, Objects: []FeedObject{
		dr("a-new", t0.Add(time.Hour), networking.LoadBalancerSettings_RANDOM, "new"),
		dr("z-old", t0, networking.LoadBalancerSettings_LEAST_REQUEST, "old"),
	}})
	s := New(nil, nil, f)
	s.Reload()
	st := s.Status()
	if len(st.InForce) != 2 || len(st.Rejected) != 0 {
		t.Fatalf("in force %v, rejected %+v", keys(st), st.Rejected)
	}
	if len(st.Merged) != 1 || st.Merged[0].Policy != "shop/z-old" || !slices.Equal(st.Merged[0].Objects, []string{"shop/z-old", "shop/a-new"}) ||
		len(st.Merged[0].DroppedSubsets) != 1 || st.Merged[0].DroppedSubsets[0].Object != "shop/a-new" {
		t.Errorf("merged = %+v", st.Merged)
	}
	for _, o := range s.Snapshot().Objects() {
		if o.Name == "z-old" && !o.Created.Equal(t0) {
			t.Errorf("z-old created = %v, want %v", o.Created, t0)
		}
	}
}
