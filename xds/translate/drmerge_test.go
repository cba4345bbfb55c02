package translate

import (
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/internal/testfixture"
)

// mergeDRs are two DestinationRules for one host, in file order: the
// first (older) defines v1 and LEAST_REQUEST, the second v2, a v1 of its
// own (dropped) and a ring hash policy (ignored).
const mergeDRs = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders-z, namespace: shop}
spec:
  host: orders.vm.internal
  trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}
  subsets: [{name: v1, labels: {version: v1}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders-a, namespace: shop}
spec:
  host: orders.vm.internal
  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}
  subsets: [{name: v2, labels: {version: v2}}, {name: v1, labels: {version: v2}}]
`

// TestDestinationRuleMergeTranslate: both client kinds get the subsets of
// every rule for the host and the oldest rule's policy; the merged rule
// is reused while its rules do not change.
func TestDestinationRuleMergeTranslate(t *testing.T) {
	t.Parallel()
	svcs := testfixture.TrafficServices()[:1] // orders.vm.internal
	tr := NewTranslator()
	cfg := configSnap(t, 1, mergeDRs)
	snap := model.NewSnapshot(1, svcs)
	snap.Config = cfg
	tr.Translate(snap)
	assertValid(t, tr)
	if in := tr.Invalid(); len(in) != 0 {
		t.Fatalf("Invalid() = %v", in)
	}
	for _, c := range []Class{ClassEnvoy, ClassGRPC} {
		cds := tr.Resources(KindOf(c, ClusterType))
		eds := tr.Resources(KindOf(c, EndpointType))
		for sub, want := range map[string]string{"v1": "10.0.0.1", "v2": "10.0.0.2"} {
			name := SubsetClusterName("orders.vm.internal", 8080, sub)
			if cds[name] == nil {
				t.Errorf("%v: no cluster %s", c, name)
				continue
			}
			eps := claOf(eds[name]).GetEndpoints()
			if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 ||
				eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress() != want {
				t.Errorf("%v %s endpoints = %v, want only %s (the older rule's v1)", c, name, eps, want)
			}
		}
		if lb := cds[ClusterName("orders.vm.internal", 8080)].(*cluster.Cluster).GetLbPolicy(); lb != cluster.Cluster_LEAST_REQUEST {
			t.Errorf("%v: lb policy = %v, want the older rule's LEAST_REQUEST", c, lb)
		}
	}
	golden(t, "drmerge-envoy.golden", dumpClass(t, tr, ClassEnvoy))
	golden(t, "drmerge-grpc.golden", dumpClass(t, tr, ClassGRPC))

	// The same rule objects in a new snapshot: nothing is rebuilt.
	snap2 := model.NewSnapshot(2, svcs)
	snap2.Config = model.NewConfigSnapshot(2, cfg.Objects())
	merged := tr.hostCfg.lookup("orders.vm.internal").dr
	if merged == nil || merged.Source != "test.yaml:1 + test.yaml:9" {
		t.Fatalf("merged rule = %+v, want both rules' sources, oldest first", merged)
	}
	if ch := tr.Translate(snap2); len(ch) != 0 {
		for k, c := range ch {
			if len(c.Updated) > 0 || len(c.Removed) > 0 {
				t.Errorf("unchanged rules changed %v: %v", k, c)
			}
		}
	}
	if tr.hostCfg.lookup("orders.vm.internal").dr != merged {
		t.Error("the merged rule was made again from the same rules")
	}
	// Dropping the older rule: the other's v1 and policy come in.
	objs := cfg.OfKind("DestinationRule")
	var rest []*model.ConfigObject
	for _, o := range objs {
		if o.Name == "orders-a" {
			rest = append(rest, o)
		}
	}
	snap3 := model.NewSnapshot(3, svcs)
	snap3.Config = model.NewConfigSnapshot(3, rest)
	tr.Translate(snap3)
	if lb := tr.Resources(KindOf(ClassGRPC, ClusterType))[ClusterName("orders.vm.internal", 8080)].(*cluster.Cluster).GetLbPolicy(); lb != cluster.Cluster_RING_HASH {
		t.Errorf("after the older rule left: lb policy = %v, want RING_HASH", lb)
	}
	eps := claOf(tr.Resources(KindOf(ClassGRPC, EndpointType))[SubsetClusterName("orders.vm.internal", 8080, "v1")]).GetEndpoints()
	if len(eps) != 1 || eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress() != "10.0.0.2" {
		t.Errorf("after the older rule left: v1 endpoints = %v, want 10.0.0.2", eps)
	}
}

// claOf is the ClusterLoadAssignment of an EDS resource as served.
func claOf(r any) *endpoint.ClusterLoadAssignment {
	switch c := r.(type) {
	case *claResource:
		return c.message()
	case *endpoint.ClusterLoadAssignment:
		return c
	}
	return nil
}
