package translate

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/meshfed/meshfed/model"
)

const failoverDR = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders, namespace: shop}
spec:
  host: orders.test
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 1}
    loadBalancer: {localityLbSetting: {failover: [{from: east, to: north}]}}
  subsets: [{name: all}]
`

// TestFailoverPriorities: a client's variant of a failover cluster's CLA
// has Istio's priorities for its locality (same subzone, zone, region,
// the failover region, the rest; renumbered without gaps); localities
// that see the same priorities share a variant; a client without a
// locality, or a cluster without outlier detection, gets the plain CLA.
func TestFailoverPriorities(t *testing.T) {
	t.Parallel()
	ep := func(addr, region, zone, sub string) model.Endpoint {
		return model.Endpoint{Address: addr, Locality: model.Locality{Region: region, Zone: zone, SubZone: sub}, Source: model.Source{Registry: "r", Cluster: "r"}}
	}
	svc := &model.Service{Hostname: "orders.test", Sources: []string{"r"},
		Ports: []model.Port{{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}},
		Endpoints: []model.Endpoint{
			ep("10.0.0.1", "east", "a", "1"), ep("10.0.0.2", "east", "a", "2"), ep("10.0.0.3", "east", "b", ""),
			ep("10.0.0.4", "north", "x", ""), ep("10.0.0.5", "west", "y", ""),
		}}
	tr := NewTranslator()
	snap := model.NewSnapshot(1, []*model.Service{svc})
	snap.Config = configSnap(t, 1, failoverDR)
	tr.Translate(snap)
	assertValid(t, tr)
	if in := tr.Invalid(); len(in) != 0 {
		t.Fatalf("Invalid() = %v", in)
	}
	eds := tr.Resources(KindOf(ClassGRPC, EndpointType))
	for _, name := range []string{ClusterName("orders.test", 8080), SubsetClusterName("orders.test", 8080, "all")} {
		f, ok := eds[name].(*failoverCLA)
		if !ok {
			t.Fatalf("%s is %T, want a per-locality CLA (have %v)", name, eds[name], resourceNames(eds))
		}
		prios := func(n *core.Node) map[string]uint32 {
			key := f.VariantKey(n)
			cla := f.claResource.message()
			if key != "" {
				cla = f.Variant(key).(*endpoint.ClusterLoadAssignment)
			}
			out := map[string]uint32{}
			for _, l := range cla.GetEndpoints() {
				for _, e := range l.GetLbEndpoints() {
					out[e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()] = l.GetPriority()
				}
			}
			return out
		}
		node := func(r, z, s string) *core.Node {
			return &core.Node{Locality: &core.Locality{Region: r, Zone: z, SubZone: s}}
		}
		for _, c := range []struct {
			node *core.Node
			want map[string]uint32
		}{
			{node("east", "a", "1"), map[string]uint32{"10.0.0.1": 0, "10.0.0.2": 1, "10.0.0.3": 2, "10.0.0.4": 3, "10.0.0.5": 4}},
			{node("east", "b", ""), map[string]uint32{"10.0.0.1": 1, "10.0.0.2": 1, "10.0.0.3": 0, "10.0.0.4": 2, "10.0.0.5": 3}},
			{node("east", "c", ""), map[string]uint32{"10.0.0.1": 0, "10.0.0.2": 0, "10.0.0.3": 0, "10.0.0.4": 1, "10.0.0.5": 2}},
			{node("west", "q", ""), map[string]uint32{"10.0.0.1": 1, "10.0.0.2": 1, "10.0.0.3": 1, "10.0.0.4": 1, "10.0.0.5": 0}},
			{node("south", "", ""), map[string]uint32{"10.0.0.1": 0, "10.0.0.2": 0, "10.0.0.3": 0, "10.0.0.4": 0, "10.0.0.5": 0}},
			{&core.Node{}, map[string]uint32{"10.0.0.1": 0, "10.0.0.2": 0, "10.0.0.3": 0, "10.0.0.4": 0, "10.0.0.5": 0}},
		} {
			got := prios(c.node)
			for a, p := range c.want {
				if got[a] != p {
					t.Errorf("%s, client %v: priorities %v, want %v", name, c.node.GetLocality(), got, c.want)
					break
				}
			}
		}
		if a, b := f.VariantKey(node("east", "c", "")), f.VariantKey(node("east", "d", "9")); a != b {
			t.Errorf("east/c and east/d/9 see the same priorities but have keys %q and %q", a, b)
		}
		if k := f.VariantKey(node("south", "x", "")); k != "" {
			t.Errorf("a region no endpoint or rule names has key %q, want the plain CLA", k)
		}
	}

	// Without outlier detection Istio applies no failover: the plain CLA.
	snap2 := model.NewSnapshot(2, []*model.Service{svc})
	snap2.Config = configSnap(t, 2, "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: orders, namespace: shop}\nspec:\n  host: orders.test\n  trafficPolicy: {loadBalancer: {localityLbSetting: {failover: [{from: east, to: north}]}}}\n")
	tr.Translate(snap2)
	if r := tr.Resources(KindOf(ClassGRPC, EndpointType))[ClusterName("orders.test", 8080)]; r == nil {
		t.Fatal("no CLA")
	} else if _, ok := r.(*failoverCLA); ok {
		t.Error("failover without outlier detection: per-locality CLA, want the plain one")
	}
}
