package ads

import (
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// FuzzADSRequest feeds two arbitrary requests (protobuf, SotW or delta)
// and an ACK of the last response to a stream over a store holding
// fuzzResources. Invariants: no panic; every resource sent decodes and
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
		ResourceNames: []string{ordersCluster, "nope"}}), false)
	f.Add(seed(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"*", "x"}}),
		seed(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesUnsubscribe: []string{"*"}}), true)
	f.Add(seed(&discovery.DeltaDiscoveryRequest{TypeUrl: "type.googleapis.com/unknown.T", ResourceNamesSubscribe: []string{"a"}}),
		seed(&discovery.DeltaDiscoveryRequest{TypeUrl: ListenerType}), true)
	f.Add(seed(&discovery.DiscoveryRequest{TypeUrl: RouteType, ResourceNames: []string{"8080"}}),
		seed(&discovery.DiscoveryRequest{TypeUrl: RouteType, ResponseNonce: "1", VersionInfo: "1"}), false)
	f.Fuzz(func(t *testing.T, a, b []byte, delta bool) {
		s := newTestStore()
		s.apply(fuzzResources(t), nil)
		x := newTestADS(t, s, delta)
		x.a.limits = Limits{MaxTypeURLs: 4, MaxNames: 50}.withDefaults()
		check := func() {
			for _, r := range x.sotw {
				checkAnys(t, r.GetResources())
			}
			for _, r := range x.delta {
				for _, res := range r.GetResources() {
					checkAnys(t, []*anypb.Any{res.GetResource()})
				}
			}
			if x.st.w.names > 50 || len(x.st.types) > 4 {
				t.Fatalf("limits exceeded: %d names, %d types", x.st.w.names, len(x.st.types))
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
			_ = x.a.tracker.snapshot(s.count)
		}
		x.a.close(x.st)
		for k, c := range s.colls {
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

const ordersCluster = "outbound|8080||orders.vm.internal"

// fuzzResources is a small valid set of every collection: a cluster and
// its endpoints per class, a listener and a route configuration.
func fuzzResources(t *testing.T) Changes {
	cla := &endpoint.ClusterLoadAssignment{ClusterName: ordersCluster, Endpoints: []*endpoint.LocalityLbEndpoints{{
		LbEndpoints: []*endpoint.LbEndpoint{{HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Address: "10.0.0.5", PortSpecifier: &core.SocketAddress_PortValue{PortValue: 18080}}}},
		}}}},
	}}}
	ch := Changes{}
	ch.Update(KindOf("", EndpointType), ordersCluster, cla)
	for _, c := range []Class{ClassEnvoy, ClassGRPC} {
		ch.Update(KindOf(c, ClusterType), ordersCluster, &cluster.Cluster{Name: ordersCluster, ConnectTimeout: durationpb.New(time.Second),
			ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS}})
		ch.Update(KindOf(c, ListenerType), "orders.vm.internal:8080", &listener.Listener{Name: "orders.vm.internal:8080"})
		ch.Update(KindOf(c, RouteType), "8080", &route.RouteConfiguration{Name: "8080", VirtualHosts: []*route.VirtualHost{{
			Name: "orders", Domains: []string{"orders.vm.internal"}}}})
	}
	for _, c := range ch {
		for n, r := range c.Updated {
			if err := r.(interface{ ValidateAll() error }).ValidateAll(); err != nil {
				t.Fatalf("fixture %s: %v", n, err)
			}
		}
	}
	return ch
}
