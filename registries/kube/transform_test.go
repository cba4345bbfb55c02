package kube

import (
	"context"
	"flag"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/meshfed/meshfed/kubeclient/kubeclienttest"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
	"github.com/meshfed/meshfed/test/servers"
)

var transformServices = flag.Int("kube.transform.services", 0,
	"TestRealTransformMemory: services (×10 endpoints, pods with status, nodes) to measure the informers' heap with and without the transform at; 0 skips it")

// TestRealTransformKeepsWhatConversionReads runs the registry on objects
// as a cluster holds them (kubeclienttest.Catalog: Helm-labelled services
// with kubectl's last-applied annotation, controller-written slices, pods
// with full specs, statuses and managed fields, nodes with statuses and
// images; and the seed's service) with and without the informers'
// transform: what it publishes is the same. Run with the namespace
// selector too, so that namespaces go through the transform.
func TestRealTransformKeepsWhatConversionReads(t *testing.T) {
	t.Parallel()
	api := servers.StartKubeClusters(t, 1).Servers[0]
	cs := api.Client(t, servers.AdminToken)
	cat := kubeclienttest.Catalog{Services: 12, EndpointsPer: 3, PerNamespace: 5, PodStatus: true, Workers: 4}
	if err := cat.Load(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	seed(t, cs, "192.0.2.1", "192.0.2.2")
	kubeconfig := api.WriteKubeconfig(t, "east", servers.AdminToken)
	want := cat.Endpoints() + 2
	for _, sel := range []string{"", "team in (team-0, team-1, team-2)"} {
		var states [2][]model.Service
		for i, transform := range []bool{true, false} {
			reg := registryFor(t, "east", kubeconfig, func(c *Config) { c.NamespaceSelector = sel }).(*Registry)
			if !transform {
				reg.raw = true
			}
			sink := registrytest.NewSink()
			stop := registrytest.Start(t, reg, sink)
			n := want
			if sel != "" {
				n = cat.Endpoints() // the seed's namespace shop is not selected
			}
			st := sink.WaitFor(t, realTimeout, func(st registrytest.State) bool { return endpoints(st.Services) == n })
			stop()
			states[i] = st.Services
		}
		if len(states[0]) < cat.Services {
			t.Fatalf("selector %q: %d services published", sel, len(states[0]))
		}
		if d := registrytest.DiffServices(states[1], states[0]); d != "" {
			t.Errorf("selector %q: published with the transform differs from without (-without +with):\n%s", sel, d)
		}
	}
}

func endpoints(services []model.Service) int {
	n := 0
	for _, s := range services {
		n += len(s.Endpoints)
	}
	return n
}

// TestRealTransformMemory measures what the transform saves: the live Go
// heap of a running registry synced with a large cluster, with and
// without it (-kube.transform.services; docs/registries/kubernetes.md
// quotes the figures).
func TestRealTransformMemory(t *testing.T) {
	if *transformServices == 0 {
		t.Skip("set -kube.transform.services")
	}
	kc := servers.StartKubeClusters(t, 1)
	api := kc.Servers[0]
	cat := kubeclienttest.Catalog{Services: *transformServices, PodStatus: true}
	t0 := time.Now()
	if err := cat.LoadDirect(context.Background(), api.Client(t, servers.AdminToken), kc.Etcd.URL, api.Prefix); err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded %d services, %d pods in %s", cat.Services, cat.Endpoints(), time.Since(t0).Round(time.Second))
	kubeconfig := api.WriteKubeconfig(t, "east", servers.AdminToken)
	for _, transform := range []bool{true, false} {
		reg := registryFor(t, "east", kubeconfig, nil).(*Registry)
		if !transform {
			reg.raw = true
		}
		before := liveHeap()
		sink := &countSink{want: cat.Endpoints(), done: make(chan struct{})}
		stop := registrytest.Start(t, reg, sink)
		start := time.Now()
		select {
		case <-sink.done:
		case <-time.After(10 * time.Minute):
			t.Fatal("no sync in 10 minutes")
		}
		synced := time.Since(start)
		heap := liveHeap() - before
		stop()
		t.Logf("transform %v: synced in %s, live heap %.1f MB (%.0f B per endpoint)", transform, synced.Round(time.Millisecond),
			float64(heap)/1e6, float64(heap)/float64(cat.Endpoints()))
	}
}

// countSink keeps the last state only and closes done once one holds want
// endpoints.
type countSink struct {
	want int
	once sync.Once
	done chan struct{}
	mu   sync.Mutex
	last []model.Service
}

func (s *countSink) Publish(_ model.ShardKey, u registries.Update) {
	if !u.HasState {
		return
	}
	s.mu.Lock()
	s.last = u.Services
	s.mu.Unlock()
	if endpoints(u.Services) >= s.want {
		s.once.Do(func() { close(s.done) })
	}
}

// liveHeap is the live heap after two GCs.
func liveHeap() int64 {
	runtime.GC()
	debug.FreeOSMemory()
	s := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(s)
	return int64(s[0].Value.Uint64())
}
