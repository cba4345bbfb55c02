package serviceentry

// Tests against a real kube-apiserver with Istio's CRDs installed
// (test/servers builds and starts it).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apinetworking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	"istio.io/client-go/pkg/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/kube"
	"github.com/meshfed/meshfed/registries/registrytest"
	"github.com/meshfed/meshfed/test/servers"
)

// realWait bounds waits on the real server; recovery after an API server
// restart waits for client-go's backoff (up to 30s).
const realWait = 60 * time.Second

// kubeRegistry is a serviceentry registry reading namespace shop of the
// cluster api as clusters.yaml would configure it: its kubernetes block
// names a registry of kind kubernetes ("east") whose block is handed to it.
func kubeRegistry(t *testing.T, api *servers.KubeAPIServer) (*Registry, registries.Common) {
	t.Helper()
	east := &kube.Config{Kubeconfig: api.WriteKubeconfig(t, "east", servers.AdminToken), Context: "east"}
	east.ApplyDefaults()
	c := registries.Common{Name: "vms", Kind: "serviceentry", Domain: "ext.example"}
	cfg := &Config{Kubernetes: &Kubernetes{Clusters: []string{"east"}, Namespaces: []string{"shop"}}}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.UseClusters(map[string]registries.Config{"east": east})
	reg, err := cfg.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	return reg.(*Registry), c
}

func istioClient(t *testing.T, api *servers.KubeAPIServer) versioned.Interface {
	t.Helper()
	cs, err := versioned.NewForConfig(&rest.Config{Host: api.URL, BearerToken: servers.AdminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: api.CA}})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestRealKubernetes: ServiceEntries and WorkloadEntries read from a
// cluster are served like those of files: create, update, an invalid
// WorkloadEntry rejected alone (its last good version kept), delete, and
// an API server outage (Degraded, last state kept).
func TestRealKubernetes(t *testing.T) {
	t.Parallel()
	api := servers.StartKubeClusters(t, 1).Servers[0]
	api.InstallIstioCRDs(t)
	api.EnsureNamespace(t, "shop")
	api.EnsureNamespace(t, "other")
	ic := istioClient(t, api)
	ctx := context.Background()

	// Not read: namespace "other".
	if _, err := ic.NetworkingV1().ServiceEntries("other").Create(ctx, &networkingv1.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: "x"},
		Spec: apinetworking.ServiceEntry{Hosts: []string{"x.ext.example"}, Ports: []*apinetworking.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}},
			Resolution: apinetworking.ServiceEntry_STATIC, Endpoints: []*apinetworking.WorkloadEntry{{Address: "10.9.9.9"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r, _ := kubeRegistry(t, api)
	sink := registrytest.NewSink()
	stop := registrytest.Start(t, r, sink)
	defer stop()
	st := sink.WaitFor(t, realWait, func(s registrytest.State) bool { return s.Healthy() })
	if len(st.Services) != 0 {
		t.Fatalf("after sync: services %v, want none (namespace other is not read)", registrytest.Hostnames(st.Services))
	}

	// Create: a ServiceEntry (written as v1beta1) selecting two
	// WorkloadEntries.
	if _, err := ic.NetworkingV1beta1().ServiceEntries("shop").Create(ctx, &networkingv1beta1.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: "pay"},
		Spec: apinetworking.ServiceEntry{Hosts: []string{"pay.ext.example", "pay.elsewhere.example"},
			Ports:      []*apinetworking.ServicePort{{Name: "grpc", Number: 8080, Protocol: "GRPC", TargetPort: 9000}},
			Resolution: apinetworking.ServiceEntry_STATIC, WorkloadSelector: &apinetworking.WorkloadSelector{Labels: map[string]string{"app": "pay"}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, we := range []struct{ name, addr string }{{"vm-1", "10.1.0.1"}, {"vm-2", "10.1.0.2"}} {
		if _, err := ic.NetworkingV1().WorkloadEntries("shop").Create(ctx, &networkingv1.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{Name: we.name},
			Spec: apinetworking.WorkloadEntry{Address: we.addr, Labels: map[string]string{"app": "pay"}, Locality: "eu/eu-1a"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	st = sink.WaitFor(t, realWait, func(s registrytest.State) bool {
		return slices.Equal(endpointsOf(s.Services, "pay.ext.example"), []string{"10.1.0.1", "10.1.0.2"})
	})
	if h := registrytest.Hostnames(st.Services); !slices.Equal(h, []string{"pay.ext.example"}) {
		t.Errorf("services = %v, want pay.ext.example only", h)
	}
	// The domain rule: the host outside the domain is rejected alone.
	if len(st.Rejected) != 1 || !strings.Contains(st.Rejected[0].String(), `shop/pay (east)`) ||
		!strings.Contains(st.Rejected[0].Reason, `outside the registry's domain "ext.example"`) {
		t.Errorf("rejected = %v, want pay.elsewhere.example outside the domain", st.Rejected)
	}
	pay, _ := registrytest.Find(st.Services, "pay.ext.example")
	if ep := pay.Endpoints[0]; ep.Ports["grpc"] != 9000 || ep.Locality.Zone != "eu-1a" || ep.Origin != "shop/vm-1 (east) WorkloadEntry shop/vm-1" {
		t.Errorf("endpoint = %+v", ep)
	}

	// Update a WorkloadEntry's address: the endpoint follows.
	setAddress := func(name, addr string) {
		t.Helper()
		we, err := ic.NetworkingV1().WorkloadEntries("shop").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		we.Spec.Address = addr
		if _, err := ic.NetworkingV1().WorkloadEntries("shop").Update(ctx, we, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setAddress("vm-2", "10.1.0.22")
	sink.WaitFor(t, realWait, func(s registrytest.State) bool {
		return slices.Equal(endpointsOf(s.Services, "pay.ext.example"), []string{"10.1.0.1", "10.1.0.22"})
	})

	// An invalid address: that WorkloadEntry alone is rejected, its last
	// good version stays served.
	setAddress("vm-1", "unix:///var/run/pay.sock")
	st = sink.WaitFor(t, realWait, func(s registrytest.State) bool { return len(s.Rejected) == 2 })
	var found bool
	for _, rej := range st.Rejected {
		if strings.Contains(rej.String(), "shop/vm-1 (east) WorkloadEntry shop/vm-1: object rejected: spec.address") {
			found = strings.Contains(rej.Reason, "its last good version (shop/vm-1 (east)) stays served")
		}
	}
	if !found || !st.Healthy() {
		t.Errorf("status %v, rejected = %v, want vm-1 rejected with its last good version kept", st.Status, st.Rejected)
	}
	if got := endpointsOf(st.Services, "pay.ext.example"); !slices.Equal(got, []string{"10.1.0.1", "10.1.0.22"}) {
		t.Errorf("served %v, want vm-1's last good version and vm-2", got)
	}

	// Delete a WorkloadEntry, then the ServiceEntry: they leave.
	if err := ic.NetworkingV1().WorkloadEntries("shop").Delete(ctx, "vm-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, realWait, func(s registrytest.State) bool {
		return slices.Equal(endpointsOf(s.Services, "pay.ext.example"), []string{"10.1.0.1"})
	})

	// The API server goes away: Degraded, the last state stays; it comes
	// back: Synced, and a delete is followed again.
	api.Stop(t)
	st = sink.WaitFor(t, realWait, func(s registrytest.State) bool { return s.Failing() })
	if st.Status.Invalid || !strings.Contains(st.Status.Err, "cluster east: ") {
		t.Errorf("status while down = %+v, want an outage of cluster east", st.Status)
	}
	if got := endpointsOf(st.Services, "pay.ext.example"); !slices.Equal(got, []string{"10.1.0.1"}) {
		t.Errorf("served while down: %v, want the last state", got)
	}
	api.Start(t)
	sink.WaitFor(t, realWait, func(s registrytest.State) bool { return s.Healthy() })
	ic = istioClient(t, api)
	if err := ic.NetworkingV1().ServiceEntries("shop").Delete(ctx, "pay", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, realWait, func(s registrytest.State) bool { return len(s.Services) == 0 })
}

// TestRealKubernetesOneClusterDownAtRestart: a restart with two clusters,
// east answering and west's API server unreachable. Publishing east's
// objects alone would drop west's services from the state served
// (restored): nothing is published, not even a hold-down confirmation,
// for twice the confirmation period; the registry is Degraded naming
// west.
func TestRealKubernetesOneClusterDownAtRestart(t *testing.T) {
	t.Parallel()
	api := servers.StartKubeClusters(t, 1).Servers[0]
	api.InstallIstioCRDs(t)
	api.EnsureNamespace(t, "shop")
	if _, err := istioClient(t, api).NetworkingV1().ServiceEntries("shop").Create(context.Background(), &networkingv1.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: "pay"},
		Spec: apinetworking.ServiceEntry{Hosts: []string{"pay.ext.example"}, Ports: []*apinetworking.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}},
			Resolution: apinetworking.ServiceEntry_STATIC, Endpoints: []*apinetworking.WorkloadEntry{{Address: "10.1.0.1"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	east := &kube.Config{Kubeconfig: api.WriteKubeconfig(t, "east", servers.AdminToken), Context: "east"}
	east.ApplyDefaults()
	westFile := filepath.Join(t.TempDir(), "west")
	if err := os.WriteFile(westFile, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:`+strconv.Itoa(servers.FreePort(t))+`", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: west, context: {cluster: c, user: u}}]
current-context: west
`), 0o600); err != nil {
		t.Fatal(err)
	}
	west := &kube.Config{Kubeconfig: westFile, Context: "west"}
	west.ApplyDefaults()
	c := registries.Common{Name: "vms", Kind: "serviceentry", Domain: "ext.example"}
	cfg := &Config{Kubernetes: &Kubernetes{Clusters: []string{"east", "west"}, Namespaces: []string{"shop"}}}
	cfg.ApplyDefaults()
	cfg.UseClusters(map[string]registries.Config{"east": east, "west": west})
	reg, err := cfg.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := reg.(*Registry)
	const confirm = 300 * time.Millisecond
	r.confirmAfter = confirm

	sink := registrytest.NewSink()
	prior := []model.Service{
		{Hostname: "pay.ext.example", Ports: []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}}, Endpoints: []model.Endpoint{{Address: "10.1.0.1"}}},
		{Hostname: "ship.ext.example", Ports: []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}}, Endpoints: []model.Endpoint{{Address: "10.2.0.1"}}},
	}
	sink.Publish(c.Shard(), registries.FullState(prior, nil)) // restored: ship comes from west
	defer registrytest.Start(t, r, sink)()
	sink.WaitForShard(t, c.Shard(), realWait, func(s registrytest.State) bool {
		return s.Failing() && strings.Contains(s.Status.Err, "cluster west")
	})
	time.Sleep(3 * confirm)
	// Only partial states (which the aggregator holds as the Run's first
	// while it serves the restored one) and no confirmation re-send.
	st := sink.State(c.Shard())
	for i, u := range st.Updates[1:] {
		if u.HasState && (u.Complete || !u.Failing()) {
			t.Fatalf("update #%d published a complete state while west is unreachable: %s", i+2, st)
		}
	}
}

// TestRealKubernetesOneEventOneCheck: with a ServiceEntry selecting 50
// WorkloadEntries served, updating one WorkloadEntry converts (clones)
// and checks that one only, through the real informers.
func TestRealKubernetesOneEventOneCheck(t *testing.T) {
	t.Parallel()
	api := servers.StartKubeClusters(t, 1).Servers[0]
	api.InstallIstioCRDs(t)
	api.EnsureNamespace(t, "shop")
	ic := istioClient(t, api)
	ctx := context.Background()
	if _, err := ic.NetworkingV1().ServiceEntries("shop").Create(ctx, &networkingv1.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: "pay"},
		Spec: apinetworking.ServiceEntry{Hosts: []string{"pay.ext.example"}, Ports: []*apinetworking.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}},
			Resolution: apinetworking.ServiceEntry_STATIC, WorkloadSelector: &apinetworking.WorkloadSelector{Labels: map[string]string{"app": "pay"}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := range n {
		if _, err := ic.NetworkingV1().WorkloadEntries("shop").Create(ctx, &networkingv1.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("vm-%02d", i)},
			Spec: apinetworking.WorkloadEntry{Address: fmt.Sprintf("10.1.0.%d", i+1), Labels: map[string]string{"app": "pay"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r, _ := kubeRegistry(t, api)
	sink := registrytest.NewSink()
	stop := registrytest.Start(t, r, sink)
	defer stop()
	sink.WaitFor(t, realWait, func(s registrytest.State) bool { return len(endpointsOf(s.Services, "pay.ext.example")) == n })
	checked0, conv0 := r.kubeChecked.Load(), r.kubeWatch.Load().Conversions()
	if checked0 != n+1 || conv0 != n+1 {
		t.Errorf("first sync converted %d and checked %d objects, want %d", conv0, checked0, n+1)
	}

	we, err := ic.NetworkingV1().WorkloadEntries("shop").Get(ctx, "vm-17", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	we.Spec.Address = "10.2.0.17"
	if _, err := ic.NetworkingV1().WorkloadEntries("shop").Update(ctx, we, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, realWait, func(s registrytest.State) bool {
		return slices.Contains(endpointsOf(s.Services, "pay.ext.example"), "10.2.0.17")
	})
	checked, conv := r.kubeChecked.Load()-checked0, r.kubeWatch.Load().Conversions()-conv0
	t.Logf("one update among %d objects: %d converted, %d checked", n+1, conv, checked)
	if checked != 1 || conv != 1 {
		t.Errorf("one update converted %d and checked %d objects, want 1 and 1", conv, checked)
	}

	// ServiceEntries: updating one among n converts (clones), checks,
	// converts to a service and compares that one only.
	for i := range n {
		if _, err := ic.NetworkingV1().ServiceEntries("shop").Create(ctx, &networkingv1.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("se-%02d", i)},
			Spec: apinetworking.ServiceEntry{Hosts: []string{fmt.Sprintf("se-%02d.ext.example", i)}, Ports: []*apinetworking.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}},
				Resolution: apinetworking.ServiceEntry_STATIC, Endpoints: []*apinetworking.WorkloadEntry{{Address: fmt.Sprintf("10.3.0.%d", i+1)}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sink.WaitFor(t, realWait, func(s registrytest.State) bool { return len(s.Services) == n+1 })
	checked0, conv0 = r.kubeChecked.Load(), r.kubeWatch.Load().Conversions()
	_, svc0, cmp0 := r.Work()
	se, err := ic.NetworkingV1().ServiceEntries("shop").Get(ctx, "se-33", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	se.Spec.Endpoints[0].Address = "10.4.0.33"
	if _, err := ic.NetworkingV1().ServiceEntries("shop").Update(ctx, se, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, realWait, func(s registrytest.State) bool {
		return slices.Equal(endpointsOf(s.Services, "se-33.ext.example"), []string{"10.4.0.33"})
	})
	_, svc, cmp := r.Work()
	checked, conv = r.kubeChecked.Load()-checked0, r.kubeWatch.Load().Conversions()-conv0
	svc, cmp = svc-svc0, cmp-cmp0
	t.Logf("one ServiceEntry update among %d objects: %d cloned, %d checked, %d converted, %d compared", 2*n+1, conv, checked, svc, cmp)
	if checked != 1 || conv != 1 || svc != 1 || cmp != 1 {
		t.Errorf("one ServiceEntry update: %d cloned, %d checked, %d converted, %d compared; want 1 each", conv, checked, svc, cmp)
	}
}
