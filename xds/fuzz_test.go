package xds

import (
	"log/slog"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// FuzzADSRequest feeds two arbitrary requests (protobuf, SotW or delta)
// and an ACK of the last response to a stream over a server holding the
// fixture model. Invariants: no panic; every resource sent decodes and
// passes ValidateAll; the stream's limits hold; once the stream ends, the
// subscription index and the tracker hold nothing of it.
func FuzzADSRequest(f *testing.F) {
	seed := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	node := &core.Node{Id: "sidecar~10.0.0.1~a~ns"}
	f.Add(seed(&discovery.DiscoveryRequest{Node: node, TypeUrl: ClusterType}), seed(&discovery.DiscoveryRequest{TypeUrl: EndpointType,
		ResourceNames: []string{ClusterName("orders.vm.internal", 8080), "nope"}}), false)
	f.Add(seed(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"*", "x"}}),
		seed(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesUnsubscribe: []string{"*"}}), true)
	f.Add(seed(&discovery.DeltaDiscoveryRequest{TypeUrl: "type.googleapis.com/unknown.T", ResourceNamesSubscribe: []string{"a"}}),
		seed(&discovery.DeltaDiscoveryRequest{TypeUrl: ListenerType}), true)
	f.Add(seed(&discovery.DiscoveryRequest{TypeUrl: RouteType, ResourceNames: []string{"8080"}}),
		seed(&discovery.DiscoveryRequest{TypeUrl: RouteType, ResponseNonce: "1", VersionInfo: "1"}), false)
	first, _, _ := fixtureSnapshots()
	f.Fuzz(func(t *testing.T, a, b []byte, delta bool) {
		srv := NewServer(Options{Limits: Limits{MaxTypeURLs: 4, MaxNames: 50}})
		srv.Update(first)
		x := newTestADS(t, srv.store, delta)
		x.a.limits = srv.ads.limits
		x.a.tracker = newTracker(slog.New(slog.DiscardHandler), nil)
		x.st = x.a.open(delta)
		check := func() {
			for _, r := range x.sotw {
				checkAnys(t, r.GetResources())
			}
			for _, r := range x.delta {
				for _, res := range r.GetResources() {
					checkAnys(t, []*anypb.Any{res.GetResource()})
				}
			}
			if x.st.names > 50 || len(x.st.types) > 4 {
				t.Fatalf("limits exceeded: %d names, %d types", x.st.names, len(x.st.types))
			}
		}
		ended := false
		for _, raw := range [][]byte{a, b} {
			var err error
			if delta {
				req := &discovery.DeltaDiscoveryRequest{}
				if proto.Unmarshal(raw, req) != nil {
					continue
				}
				err = x.a.deltaRequest(x.st, req, x.sendDelta)
			} else {
				req := &discovery.DiscoveryRequest{}
				if proto.Unmarshal(raw, req) != nil {
					continue
				}
				err = x.a.sotwRequest(x.st, req, x.sendSotw)
			}
			check()
			if err != nil {
				ended = true // the stream ends with this status
				break
			}
		}
		if !ended {
			// ACK the last response of each kind.
			if n := len(x.sotw); n > 0 && !delta {
				r := x.sotw[n-1]
				if err := x.a.sotwRequest(x.st, &discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}, x.sendSotw); err != nil {
					t.Errorf("ACK: %v", err)
				}
			}
			if n := len(x.delta); n > 0 && delta {
				r := x.delta[n-1]
				if err := x.a.deltaRequest(x.st, &discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()}, x.sendDelta); err != nil {
					t.Errorf("ACK: %v", err)
				}
			}
			check()
			_ = x.a.tracker.snapshot(srv.store.count)
		}
		x.a.close(x.st)
		for k, c := range srv.store.colls {
			if len(c.subs) != 0 || len(c.wild) != 0 {
				t.Errorf("%v: %d names and %d wildcard subscriptions left after the stream ended", k, len(c.subs), len(c.wild))
			}
		}
		if len(x.a.tracker.streams) != 0 {
			t.Errorf("the tracker still lists %d streams", len(x.a.tracker.streams))
		}
	})
}

// checkAnys decodes each resource and runs its validation.
func checkAnys(t *testing.T, as []*anypb.Any) {
	t.Helper()
	for _, a := range as {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatalf("resource %s does not decode: %v", a.GetTypeUrl(), err)
		}
		if v, ok := m.(interface{ ValidateAll() error }); ok {
			if err := v.ValidateAll(); err != nil {
				t.Fatalf("resource %s: %v", a.GetTypeUrl(), err)
			}
		}
	}
}
