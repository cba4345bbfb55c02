package s6

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/kubeclient/kubeclienttest"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/kube"
	"github.com/meshfed/meshfed/test/servers"
)

// KS row of the kubernetes registry: a real kube-apiserver holding
// services Services, each with one EndpointSlice of 10 endpoints backed by
// Pods on Nodes (kubeclienttest.Catalog: objects as controllers write
// them, pod statuses included); the registry at its defaults watches
// everything cluster wide. Each change replaces the address of one
// endpoint of one service (a JSON patch of its EndpointSlice, as when a
// pod is replaced), on a different service each time.
func init() {
	kindScaleRows = append(kindScaleRows, bench.KindScaleRow{Kind: "kubernetes", Goal: 50 * time.Millisecond, Setup: kubeScaleSetup,
		Note: "registries/kube at its defaults (informers on Services, EndpointSlices, Pods, Nodes cluster wide, with the slimming transform)"})
}

// kubeLoadClient is a clientset for loading fixtures: no client-side
// rate limit, protobuf, its connections closed in t.Cleanup.
func kubeLoadClient(t testing.TB, api *servers.KubeAPIServer) kubernetes.Interface {
	d := connrotation.NewDialer((&net.Dialer{Timeout: 10 * time.Second}).DialContext)
	t.Cleanup(d.CloseAll)
	cs, err := kubernetes.NewForConfig(&rest.Config{
		Host: api.URL, BearerToken: servers.AdminToken, TLSClientConfig: rest.TLSClientConfig{CAData: api.CA},
		Dial: d.DialContext, QPS: -1, ContentConfig: rest.ContentConfig{ContentType: "application/vnd.kubernetes.protobuf"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func kubeScaleSetup(t testing.TB, services int) bench.KindScaleTarget {
	api := servers.StartKubeClusters(t, 1).Servers[0]
	cs := kubeLoadClient(t, api)
	cat := kubeclienttest.Catalog{Services: services, PodStatus: true}
	t0 := time.Now()
	if err := cat.Load(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	load := time.Since(t0)
	const domain = "svc.cluster.local"
	c := registries.Common{Name: "east", Kind: "kubernetes", Domain: domain}
	reg := newRegistry(t, &kube.Config{Kubeconfig: api.WriteKubeconfig(t, "east", servers.AdminToken)}, c)
	return bench.KindScaleTarget{Load: load, Services: services, Endpoints: cat.Endpoints(), Run: bench.RegistryRun(reg),
		Note: fmt.Sprintf("fixture: %d services, %d EndpointSlices, %d pods (with status), %d nodes, written by 32 parallel clients", services, services, cat.Endpoints(), max(3, cat.Endpoints()/100)),
		Change: func(ctx context.Context, n int) (bench.ScaleChange, error) {
			i := (n * 7919) % services
			addr := fmt.Sprintf("10.%d.%d.%d", 200+n>>16&31, n>>8&255, n&255)
			patch := fmt.Sprintf(`[{"op":"replace","path":"/endpoints/0/addresses/0","value":%q}]`, addr)
			_, err := cs.DiscoveryV1().EndpointSlices(cat.Namespace(i)).Patch(ctx, cat.Name(i)+"-x7k2p", types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
			return bench.ScaleChange{Host: cat.Host(i, domain), Value: addr}, err
		}}
}
