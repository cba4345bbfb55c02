package crd

// Tests against a real kube-apiserver with Istio's CRDs installed
// (test/servers builds and starts it).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apinetworking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	"istio.io/client-go/pkg/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/kubeclient"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/test/servers"
)

// realTimeout bounds waits on the real server; recovery after an API
// server restart waits for client-go's backoff (up to 30s).
const realTimeout = 60 * time.Second

const host = "orders.shop.svc.cluster.local"

func istioClient(t *testing.T, api *servers.KubeAPIServer) versioned.Interface {
	t.Helper()
	cs, err := versioned.NewForConfig(&rest.Config{Host: api.URL, BearerToken: servers.AdminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: api.CA}})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// istioServer starts a kube-apiserver with Istio's CRDs and namespaces,
// and returns it with an Istio clientset for it.
func istioServer(t *testing.T, namespaces ...string) (*servers.KubeAPIServer, versioned.Interface) {
	t.Helper()
	api := servers.StartKubeClusters(t, 1).Servers[0]
	api.InstallIstioCRDs(t)
	for _, ns := range namespaces {
		api.EnsureNamespace(t, ns)
	}
	return api, istioClient(t, api)
}

// connector reaches the cluster of a kubeconfig file and context as a
// registry's kubernetes block does (kube.Config.Connect, with its default
// qps and burst).
type connector struct{ kubeconfig, context string }

func (c connector) Connect() (*rest.Config, func(), error) {
	return kubeclient.Connect(c.kubeconfig, c.context, 50, 100)
}

// clusterOf is the cluster as clusters.yaml names it: a registry's
// kubernetes block.
func clusterOf(t *testing.T, api *servers.KubeAPIServer, name string) kubeclient.Cluster {
	t.Helper()
	c := connector{api.WriteKubeconfig(t, name, servers.AdminToken), name}
	return kubeclient.Cluster{Name: name, Connect: c.Connect}
}

// running is an istioconfig.Source over one crd.Source, running.
type running struct {
	src  *istioconfig.Source
	last chan *model.ConfigSnapshot // the last published snapshot (capacity 1)
}

func run(t *testing.T, opts Options) *running {
	t.Helper()
	r := &running{src: istioconfig.New(nil, nil, New(opts)), last: make(chan *model.ConfigSnapshot, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.src.Run(ctx, func(s *model.ConfigSnapshot) {
			select {
			case <-r.last:
			default:
			}
			r.last <- s
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// waitFor polls the source's status until ok holds.
func (r *running) waitFor(t *testing.T, what string, ok func(istioconfig.Status) bool) istioconfig.Status {
	t.Helper()
	deadline := time.Now().Add(realTimeout)
	for {
		st := r.src.Status()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; status: %+v", what, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func inForce(st istioconfig.Status) []string {
	var out []string
	for _, o := range st.InForce {
		out = append(out, o.Kind+" "+o.Namespace+"/"+o.Name+" from "+o.Source)
	}
	return out
}

func weightsOf(t *testing.T, src *istioconfig.Source, name string) []int32 {
	t.Helper()
	for _, o := range src.Snapshot().OfKind(istioconfig.KindVirtualService) {
		if o.Name == name {
			var w []int32
			for _, d := range o.Spec.(*apinetworking.VirtualService).GetHttp()[0].GetRoute() {
				w = append(w, d.GetWeight())
			}
			return w
		}
	}
	return nil
}

// setVS makes spec a 2-way split of host between subsets v1 and v2.
func setVS(spec *apinetworking.VirtualService, w1, w2 int32) {
	spec.Hosts = []string{host}
	spec.Http = []*apinetworking.HTTPRoute{{Route: []*apinetworking.HTTPRouteDestination{
		{Destination: &apinetworking.Destination{Host: host, Subset: "v1"}, Weight: w1},
		{Destination: &apinetworking.Destination{Host: host, Subset: "v2"}, Weight: w2},
	}}}
}

func TestRealFollowsCRDs(t *testing.T) {
	t.Parallel()
	api, ic := istioServer(t, "shop", "other")
	ctx := context.Background()

	// Not watched: namespace "other".
	if _, err := ic.NetworkingV1().DestinationRules("other").Create(ctx, &networkingv1.DestinationRule{
		ObjectMeta: metav1.ObjectMeta{Name: "ignored"}, Spec: apinetworking.DestinationRule{Host: "x.other.svc.cluster.local"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := run(t, Options{Name: "k8s", Clusters: []kubeclient.Cluster{clusterOf(t, api, "east")}, Namespaces: []string{"shop"}})
	r.waitFor(t, "the first sync", func(st istioconfig.Status) bool { ok, _ := r.src.Ready(); return ok })
	if st := r.src.Status(); len(st.InForce) != 0 || !slices.Equal(st.Sources, []istioconfig.SourceState{{Name: "k8s", Kind: "kubernetes", Cluster: "east", State: "Synced"}}) {
		t.Fatalf("after sync: in force %v, sources %+v", inForce(st), st.Sources)
	}

	// Create: a VirtualService written as v1, a DestinationRule as
	// v1beta1 (the API server serves both as v1).
	orders := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "orders"}}
	setVS(&orders.Spec, 90, 10)
	if _, err := ic.NetworkingV1().VirtualServices("shop").Create(ctx, orders, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ic.NetworkingV1beta1().DestinationRules("shop").Create(ctx, &networkingv1beta1.DestinationRule{
		ObjectMeta: metav1.ObjectMeta{Name: "orders"}, Spec: apinetworking.DestinationRule{Host: host, Subsets: []*apinetworking.Subset{
			{Name: "v1", Labels: map[string]string{"version": "v1"}}, {Name: "v2", Labels: map[string]string{"version": "v2"}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"DestinationRule shop/orders from shop/orders (east)", "VirtualService shop/orders from shop/orders (east)"}
	r.waitFor(t, "both objects in force", func(st istioconfig.Status) bool { return slices.Equal(inForce(st), want) })
	if w := weightsOf(t, r.src, "orders"); !slices.Equal(w, []int32{90, 10}) {
		t.Fatalf("weights = %v, want [90 10]", w)
	}
	select {
	case s := <-r.last:
		if len(s.Objects()) != 2 {
			t.Fatalf("published snapshot holds %d objects, want 2", len(s.Objects()))
		}
	case <-time.After(realTimeout):
		t.Fatal("no snapshot published")
	}

	// Update: shift the weights.
	vs, err := ic.NetworkingV1().VirtualServices("shop").Get(ctx, "orders", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setVS(&vs.Spec, 0, 100)
	if _, err := ic.NetworkingV1().VirtualServices("shop").Update(ctx, vs, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, "the new weights", func(istioconfig.Status) bool { return slices.Equal(weightsOf(t, r.src, "orders"), []int32{0, 100}) })

	// An invalid object, written as v1alpha3, is rejected alone.
	bad := &networkingv1alpha3.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "payments"}}
	setVS(&bad.Spec, 50, 50)
	bad.Spec.Hosts = []string{"payments.shop.svc.cluster.local"}
	bad.Spec.Http[0].Match = []*apinetworking.HTTPMatchRequest{{Uri: &apinetworking.StringMatch{MatchType: &apinetworking.StringMatch_Regex{Regex: "("}}}}
	if _, err := ic.NetworkingV1alpha3().VirtualServices("shop").Create(ctx, bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	st := r.waitFor(t, "the rejection", func(st istioconfig.Status) bool { return len(st.Rejected) == 1 })
	if rej := st.Rejected[0]; rej.Source != "shop/payments (east)" || rej.Kind != "VirtualService" || rej.KeptLastGood ||
		!strings.Contains(rej.Reason, `spec.http[0].match[0].uri: regex "("`) {
		t.Errorf("rejection = %+v", rej)
	}
	if !slices.Equal(inForce(st), want) {
		t.Errorf("in force = %v, want %v", inForce(st), want)
	}

	// The valid VirtualService turns invalid: its last good version stays.
	vs, err = ic.NetworkingV1().VirtualServices("shop").Get(ctx, "orders", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vs.Spec.Http[0].Retries = &apinetworking.HTTPRetry{Attempts: 2, RetryOn: "sometimes"}
	if _, err := ic.NetworkingV1().VirtualServices("shop").Update(ctx, vs, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	st = r.waitFor(t, "the second rejection", func(st istioconfig.Status) bool { return len(st.Rejected) == 2 })
	for _, rej := range st.Rejected {
		if rej.Name == "orders" && (!rej.KeptLastGood || !strings.Contains(rej.Reason, `retryOn "sometimes"`) || rej.Source != "shop/orders (east)") {
			t.Errorf("rejection of orders = %+v", rej)
		}
	}
	if w := weightsOf(t, r.src, "orders"); !slices.Equal(w, []int32{0, 100}) || !slices.Equal(inForce(st), want) {
		t.Errorf("in force %v with weights %v, want the last good orders [0 100]", inForce(st), w)
	}

	// Delete the DestinationRule: it leaves.
	if err := ic.NetworkingV1().DestinationRules("shop").Delete(ctx, "orders", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, "the DestinationRule gone", func(st istioconfig.Status) bool {
		return slices.Equal(inForce(st), want[1:])
	})

	// The API server goes away: the cluster is Degraded and what is in
	// force stays; it comes back: Synced, and a delete is followed again.
	api.Stop(t)
	st = r.waitFor(t, "Degraded", func(st istioconfig.Status) bool {
		return len(st.Sources) == 1 && st.Sources[0].State == "Degraded"
	})
	if st.Sources[0].Error == "" || !slices.Equal(inForce(st), want[1:]) {
		t.Errorf("while down: sources %+v, in force %v", st.Sources, inForce(st))
	}
	api.Start(t)
	r.waitFor(t, "Synced again", func(st istioconfig.Status) bool {
		return len(st.Sources) == 1 && st.Sources[0].State == "Synced"
	})
	ic = istioClient(t, api)
	if err := ic.NetworkingV1().VirtualServices("shop").Delete(ctx, "orders", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, "the VirtualService gone", func(st istioconfig.Status) bool { return len(st.InForce) == 0 })
}

// TestRealTwoClusters: one source over two clusters; the same object in
// both is one object, a differing one is rejected; a cluster without
// Istio's CRDs is Failed (not waited for), with the reason.
func TestRealTwoClusters(t *testing.T) {
	t.Parallel()
	kc := servers.StartKubeClusters(t, 3)
	east, west, bare := kc.Servers[0], kc.Servers[1], kc.Servers[2]
	ctx := context.Background()
	for i, api := range []*servers.KubeAPIServer{east, west} {
		api.InstallIstioCRDs(t)
		api.EnsureNamespace(t, "shop")
		ic := istioClient(t, api)
		dr := &networkingv1.DestinationRule{ObjectMeta: metav1.ObjectMeta{Name: "orders"},
			Spec: apinetworking.DestinationRule{Host: host, Subsets: []*apinetworking.Subset{{Name: "v1", Labels: map[string]string{"version": "v1"}}}}}
		if _, err := ic.NetworkingV1().DestinationRules("shop").Create(ctx, dr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "orders"}}
		setVS(&vs.Spec, int32(90-i), int32(10+i))
		if _, err := ic.NetworkingV1().VirtualServices("shop").Create(ctx, vs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r := run(t, Options{Name: "k8s", Clusters: []kubeclient.Cluster{clusterOf(t, east, "east"), clusterOf(t, west, "west"), clusterOf(t, bare, "bare")}})
	st := r.waitFor(t, "both clusters synced, bare failed", func(st istioconfig.Status) bool {
		return len(st.Sources) == 3 && st.Sources[0].State == "Synced" && st.Sources[1].State == "Synced" && st.Sources[2].State == "Failed"
	})
	if ok, why := r.src.Ready(); !ok {
		t.Errorf("Ready() = false, %q; want ready: a cluster without CRDs is not waited for", why)
	}
	if f := r.src.Failures(); len(f) != 1 || !strings.Contains(f[0], "cluster bare failed") || !strings.Contains(f[0], "install Istio's CRDs") {
		t.Errorf("Failures() = %q, want cluster bare with the reason", f)
	}
	want := []string{"DestinationRule shop/orders from shop/orders (east)", "VirtualService shop/orders from shop/orders (east)"}
	if !slices.Equal(inForce(st), want) {
		t.Errorf("in force = %v, want %v", inForce(st), want)
	}
	if len(st.Rejected) != 1 || st.Rejected[0].Source != "shop/orders (west)" ||
		st.Rejected[0].Reason != fmt.Sprintf("VirtualService shop/orders is already defined at %s", "shop/orders (east)") {
		t.Errorf("rejected = %+v, want west's differing VirtualService", st.Rejected)
	}
}

// TestRealRBACIsEnough reads the CRDs with the token of the ServiceAccount
// the Helm chart creates and binds (deploy/kubernetes/meshfed.yaml, its
// RBAC documents): the source syncs and reads them, and may not write them.
func TestRealRBACIsEnough(t *testing.T) {
	t.Parallel()
	api := servers.StartKubeClusters(t, 1).Servers[0]
	api.InstallIstioCRDs(t)
	api.EnsureNamespace(t, "meshfed")
	api.EnsureNamespace(t, "shop")
	manifest, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", "meshfed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rbac []string
	for _, doc := range strings.Split(string(manifest), "\n---\n") {
		for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding"} {
			if strings.Contains(doc, "\nkind: "+kind+"\n") {
				rbac = append(rbac, doc)
			}
		}
	}
	api.Apply(t, []byte(strings.Join(rbac, "\n---\n")))
	token := api.ServiceAccountToken(t, "meshfed", "meshfed")
	ctx := context.Background()
	vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "orders"}}
	setVS(&vs.Spec, 90, 10)
	if _, err := istioClient(t, api).NetworkingV1().VirtualServices("shop").Create(ctx, vs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	c := connector{api.WriteKubeconfig(t, "east", token), "east"}
	r := run(t, Options{Name: "k8s", Clusters: []kubeclient.Cluster{{Name: "east", Connect: c.Connect}}})
	st := r.waitFor(t, "the VirtualService read with the chart's RBAC", func(st istioconfig.Status) bool { return len(st.InForce) == 1 })
	if len(st.Sources) != 1 || st.Sources[0].State != "Synced" {
		t.Errorf("sources = %+v", st.Sources)
	}

	// ServiceEntries and WorkloadEntries (the serviceentry registry's
	// read through kubeclient.IstioWatch) too.
	if _, err := istioClient(t, api).NetworkingV1().ServiceEntries("shop").Create(ctx, &networkingv1.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: "pay"},
		Spec: apinetworking.ServiceEntry{Hosts: []string{"pay.ext.example"}, Ports: []*apinetworking.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}},
			Resolution: apinetworking.ServiceEntry_DNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	seSrc := kubeclient.NewIstioWatch(kubeclient.IstioOptions{Clusters: []kubeclient.Cluster{{Name: "east", Connect: c.Connect}}, Kinds: []string{kubeclient.KindServiceEntry, kubeclient.KindWorkloadEntry}})
	seCtx, seCancel := context.WithCancel(ctx)
	seDone := make(chan struct{})
	go func() { defer close(seDone); _ = seSrc.Run(seCtx, func() {}) }()
	defer func() { seCancel(); <-seDone }()
	for deadline := time.Now().Add(realTimeout); ; time.Sleep(50 * time.Millisecond) {
		p := seSrc.Parts()[0]
		if p.Synced && p.Err == "" && len(p.Objects) == 1 && p.Objects[0].Source == "shop/pay (east)" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ServiceEntries not read with the chart's RBAC: %+v", p)
		}
	}

	rc, closeConns, err := c.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer closeConns()
	reader, err := versioned.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	other := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "x"}}
	setVS(&other.Spec, 1, 1)
	_, err = reader.NetworkingV1().VirtualServices("shop").Create(ctx, other, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("create VirtualService with the chart's token: %v, want Forbidden", err)
	}
}

// TestRealOneEventOneObject: with 50 VirtualServices in force, updating
// one converts (clones), hashes and validates that one only, through the
// real informers; unchanged objects keep their pointers.
func TestRealOneEventOneObject(t *testing.T) {
	t.Parallel()
	api, ic := istioServer(t, "shop")
	ctx := context.Background()
	const n = 50
	for i := range n {
		vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("vs%02d", i)}}
		setVS(&vs.Spec, 90, 10)
		vs.Spec.Hosts = []string{fmt.Sprintf("svc%02d.shop.svc.cluster.local", i)}
		if _, err := ic.NetworkingV1().VirtualServices("shop").Create(ctx, vs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	feed := New(Options{Name: "k8s", Clusters: []kubeclient.Cluster{clusterOf(t, api, "east")}, Namespaces: []string{"shop"}})
	src := istioconfig.New(nil, nil, feed)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = src.Run(runCtx, func(*model.ConfigSnapshot) {}) }()
	t.Cleanup(func() { cancel(); <-done })
	r := &running{src: src}
	r.waitFor(t, "50 objects in force", func(st istioconfig.Status) bool { return len(st.InForce) == n })
	conv0 := feed.watch.Conversions()
	hashed0, validated0 := src.Work()
	compared0 := src.Compared()
	if conv0 != n || hashed0 != n || validated0 != n {
		t.Errorf("first sync: %d conversions, %d hashed, %d validated; want %d each", conv0, hashed0, validated0, n)
	}
	before := map[string]*model.ConfigObject{}
	for _, o := range src.Snapshot().Objects() {
		before[o.Name] = o
	}

	vs, err := ic.NetworkingV1().VirtualServices("shop").Get(ctx, "vs17", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setVS(&vs.Spec, 0, 100)
	vs.Spec.Hosts = []string{"svc17.shop.svc.cluster.local"}
	if _, err := ic.NetworkingV1().VirtualServices("shop").Update(ctx, vs, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, "the new weights", func(istioconfig.Status) bool { return slices.Equal(weightsOf(t, src, "vs17"), []int32{0, 100}) })
	// The Run's read of the event compared vs17 only with what was in
	// force (a Source without directories has no resync).
	if got := src.Compared() - compared0; got != 1 {
		t.Errorf("one update compared %d objects, want 1", got)
	}
	src.Reload() // one more read: nothing changed, nothing done
	conv := feed.watch.Conversions() - conv0
	hashed, validated := src.Work()
	hashed, validated = hashed-hashed0, validated-validated0
	t.Logf("one update among %d objects: %d conversions, %d hashed, %d validated", n, conv, hashed, validated)
	if conv != 1 || hashed != 1 || validated != 1 {
		t.Errorf("one update: %d conversions, %d hashed, %d validated; want 1 each", conv, hashed, validated)
	}
	for _, o := range src.Snapshot().Objects() {
		if changed := before[o.Name] != o; changed != (o.Name == "vs17") {
			t.Errorf("%s: pointer changed = %v", o.Name, changed)
		}
	}
}
