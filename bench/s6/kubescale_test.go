package s6

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

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
		Note: "registries/kube at its defaults (informers on Services, EndpointSlices, Pods, Nodes cluster wide, with the slimming transform; Pods and Nodes as metadata only)"})
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
	kc := servers.StartKubeClusters(t, 1)
	api := kc.Servers[0]
	cs := kubeLoadClient(t, api)
	cat := kubeclienttest.Catalog{Services: services, PodStatus: true}
	t0 := time.Now()
	if err := cat.LoadDirect(context.Background(), cs, kc.Etcd.URL, api.Prefix); err != nil {
		t.Fatal(err)
	}
	load := time.Since(t0)
	const domain = "svc.cluster.local"
	c := registries.Common{Name: "east", Kind: "kubernetes", Domain: domain}
	reg := newRegistry(t, &kube.Config{Kubeconfig: api.WriteKubeconfig(t, "east", servers.AdminToken)}, c)
	var sum0 float64
	var n0 uint64
	var ev0 map[string]float64
	return bench.KindScaleTarget{Load: load, Services: services, Endpoints: cat.Endpoints(), Run: bench.RegistryRun(reg),
		After: func() string {
			sum, n := ingestLatency(t, c.Name)
			if n == n0 {
				return ""
			}
			var evs []string
			for k, v := range informerEvents(t, c.Name) {
				if d := v - ev0[k]; d > 0 {
					evs = append(evs, fmt.Sprintf("%s %.0f", k, d))
				}
			}
			slices.Sort(evs)
			return fmt.Sprintf("of which inside the registry (informer event → Sink.Publish, its ingest-latency metric) %.1f ms on average over %d publishes; informer events meanwhile: %s",
				(sum-sum0)*1e3/float64(n-n0), n-n0, strings.Join(evs, ", "))
		},
		Note: fmt.Sprintf("fixture: %d services, %d EndpointSlices, %d pods (with status), %d nodes, written straight into etcd (kubeclienttest.Catalog.LoadDirect: as the API server stores them, server-set fields taken from objects written through it)", services, services, cat.Endpoints(), max(3, cat.Endpoints()/100)),
		Change: func(ctx context.Context, n int) (bench.ScaleChange, error) {
			if n == 1 {
				sum0, n0 = ingestLatency(t, c.Name)
				ev0 = informerEvents(t, c.Name)
			}
			i := (n * 7919) % services
			addr := fmt.Sprintf("10.%d.%d.%d", 200+n>>16&31, n>>8&255, n&255)
			patch := fmt.Sprintf(`[{"op":"replace","path":"/endpoints/0/addresses/0","value":%q}]`, addr)
			_, err := cs.DiscoveryV1().EndpointSlices(cat.Namespace(i)).Patch(ctx, cat.SliceName(i), types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
			return bench.ScaleChange{Host: cat.Host(i, domain), Value: addr}, err
		}}
}

// series returns the series of metric name among collectors whose
// label registry is registry, each with its labels.
func series(t testing.TB, collectors []prometheus.Collector, name, registry string) (out []*dto.Metric, labels []map[string]string) {
	reg := prometheus.NewRegistry()
	for _, c := range collectors {
		reg.MustRegister(c)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Logf("gather: %v", err)
		return nil, nil
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["registry"] == registry {
				out, labels = append(out, m), append(labels, l)
			}
		}
	}
	return out, labels
}

// informerEvents reads registry's meshfed_kube_informer_events_total by
// "resource event".
func informerEvents(t testing.TB, registry string) map[string]float64 {
	ms, ls := series(t, kube.Collectors(), "meshfed_kube_informer_events_total", registry)
	out := map[string]float64{}
	for i, m := range ms {
		out[ls[i]["resource"]+" "+ls[i]["event"]] = m.GetCounter().GetValue()
	}
	return out
}

// ingestLatency reads registry's meshfed_registry_ingest_latency_seconds
// (sum in seconds, count).
func ingestLatency(t testing.TB, registry string) (float64, uint64) {
	ms, _ := series(t, registries.Collectors(), "meshfed_registry_ingest_latency_seconds", registry)
	if len(ms) == 0 {
		return 0, 0
	}
	return ms[0].GetHistogram().GetSampleSum(), ms[0].GetHistogram().GetSampleCount()
}
