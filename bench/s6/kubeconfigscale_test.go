package s6

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apinetworking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/client-go/pkg/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/istioconfig/crd"
	"github.com/meshfed/meshfed/kubeclient"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/kube"
	"github.com/meshfed/meshfed/registries/serviceentry"
	"github.com/meshfed/meshfed/test/servers"
)

// KS rows of what meshfed reads from Kubernetes besides Services: the
// Kubernetes config source (VirtualServices, through istioconfig.Source:
// the published snapshot is the sink) and the serviceentry registry
// reading ServiceEntries from a cluster, at 1,000 and 5,000 objects on a
// real kube-apiserver with Istio's CRDs, 500 objects per namespace. Each
// change updates one object (a JSON merge patch), a different one each
// time.
func init() {
	kindScaleRows = append(kindScaleRows,
		bench.KindScaleRow{Kind: "kubernetes-config", Goal: 50 * time.Millisecond, Sizes: []int{1000, 5000}, Setup: crdScaleSetup,
			Note: "istioconfig/crd at its defaults: VirtualServices (one host, a 90/10 split over two subsets each) → istioconfig.Source's published snapshot; a lone event is read at once, a burst 10 ms after its last event (at most 100 ms after its first); a change of one object is gated alone (istioconfig.(*Source).update)"},
		bench.KindScaleRow{Kind: "serviceentry-kubernetes", Goal: 50 * time.Millisecond, Sizes: []int{1000, 5000}, Setup: seKubeScaleSetup,
			Note: "registries/serviceentry with a kubernetes block: ServiceEntries (STATIC, two endpoints each) → Sink.Publish; a lone event is read at once, a burst 10 ms after its last event (at most 100 ms after its first); one Publisher key per ServiceEntry (keyed)"},
	)
}

const perNamespace = 500

// istioScaleClient is an Istio clientset for loading fixtures, without a
// client-side rate limit.
func istioScaleClient(t testing.TB, api *servers.KubeAPIServer) versioned.Interface {
	cs, err := versioned.NewForConfig(&rest.Config{Host: api.URL, BearerToken: servers.AdminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: api.CA}, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// createAll runs create(i) for i < n on 32 goroutines.
func createAll(t testing.TB, n int, create func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := create(i); err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

func istioScaleServer(t testing.TB, objects int) (*servers.KubeAPIServer, versioned.Interface) {
	api := servers.StartKubeClusters(t, 1).Servers[0]
	api.InstallIstioCRDs(t)
	for n := range (objects + perNamespace - 1) / perNamespace {
		api.EnsureNamespace(t, "ns-"+strconv.Itoa(n))
	}
	return api, istioScaleClient(t, api)
}

func nsOf(i int) string { return "ns-" + strconv.Itoa(i/perNamespace) }

// configState is a published config snapshot as the harness reads it:
// Holds is true when the VirtualService named c.Host has c.Value as its
// first route's name.
type configState struct{ snap *model.ConfigSnapshot }

func (s configState) Size() (int, int) { return len(s.snap.Objects()), 0 }

func (s configState) Holds(c bench.ScaleChange) bool {
	for _, o := range s.snap.Objects() {
		if o.Name == c.Host {
			vs, ok := o.Spec.(*apinetworking.VirtualService)
			return ok && len(vs.GetHttp()) > 0 && vs.GetHttp()[0].GetName() == c.Value
		}
	}
	return false
}

func crdScaleSetup(t testing.TB, objects int) bench.KindScaleTarget {
	api, ic := istioScaleServer(t, objects)
	ctx := context.Background()
	t0 := time.Now()
	createAll(t, objects, func(i int) error {
		host := fmt.Sprintf("svc-%d.%s.svc.cluster.local", i, nsOf(i))
		vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "vs-" + strconv.Itoa(i), Namespace: nsOf(i),
			Labels: map[string]string{"app": "svc-" + strconv.Itoa(i), "app.kubernetes.io/managed-by": "Helm"}}}
		vs.Spec.Hosts = []string{host}
		vs.Spec.Http = []*apinetworking.HTTPRoute{{Name: "initial", Route: []*apinetworking.HTTPRouteDestination{
			{Destination: &apinetworking.Destination{Host: host, Subset: "v1"}, Weight: 90},
			{Destination: &apinetworking.Destination{Host: host, Subset: "v2"}, Weight: 10},
		}}}
		_, err := ic.NetworkingV1().VirtualServices(vs.Namespace).Create(ctx, vs, metav1.CreateOptions{})
		return err
	})
	load := time.Since(t0)
	kubeconfig := api.WriteKubeconfig(t, "east", servers.AdminToken)
	feed := crd.New(crd.Options{Name: "k8s", Clusters: []kubeclient.Cluster{{Name: "east", Connect: func() (*rest.Config, func(), error) {
		return kubeclient.Connect(kubeconfig, "east", kube.DefaultQPS, kube.DefaultBurst)
	}}}})
	src := istioconfig.New(nil, nil, feed)
	return bench.KindScaleTarget{Load: load, Services: objects,
		Note: fmt.Sprintf("fixture: %d VirtualServices created through the API server by 32 parallel clients", objects),
		Run: func(ctx context.Context, sink bench.ScaleSink) error {
			return src.Run(ctx, func(s *model.ConfigSnapshot) { sink.Observe(configState{s}) })
		},
		Change: func(ctx context.Context, n int) (bench.ScaleChange, error) {
			i := (n * 7919) % objects
			name, route := "vs-"+strconv.Itoa(i), "change-"+strconv.Itoa(n)
			patch := fmt.Sprintf(`{"spec":{"http":[{"name":%q,"route":[{"destination":{"host":"svc-%d.%s.svc.cluster.local","subset":"v1"},"weight":%d},{"destination":{"host":"svc-%d.%s.svc.cluster.local","subset":"v2"},"weight":%d}]}]}}`,
				route, i, nsOf(i), 100-n%100, i, nsOf(i), n%100)
			_, err := ic.NetworkingV1().VirtualServices(nsOf(i)).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			return bench.ScaleChange{Host: name, Value: route}, err
		}}
}

func seKubeScaleSetup(t testing.TB, objects int) bench.KindScaleTarget {
	api, ic := istioScaleServer(t, objects)
	ctx := context.Background()
	addr := func(i, j int) string { n := 2*i + j + 1; return fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255) }
	t0 := time.Now()
	createAll(t, objects, func(i int) error {
		se := &networkingv1.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: "se-" + strconv.Itoa(i), Namespace: nsOf(i),
			Labels: map[string]string{"app": "se-" + strconv.Itoa(i), "app.kubernetes.io/managed-by": "Helm"}}}
		se.Spec.Hosts = []string{fmt.Sprintf("se-%d.ext.example", i)}
		se.Spec.Ports = []*apinetworking.ServicePort{{Number: 8080, Name: "http", Protocol: "HTTP"}}
		se.Spec.Resolution = apinetworking.ServiceEntry_STATIC
		se.Spec.Location = apinetworking.ServiceEntry_MESH_INTERNAL
		for j := range 2 {
			se.Spec.Endpoints = append(se.Spec.Endpoints, &apinetworking.WorkloadEntry{Address: addr(i, j), Labels: map[string]string{"version": "v1"}})
		}
		_, err := ic.NetworkingV1().ServiceEntries(se.Namespace).Create(ctx, se, metav1.CreateOptions{})
		return err
	})
	load := time.Since(t0)
	east := &kube.Config{Kubeconfig: api.WriteKubeconfig(t, "east", servers.AdminToken), Context: "east"}
	east.ApplyDefaults()
	c := registries.Common{Name: "vms", Kind: "serviceentry", Domain: "ext.example"}
	cfg := &serviceentry.Config{Kubernetes: &serviceentry.Kubernetes{Clusters: []string{"east"}}}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.UseClusters(map[string]registries.Config{"east": east})
	reg, err := cfg.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	return bench.KindScaleTarget{Load: load, Services: objects, Endpoints: 2 * objects, Run: bench.RegistryRun(reg),
		Note: fmt.Sprintf("fixture: %d ServiceEntries created through the API server by 32 parallel clients", objects),
		Change: func(ctx context.Context, n int) (bench.ScaleChange, error) {
			i := (n * 7919) % objects
			a := fmt.Sprintf("10.%d.%d.%d", 200+n>>16&31, n>>8&255, n&255)
			patch := fmt.Sprintf(`{"spec":{"endpoints":[{"address":%q,"labels":{"version":"v1"}},{"address":%q,"labels":{"version":"v1"}}]}}`, a, addr(i, 1))
			_, err := ic.NetworkingV1().ServiceEntries(nsOf(i)).Patch(ctx, "se-"+strconv.Itoa(i), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			return bench.ScaleChange{Host: fmt.Sprintf("se-%d.ext.example", i), Value: a}, err
		}}
}
