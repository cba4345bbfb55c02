package crd

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	apinetworking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/client-go/pkg/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/kubeclient"
)

// fullFeed is a plain istioconfig.Feed of one cluster that lists the
// typed objects through the clientset at every read and hands them over
// whole (kubeclient.Convert of the typed object: its own spec, no
// informer, no transform): the reference for what the informers' records
// must publish.
type fullFeed struct {
	t       *testing.T
	cluster string
	ic      versioned.Interface
}

func (f fullFeed) Name() string                            { return "k8s" }
func (f fullFeed) Run(ctx context.Context, _ func()) error { <-ctx.Done(); return ctx.Err() }

func (f fullFeed) Parts() []istioconfig.FeedPart {
	ctx, nw := context.Background(), f.ic.NetworkingV1()
	var objs []any
	vss, err := nw.VirtualServices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, o := range vss.Items {
		objs = append(objs, o)
	}
	drs, err := nw.DestinationRules("").List(ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, o := range drs.Items {
		objs = append(objs, o)
	}
	scs, err := nw.Sidecars("").List(ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, o := range scs.Items {
		objs = append(objs, o)
	}
	p := istioconfig.FeedPart{Name: f.cluster, Synced: true}
	for _, obj := range objs {
		o, ok := kubeclient.Convert(obj, f.cluster)
		if !ok || o.Config != nil {
			f.t.Fatalf("Convert(%T) = %+v, %v; want a conversion of the typed object", obj, o, ok)
		}
		p.Objects = append(p.Objects, feedObject(o))
	}
	return []istioconfig.FeedPart{p}
}

// TestRealPublishedAsFromFullObjects: what the Kubernetes config source
// publishes from its informers' records (one slim record per object,
// metadata strings repacked, destination hosts shared) equals what the
// same gate publishes from the whole typed objects as listed: the
// snapshot (every field of every object, specs equal, hashes — of which
// MCP versions are made — equal), the objects in force, the rejections
// (object names, sources, reasons) and the merged rules on
// /debug/configz.
func TestRealPublishedAsFromFullObjects(t *testing.T) {
	t.Parallel()
	api, ic := istioServer(t, "shop", "pay")
	ctx := context.Background()
	meta := func(ns, name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name, "app.kubernetes.io/managed-by": "Helm"},
			Annotations: map[string]string{"meshfed.test/note": "kept by Kubernetes, not published"}}
	}
	pay := "pay.pay.svc.cluster.local"
	vs := []*networkingv1.VirtualService{
		{ObjectMeta: meta("shop", "orders"), Spec: apinetworking.VirtualService{Hosts: []string{host, "orders"},
			Http: []*apinetworking.HTTPRoute{{Name: "split",
				Match: []*apinetworking.HTTPMatchRequest{{Uri: &apinetworking.StringMatch{MatchType: &apinetworking.StringMatch_Prefix{Prefix: "/v2"}}}},
				Route: []*apinetworking.HTTPRouteDestination{
					{Destination: &apinetworking.Destination{Host: host, Subset: "v1"}, Weight: 90},
					{Destination: &apinetworking.Destination{Host: host, Subset: "v2"}, Weight: 10}},
				Mirror:  &apinetworking.Destination{Host: "orders", Subset: "v2"},
				Timeout: durationpb.New(3e9)}},
			Tcp: []*apinetworking.TCPRoute{{Route: []*apinetworking.RouteDestination{{Destination: &apinetworking.Destination{Host: "orders",
				Port: &apinetworking.PortSelector{Number: 9000}}}}}}}},
		{ObjectMeta: meta("pay", "pay"), Spec: apinetworking.VirtualService{Hosts: []string{pay},
			Http: []*apinetworking.HTTPRoute{{Route: []*apinetworking.HTTPRouteDestination{{Destination: &apinetworking.Destination{Host: "ledger.pay.svc.cluster.local"}}}}}}},
		// Claims the host of shop/orders, younger: rejected as a conflict.
		{ObjectMeta: meta("pay", "orders-too"), Spec: apinetworking.VirtualService{Hosts: []string{host},
			Http: []*apinetworking.HTTPRoute{{Route: []*apinetworking.HTTPRouteDestination{{Destination: &apinetworking.Destination{Host: host}}}}}}},
		// Invalid for the gate (redirect with route destinations).
		{ObjectMeta: meta("pay", "broken"), Spec: apinetworking.VirtualService{Hosts: []string{"broken.pay.svc.cluster.local"},
			Http: []*apinetworking.HTTPRoute{{Redirect: &apinetworking.HTTPRedirect{Uri: "/x"},
				Route: []*apinetworking.HTTPRouteDestination{{Destination: &apinetworking.Destination{Host: pay}}}}}}},
	}
	for _, o := range vs {
		if _, err := ic.NetworkingV1().VirtualServices(o.Namespace).Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	drs := []*networkingv1.DestinationRule{
		{ObjectMeta: meta("shop", "orders"), Spec: apinetworking.DestinationRule{Host: host,
			Subsets: []*apinetworking.Subset{{Name: "v1", Labels: map[string]string{"version": "v1"}}, {Name: "v2", Labels: map[string]string{"version": "v2"}}},
			TrafficPolicy: &apinetworking.TrafficPolicy{LoadBalancer: &apinetworking.LoadBalancerSettings{
				LbPolicy: &apinetworking.LoadBalancerSettings_Simple{Simple: apinetworking.LoadBalancerSettings_LEAST_REQUEST}}}}},
		// Same host, same namespace: merged with shop/orders.
		{ObjectMeta: meta("shop", "orders-canary"), Spec: apinetworking.DestinationRule{Host: host,
			Subsets: []*apinetworking.Subset{{Name: "canary", Labels: map[string]string{"track": "canary"}}, {Name: "v1", Labels: map[string]string{"version": "old"}}}}},
	}
	for _, o := range drs {
		if _, err := ic.NetworkingV1().DestinationRules(o.Namespace).Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sc := &networkingv1.Sidecar{ObjectMeta: meta("shop", "default"), Spec: apinetworking.Sidecar{
		Egress: []*apinetworking.IstioEgressListener{{Hosts: []string{"./*", "pay/*"}}}}}
	if _, err := ic.NetworkingV1().Sidecars("shop").Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	r := run(t, Options{Name: "k8s", Clusters: []kubeclient.Cluster{clusterOf(t, api, "east")}})
	got := r.waitFor(t, "5 objects in force, 2 rejected", func(st istioconfig.Status) bool {
		return len(st.InForce) == 5 && len(st.Rejected) == 2
	})
	full := istioconfig.New(nil, nil, fullFeed{t: t, cluster: "east", ic: ic})
	full.Reload()
	want := full.Status()
	if len(want.InForce) != 5 || len(want.Rejected) != 2 || len(want.Merged) != 1 {
		t.Fatalf("from the full objects: %d in force, %d rejected, %d merged; want 5, 2, 1", len(want.InForce), len(want.Rejected), len(want.Merged))
	}
	if !slices.EqualFunc(got.InForce, want.InForce, func(a, b istioconfig.ObjectStatus) bool {
		return a.Kind == b.Kind && a.Namespace == b.Namespace && a.Name == b.Name && a.Source == b.Source && a.Hash == b.Hash && slices.Equal(a.Hosts, b.Hosts)
	}) {
		t.Errorf("in force:\n%+v\nfrom the full objects:\n%+v", got.InForce, want.InForce)
	}
	if !slices.EqualFunc(got.Rejected, want.Rejected, func(a, b istioconfig.Rejection) bool {
		return a.Kind == b.Kind && a.Namespace == b.Namespace && a.Name == b.Name && a.Source == b.Source && a.Reason == b.Reason &&
			a.KeptLastGood == b.KeptLastGood && slices.Equal(a.Hosts, b.Hosts) && len(a.Problems) == 0 && len(b.Problems) == 0
	}) {
		t.Errorf("rejected:\n%+v\nfrom the full objects:\n%+v", got.Rejected, want.Rejected)
	}
	if len(got.Merged) != 1 || !slices.Equal(got.Merged[0].Objects, want.Merged[0].Objects) || got.Merged[0].Host != want.Merged[0].Host ||
		got.Merged[0].Policy != want.Merged[0].Policy || !slices.Equal(got.Merged[0].IgnoredPolicies, want.Merged[0].IgnoredPolicies) ||
		len(got.Merged[0].DroppedSubsets) != len(want.Merged[0].DroppedSubsets) {
		t.Errorf("merged: %+v\nfrom the full objects: %+v", got.Merged, want.Merged)
	}
	a, b := r.src.Snapshot().Objects(), full.Snapshot().Objects()
	if len(a) != len(b) {
		t.Fatalf("snapshot: %d objects, from the full objects %d", len(a), len(b))
	}
	for i := range a {
		x, y := *a[i], *b[i]
		if !proto.Equal(x.Spec.(proto.Message), y.Spec.(proto.Message)) {
			t.Errorf("%s: spec %v, from the full object %v", x.Key(), x.Spec, y.Spec)
		}
		x.Spec, y.Spec = nil, nil
		if !x.Created.Equal(y.Created) || x.Created.IsZero() {
			t.Errorf("%s: created %v, from the full object %v", x.Key(), x.Created, y.Created)
		}
		x.Created = y.Created
		if x != y {
			t.Errorf("snapshot object %+v, from the full object %+v", x, y)
		}
	}
}
