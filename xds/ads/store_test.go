package ads

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/genproto/googleapis/rpc/status"
)

// cla is a ClusterLoadAssignment whose content depends on v.
func cla(name string, v int) *endpoint.ClusterLoadAssignment {
	return &endpoint.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpoint.LocalityLbEndpoints{{Priority: uint32(v)}}}
}

var edsKind = Kind{TypeURL: EndpointType}

// testADS is an ads without gRPC: requests go straight to the handlers
// and responses are collected.
type testADS struct {
	t  *testing.T
	a  *ads
	st *stream

	delta []*discovery.DeltaDiscoveryResponse
	sotw  []*discovery.DiscoveryResponse
}

func newTestADS(t *testing.T, s *store, delta bool) *testADS {
	a := &ads{ctx: context.Background(), store: s, tracker: newTracker(slog.New(slog.DiscardHandler), nil), errorf: func(string, ...any) {},
		limits: Limits{}.withDefaults(), classify: testClassify}
	return &testADS{t: t, a: a, st: a.open(delta)}
}

func (x *testADS) sendDelta(r *discovery.DeltaDiscoveryResponse) error {
	x.delta = append(x.delta, r)
	return nil
}

func (x *testADS) sendSotw(r *discovery.DiscoveryResponse) error {
	x.sotw = append(x.sotw, r)
	return nil
}

func (x *testADS) deltaReq(r *discovery.DeltaDiscoveryRequest) {
	x.t.Helper()
	if r.TypeUrl == "" {
		r.TypeUrl = EndpointType
	}
	if err := x.a.deltaRequest(x.st, r, x.sendDelta); err != nil {
		x.t.Fatal(err)
	}
}

func (x *testADS) sotwReq(r *discovery.DiscoveryRequest) {
	x.t.Helper()
	if err := x.a.sotwRequest(x.st, r, x.sendSotw); err != nil {
		x.t.Fatal(err)
	}
}

// woken processes a wake-up, as the stream's goroutine does.
func (x *testADS) woken() {
	x.t.Helper()
	select {
	case <-x.st.w.wake:
	default:
		return
	}
	if err := x.a.pushAll(x.st, x.sendSotw, x.sendDelta); err != nil {
		x.t.Fatal(err)
	}
}

// takeDelta returns the one delta response sent since the last call as
// sorted resource names and removals; ok is false if none was sent.
func (x *testADS) takeDelta() (names, removed []string, nonce string, ok bool) {
	x.t.Helper()
	x.woken()
	switch len(x.delta) {
	case 0:
		return nil, nil, "", false
	case 1:
	default:
		x.t.Fatalf("%d responses, want at most 1", len(x.delta))
	}
	r := x.delta[0]
	x.delta = nil
	for _, res := range r.GetResources() {
		names = append(names, res.GetName())
	}
	slices.Sort(names)
	removed = slices.Sorted(slices.Values(r.GetRemovedResources()))
	return names, removed, r.GetNonce(), true
}

func (x *testADS) ack(nonce string) {
	x.deltaReq(&discovery.DeltaDiscoveryRequest{ResponseNonce: nonce})
}

func applyTo(s *store, k Kind, upd map[string]types.Resource, removed ...string) {
	s.apply(Changes{k: {Updated: upd, Removed: removed}}, nil)
}

func TestStoreDeltaNamedSubscription(t *testing.T) {
	t.Parallel()
	s := newTestStore()
	applyTo(s, edsKind, map[string]types.Resource{"a": cla("a", 1), "b": cla("b", 1), "c": cla("c", 1)})
	x := newTestADS(t, s, true)

	type step struct {
		name        string
		do          func()
		wantNames   []string
		wantRemoved []string
		wantNone    bool
	}
	steps := []step{
		{name: "subscribe a, b, missing", do: func() {
			x.deltaReq(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"a", "b", "missing"}})
		}, wantNames: []string{"a", "b"}},
		{name: "unsubscribed c changes", do: func() {
			applyTo(s, edsKind, map[string]types.Resource{"c": cla("c", 2)})
		}, wantNone: true},
		{name: "a changes", do: func() {
			applyTo(s, edsKind, map[string]types.Resource{"a": cla("a", 2)})
		}, wantNames: []string{"a"}},
		{name: "a replaced by an equal resource", do: func() {
			applyTo(s, edsKind, map[string]types.Resource{"a": cla("a", 2)})
		}, wantNone: true},
		{name: "missing appears", do: func() {
			applyTo(s, edsKind, map[string]types.Resource{"missing": cla("missing", 1)})
		}, wantNames: []string{"missing"}},
		{name: "b removed", do: func() {
			applyTo(s, edsKind, nil, "b")
		}, wantRemoved: []string{"b"}},
		{name: "unsubscribe a", do: func() {
			x.deltaReq(&discovery.DeltaDiscoveryRequest{ResourceNamesUnsubscribe: []string{"a"}})
		}, wantNone: true},
		{name: "a changes after unsubscribe", do: func() {
			applyTo(s, edsKind, map[string]types.Resource{"a": cla("a", 3)})
		}, wantNone: true},
		{name: "resubscribe a", do: func() {
			x.deltaReq(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"a"}})
		}, wantNames: []string{"a"}},
	}
	for _, st := range steps {
		st.do()
		names, removed, nonce, ok := x.takeDelta()
		if st.wantNone {
			if ok {
				t.Errorf("%s: sent %v removed %v, want nothing", st.name, names, removed)
			}
			continue
		}
		if !ok || !slices.Equal(names, st.wantNames) || !slices.Equal(removed, st.wantRemoved) {
			t.Errorf("%s: sent %v removed %v (ok %v), want %v removed %v", st.name, names, removed, ok, st.wantNames, st.wantRemoved)
		}
		x.ack(nonce)
		if _, _, _, again := x.takeDelta(); again {
			t.Errorf("%s: the ACK was answered", st.name)
		}
	}
	// The index holds only what the stream subscribes.
	coll := s.colls[edsKind]
	if got := slices.Sorted(maps.Keys(coll.subs)); !slices.Equal(got, []string{"a", "b", "missing"}) {
		t.Errorf("indexed names = %v, want [a b missing]", got)
	}
	x.a.close(x.st)
	if len(coll.subs) != 0 || len(coll.wild) != 0 {
		t.Errorf("index after close: %d names, %d wildcard, want none", len(coll.subs), len(coll.wild))
	}
}

func TestStoreDeltaWaitsForTheAnswer(t *testing.T) {
	t.Parallel()
	s := newTestStore()
	applyTo(s, edsKind, map[string]types.Resource{"a": cla("a", 1), "b": cla("b", 1)})
	x := newTestADS(t, s, true)
	x.deltaReq(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"a", "b"}})
	_, _, nonce, _ := x.takeDelta()
	// Two updates before the client answered: one response after it, with both.
	applyTo(s, edsKind, map[string]types.Resource{"a": cla("a", 2)})
	applyTo(s, edsKind, map[string]types.Resource{"b": cla("b", 2)})
	if names, _, _, ok := x.takeDelta(); ok {
		t.Fatalf("sent %v before the client answered", names)
	}
	// A NACK answers too; what it rejected is not resent, the changes are.
	x.deltaReq(&discovery.DeltaDiscoveryRequest{ResponseNonce: nonce, ErrorDetail: &status.Status{Message: "no"}})
	names, _, _, ok := x.takeDelta()
	if !ok || !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("after the NACK: sent %v (ok %v), want [a b]", names, ok)
	}
	if ts := x.st.types[EndpointType].status; ts.LastNack == nil || ts.LastNack.Nonce != nonce {
		t.Errorf("LastNack = %+v, want nonce %s", ts.LastNack, nonce)
	}
}

func TestStoreDeltaWildcard(t *testing.T) {
	t.Parallel()
	s := newTestStore()
	k := KindOf(ClassEnvoy, ClusterType)
	x := newTestADS(t, s, true)
	req := func(r *discovery.DeltaDiscoveryRequest) { r.TypeUrl = ClusterType; x.deltaReq(r) }

	// Legacy wildcard (no names): answered at once even with nothing.
	req(&discovery.DeltaDiscoveryRequest{})
	names, removed, nonce, ok := x.takeDelta()
	if !ok || len(names)+len(removed) != 0 {
		t.Fatalf("first wildcard response: %v %v (ok %v), want an empty response", names, removed, ok)
	}
	req(&discovery.DeltaDiscoveryRequest{ResponseNonce: nonce})
	if _, _, _, again := x.takeDelta(); again {
		t.Fatal("ACK of the empty response was answered")
	}
	applyTo(s, k, map[string]types.Resource{"x": cla("x", 1), "y": cla("y", 1)})
	if names, _, nonce, _ = x.takeDelta(); !slices.Equal(names, []string{"x", "y"}) {
		t.Errorf("new resources: sent %v, want [x y]", names)
	}
	req(&discovery.DeltaDiscoveryRequest{ResponseNonce: nonce})
	applyTo(s, k, nil, "y")
	if _, removed, nonce, _ = x.takeDelta(); !slices.Equal(removed, []string{"y"}) {
		t.Errorf("removal: removed %v, want [y]", removed)
	}
	req(&discovery.DeltaDiscoveryRequest{ResponseNonce: nonce})
	// Subscribing x by name keeps the wildcard (legacy mode ends);
	// unsubscribing x by name while wildcard resends it. (Requests carry
	// the last nonce, as Envoy's do; without one a wildcard request is
	// answered even when empty.)
	req(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"x"}, ResponseNonce: nonce})
	if names, _, _, ok = x.takeDelta(); ok {
		t.Errorf("subscribing a held resource by name sent %v", names)
	}
	req(&discovery.DeltaDiscoveryRequest{ResourceNamesUnsubscribe: []string{"x"}, ResponseNonce: nonce})
	if names, _, nonce, _ = x.takeDelta(); !slices.Equal(names, []string{"x"}) {
		t.Errorf("unsubscribe by name while wildcard: sent %v, want [x]", names)
	}
	req(&discovery.DeltaDiscoveryRequest{ResponseNonce: nonce})
	// Leaving the wildcard removes what is no longer subscribed.
	req(&discovery.DeltaDiscoveryRequest{ResourceNamesUnsubscribe: []string{"*"}, ResponseNonce: nonce})
	if _, removed, _, _ = x.takeDelta(); !slices.Equal(removed, []string{"x"}) {
		t.Errorf("leaving the wildcard: removed %v, want [x]", removed)
	}
}

func TestStoreDeltaReconnectWithKnownVersions(t *testing.T) {
	t.Parallel()
	s := newTestStore()
	applyTo(s, edsKind, map[string]types.Resource{"a": cla("a", 1), "b": cla("b", 1)})
	first := newTestADS(t, s, true)
	first.deltaReq(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"a", "b"}})
	first.woken()
	held := map[string]string{}
	for _, r := range first.delta[0].GetResources() {
		held[r.GetName()] = r.GetVersion()
	}
	first.a.close(first.st)

	// b changes and c is gone while the client is away; it reconnects
	// (to this or a restarted server: versions are content hashes) with
	// what it holds.
	applyTo(s, edsKind, map[string]types.Resource{"b": cla("b", 2)})
	held["c"] = "stale"
	x := newTestADS(t, s, true)
	x.deltaReq(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"a", "b", "c"}, InitialResourceVersions: held})
	names, removed, _, ok := x.takeDelta()
	if !ok || !slices.Equal(names, []string{"b"}) || !slices.Equal(removed, []string{"c"}) {
		t.Errorf("reconnect: sent %v removed %v (ok %v), want [b] removed [c]", names, removed, ok)
	}
}

func TestStoreSotwFullStateAndPartial(t *testing.T) {
	t.Parallel()
	s := newTestStore()
	cds, eds := KindOf(ClassGRPC, ClusterType), edsKind
	applyTo(s, cds, map[string]types.Resource{"a": cla("a", 1), "b": cla("b", 1), "c": cla("c", 1)})
	applyTo(s, eds, map[string]types.Resource{"a": cla("a", 1), "b": cla("b", 1)})
	x := newTestADS(t, s, false)
	node := grpcNode("g")
	take := func() (url string, names []string, version, nonce string, ok bool) {
		t.Helper()
		x.woken()
		if len(x.sotw) == 0 {
			return "", nil, "", "", false
		}
		if len(x.sotw) > 1 {
			t.Fatalf("%d responses, want at most 1", len(x.sotw))
		}
		r := x.sotw[0]
		x.sotw = nil
		for _, a := range r.GetResources() {
			// CLAs stand in for clusters: both keep the name in field 1.
			n, _ := decode(t, a)
			names = append(names, n)
		}
		slices.Sort(names)
		return r.GetTypeUrl(), names, r.GetVersionInfo(), r.GetNonce(), true
	}
	ack := func(url, version, nonce string, names ...string) {
		x.sotwReq(&discovery.DiscoveryRequest{TypeUrl: url, VersionInfo: version, ResponseNonce: nonce, ResourceNames: names})
	}

	x.sotwReq(&discovery.DiscoveryRequest{Node: node, TypeUrl: ClusterType, ResourceNames: []string{"a", "b"}})
	_, names, cv, cn, _ := take()
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("CDS: %v, want [a b]", names)
	}
	ack(ClusterType, cv, cn, "a", "b")
	x.sotwReq(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a", "b"}})
	_, names, ev, en, _ := take()
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("EDS: %v, want [a b]", names)
	}
	ack(EndpointType, ev, en, "a", "b")

	// CDS is full-state: a change of a sends a and b.
	applyTo(s, cds, map[string]types.Resource{"a": cla("a", 2)})
	if url, names, v, n, _ := take(); url != ClusterType || !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("CDS after a change: %s %v, want [a b]", url, names)
	} else {
		cv, cn = v, n
		ack(ClusterType, cv, cn, "a", "b")
	}
	// CDS removal: the full state without b.
	applyTo(s, cds, nil, "b")
	if _, names, v, n, _ := take(); !slices.Equal(names, []string{"a"}) {
		t.Errorf("CDS after b removed: %v, want [a]", names)
	} else {
		ack(ClusterType, v, n, "a", "b")
	}
	// EDS is partial: only the changed CLA; a removal sends nothing.
	applyTo(s, eds, map[string]types.Resource{"b": cla("b", 2)})
	if url, names, v, n, _ := take(); url != EndpointType || !slices.Equal(names, []string{"b"}) {
		t.Errorf("EDS after b changed: %s %v, want [b]", url, names)
	} else {
		ev, en = v, n
		ack(EndpointType, ev, en, "a", "b")
	}
	applyTo(s, eds, nil, "a")
	if _, names, _, _, ok := take(); ok {
		t.Errorf("EDS removal sent %v, want nothing", names)
	}
	// A stale nonce is ignored; a NACK without a version (of the first
	// response) is not answered at once.
	x.sotwReq(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: "0", ResourceNames: []string{"b"}})
	if _, names, _, _, ok := take(); ok {
		t.Errorf("stale request answered with %v", names)
	}
	y := newTestADS(t, s, false)
	y.sotwReq(&discovery.DiscoveryRequest{Node: node, TypeUrl: EndpointType, ResourceNames: []string{"b"}})
	y.woken()
	r := y.sotw[0]
	y.sotw = nil
	y.sotwReq(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: r.GetNonce(), ResourceNames: []string{"b"},
		ErrorDetail: &status.Status{Message: "rejected"}})
	y.woken()
	if len(y.sotw) != 0 {
		t.Errorf("NACK of the first response answered with %d responses", len(y.sotw))
	}
}

// TestStoreConcurrentUpdates runs streams on their own goroutines while
// updates arrive, then checks every stream holds the final version of
// each resource it subscribes (run with -race).
func TestStoreConcurrentUpdates(t *testing.T) {
	t.Parallel()
	const streams, names, rounds = 8, 20, 200
	s := newTestStore()
	all := map[string]types.Resource{}
	for i := range names {
		n := fmt.Sprint("r", i)
		all[n] = cla(n, 0)
	}
	applyTo(s, edsKind, all)

	type client struct {
		x    *testADS
		held map[string]string
		subs []string
	}
	var clients []*client
	for i := range streams {
		c := &client{x: newTestADS(t, s, true), held: map[string]string{}}
		for j := i % 3; j < names; j += 1 + i%3 {
			c.subs = append(c.subs, fmt.Sprint("r", j))
		}
		clients = append(clients, c)
	}
	finish := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// answer applies and ACKs every response sent so far (an ACK
			// may send the next one).
			answer := func() {
				for len(c.x.delta) > 0 {
					r := c.x.delta[0]
					c.x.delta = c.x.delta[1:]
					for _, res := range r.GetResources() {
						c.held[res.GetName()] = res.GetVersion()
					}
					for _, n := range r.GetRemovedResources() {
						delete(c.held, n)
					}
					c.x.ack(r.GetNonce())
				}
			}
			c.x.deltaReq(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: c.subs})
			answer()
			for {
				select {
				case <-c.x.st.w.wake:
					if err := c.x.a.pushAll(c.x.st, nil, c.x.sendDelta); err != nil {
						t.Error(err)
						return
					}
					answer()
				case <-finish:
					// No more updates: process a last pending wake-up.
					c.x.woken()
					answer()
					return
				}
			}
		}()
	}
	for r := 1; r <= rounds; r++ {
		upd := map[string]types.Resource{}
		for i := r % 3; i < names; i += 2 {
			n := fmt.Sprint("r", i)
			upd[n] = cla(n, r)
		}
		applyTo(s, edsKind, upd)
	}
	close(finish)
	wg.Wait()
	for _, c := range clients {
		want := map[string]string{}
		for _, n := range c.subs {
			w, err := s.colls[edsKind].res[n].wire()
			if err != nil {
				t.Fatal(err)
			}
			want[n] = w.version
		}
		if !maps.Equal(c.held, want) {
			t.Errorf("stream %d holds %v, want %v", c.x.st.status.key.id, c.held, want)
		}
	}
}

func TestStoreSotwSubscriptionChanges(t *testing.T) {
	t.Parallel()
	s := newTestStore()
	applyTo(s, edsKind, map[string]types.Resource{"a": cla("a", 1), "b": cla("b", 1)})
	x := newTestADS(t, s, false)
	sent := func() []string {
		t.Helper()
		x.woken()
		var names []string
		for _, r := range x.sotw {
			for _, a := range r.GetResources() {
				n, _ := decode(t, a)
				names = append(names, n)
			}
		}
		slices.Sort(names)
		return names
	}
	nonce := ""
	req := func(version string, names ...string) {
		if len(x.sotw) > 0 {
			nonce = x.sotw[len(x.sotw)-1].GetNonce()
		}
		x.sotw = nil
		x.sotwReq(&discovery.DiscoveryRequest{Node: grpcNode("g"), TypeUrl: EndpointType, VersionInfo: version,
			ResponseNonce: nonce, ResourceNames: names})
	}
	req("", "a", "b")
	if got := sent(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("first response %v, want [a b]", got)
	}
	req("1", "a", "b") // ACK repeating the list
	if got := sent(); len(got) != 0 {
		t.Errorf("ACK answered with %v", got)
	}
	// A list with a duplicate drops a (same length, different set).
	req("1", "b", "b")
	applyTo(s, edsKind, map[string]types.Resource{"a": cla("a", 2)})
	if got := sent(); len(got) != 0 {
		t.Errorf("unsubscribed a sent: %v", got)
	}
	if names := slices.Sorted(maps.Keys(s.matching(x.st.types[EndpointType].sub))); !slices.Equal(names, []string{"b"}) {
		t.Errorf("subscription matches %v, want [b]", names)
	}
	// Subscribing a again sends it (the client was told to forget it).
	req("1", "a", "b")
	if got := sent(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("resubscribe sent %v, want [a]", got)
	}
}
