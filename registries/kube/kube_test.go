package kube

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/meshfed/meshfed/kubeclient/kubeclienttest"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
	"github.com/meshfed/meshfed/test/servers"
)

const waitTimeout = 10 * time.Second

func common(name string) registries.Common {
	return registries.Common{Name: name, Kind: "kubernetes", Domain: "svc.cluster.local"}
}

func shard(name string) model.ShardKey { return common(name).Shard() }

func nsObj(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func podObj(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
}

func nodeObj(name, region, zone string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labelRegion: region, labelZone: zone}}}
}

// find returns the service with host from a published list.
func find(services []model.Service, host string) (model.Service, bool) {
	for _, s := range services {
		if s.Hostname == host {
			return s, true
		}
	}
	return model.Service{}, false
}

func addrs(s model.Service) []string {
	var out []string
	for _, e := range s.Endpoints {
		out = append(out, e.Address+"="+e.Health.String())
	}
	slices.Sort(out)
	return out
}

// hasAddrs is a wait condition: host is published with exactly these
// address=HEALTH entries.
func hasAddrs(host string, want ...string) func(registrytest.State) bool {
	return func(st registrytest.State) bool {
		s, ok := find(st.Services, host)
		return ok && slices.Equal(addrs(s), want)
	}
}

func ordersFixture() []runtime.Object {
	T := ptr.To(true)
	return []runtime.Object{
		nsObj("shop", nil),
		nodeObj("node-a", "eu-west", "eu-west-1a"),
		podObj("shop", "orders-1", map[string]string{"app": "orders", "version": "v1"}),
		svcObj("shop", "orders", nil, svcPort("grpc", 8080)),
		sliceObj("shop", "orders-1", "orders", discoveryv1.AddressTypeIPv4, map[string]int32{"grpc": 18080},
			epSpec{addr: "192.0.2.1", ready: T, node: "node-a", pod: "orders-1"}),
	}
}

func startFake(t *testing.T, name string, cfg Config, cs *fake.Clientset) *registrytest.Sink {
	t.Helper()
	sink := registrytest.NewSink()
	registrytest.Start(t, NewForClient(common(name), cfg, cs, nil), sink)
	return sink
}

func TestPublishesServicesWithPodLabelsAndNodeLocality(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset(ordersFixture()...)
	sink := startFake(t, "east", Config{Network: "east-net"}, cs)
	st := sink.WaitFor(t, waitTimeout, registrytest.State.Synced)
	want := []model.Service{{
		Hostname:  "orders.shop.svc.cluster.local",
		Namespace: "shop",
		Ports:     []model.Port{{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}},
		Endpoints: []model.Endpoint{{
			Address: "192.0.2.1", Ports: map[string]uint32{"grpc": 18080},
			Labels:   map[string]string{"app": "orders", "version": "v1"},
			Locality: model.Locality{Region: "eu-west", Zone: "eu-west-1a"},
			Weight:   1, // filled by the Publisher (registries.Common.FillDefaults)
			Source:   model.Source{Registry: "east", Cluster: "east", Network: "east-net"},
			Origin:   "Pod shop/orders-1",
		}},
	}}
	if d := registrytest.DiffServices(want, st.Services); d != "" {
		t.Errorf("published (-want +got):\n%s", d)
	}
	if st.Replaces != 1 {
		t.Errorf("%d Replace calls for the initial state, want 1", st.Replaces)
	}
	if p := sink.Problems(); len(p) > 0 {
		t.Error(p)
	}
}

func TestFollowsChanges(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cs := fake.NewClientset(ordersFixture()...)
	sink := startFake(t, "east", Config{}, cs)
	const host = "orders.shop.svc.cluster.local"
	sink.WaitFor(t, waitTimeout, hasAddrs(host, "192.0.2.1=HEALTHY"))

	slice := func(eps ...epSpec) *discoveryv1.EndpointSlice {
		return sliceObj("shop", "orders-1", "orders", discoveryv1.AddressTypeIPv4, map[string]int32{"grpc": 18080}, eps...)
	}
	T, F := ptr.To(true), ptr.To(false)
	for _, step := range []struct {
		name  string
		apply func() error
		want  func(registrytest.State) bool
	}{
		{
			name: "endpoint added",
			apply: func() error {
				_, err := cs.DiscoveryV1().EndpointSlices("shop").Update(ctx, slice(
					epSpec{addr: "192.0.2.1", ready: T, node: "node-a", pod: "orders-1"},
					epSpec{addr: "192.0.2.2", ready: T}), metav1.UpdateOptions{})
				return err
			},
			want: hasAddrs(host, "192.0.2.1=HEALTHY", "192.0.2.2=HEALTHY"),
		},
		{
			name: "readiness flips to terminating",
			apply: func() error {
				_, err := cs.DiscoveryV1().EndpointSlices("shop").Update(ctx, slice(
					epSpec{addr: "192.0.2.1", ready: T, node: "node-a", pod: "orders-1"},
					epSpec{addr: "192.0.2.2", ready: F, serving: T, terminating: T}), metav1.UpdateOptions{})
				return err
			},
			want: hasAddrs(host, "192.0.2.1=HEALTHY", "192.0.2.2=DRAINING"),
		},
		{
			name: "pod labels change",
			apply: func() error {
				_, err := cs.CoreV1().Pods("shop").Update(ctx, podObj("shop", "orders-1", map[string]string{"app": "orders", "version": "v2"}), metav1.UpdateOptions{})
				return err
			},
			want: func(st registrytest.State) bool {
				s, ok := find(st.Services, host)
				return ok && len(s.Endpoints) == 2 && s.Endpoints[0].Labels["version"] == "v2"
			},
		},
		{
			name: "node moves zone",
			apply: func() error {
				_, err := cs.CoreV1().Nodes().Update(ctx, nodeObj("node-a", "eu-west", "eu-west-1b"), metav1.UpdateOptions{})
				return err
			},
			want: func(st registrytest.State) bool {
				s, ok := find(st.Services, host)
				return ok && len(s.Endpoints) == 2 && s.Endpoints[0].Locality.Zone == "eu-west-1b"
			},
		},
		{
			name: "exportTo annotation edited (nothing else)",
			apply: func() error {
				svc, err := cs.CoreV1().Services("shop").Get(ctx, "orders", metav1.GetOptions{})
				if err != nil {
					return err
				}
				svc.Annotations = map[string]string{annotationExportTo: "."}
				_, err = cs.CoreV1().Services("shop").Update(ctx, svc, metav1.UpdateOptions{})
				return err
			},
			want: func(st registrytest.State) bool {
				s, ok := find(st.Services, host)
				return ok && slices.Equal(s.ExportTo, []string{"."})
			},
		},
		{
			name: "second service",
			apply: func() error {
				if _, err := cs.CoreV1().Services("shop").Create(ctx, svcObj("shop", "cart", nil, svcPort("http", 80)), metav1.CreateOptions{}); err != nil {
					return err
				}
				_, err := cs.DiscoveryV1().EndpointSlices("shop").Create(ctx, sliceObj("shop", "cart-x", "cart", discoveryv1.AddressTypeIPv4,
					map[string]int32{"http": 8080}, epSpec{addr: "192.0.2.20"}), metav1.CreateOptions{})
				return err
			},
			want: hasAddrs("cart.shop.svc.cluster.local", "192.0.2.20=HEALTHY"),
		},
		{
			name: "slice scaled to zero keeps the service",
			apply: func() error {
				_, err := cs.DiscoveryV1().EndpointSlices("shop").Update(ctx, slice(), metav1.UpdateOptions{})
				return err
			},
			want: func(st registrytest.State) bool { s, ok := find(st.Services, host); return ok && len(s.Endpoints) == 0 },
		},
		{
			name: "service deleted",
			apply: func() error {
				return cs.CoreV1().Services("shop").Delete(ctx, "orders", metav1.DeleteOptions{})
			},
			want: func(st registrytest.State) bool {
				_, ok := find(st.Services, host)
				_, cart := find(st.Services, "cart.shop.svc.cluster.local")
				return !ok && cart
			},
		},
	} {
		if err := step.apply(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		sink.WaitFor(t, waitTimeout, step.want)
	}
	if p := sink.Problems(); len(p) > 0 {
		t.Error(p)
	}
}

func TestNamespaceSelection(t *testing.T) {
	t.Parallel()
	objs := func() []runtime.Object {
		return []runtime.Object{
			nsObj("a", map[string]string{"mesh": "on"}), nsObj("b", nil), nsObj("c", nil),
			svcObj("a", "s", nil, svcPort("http", 80)),
			svcObj("b", "s", nil, svcPort("http", 80)),
			svcObj("c", "s", nil, svcPort("http", 80)),
		}
	}
	hosts := func(st registrytest.State) []string {
		var out []string
		for _, s := range st.Services {
			out = append(out, s.Hostname)
		}
		slices.Sort(out)
		return out
	}
	t.Run("list", func(t *testing.T) {
		t.Parallel()
		sink := startFake(t, "east", Config{Namespaces: []string{"a", "c"}}, fake.NewClientset(objs()...))
		st := sink.WaitFor(t, waitTimeout, registrytest.State.Synced)
		if got, want := hosts(st), []string{"s.a.svc.cluster.local", "s.c.svc.cluster.local"}; !slices.Equal(got, want) {
			t.Errorf("hosts = %v, want %v", got, want)
		}
	})
	t.Run("selector follows namespace labels", func(t *testing.T) {
		t.Parallel()
		cs := fake.NewClientset(objs()...)
		sink := startFake(t, "east", Config{NamespaceSelector: "mesh=on"}, cs)
		st := sink.WaitFor(t, waitTimeout, registrytest.State.Synced)
		if got, want := hosts(st), []string{"s.a.svc.cluster.local"}; !slices.Equal(got, want) {
			t.Errorf("hosts = %v, want %v", got, want)
		}
		if _, err := cs.CoreV1().Namespaces().Update(t.Context(), nsObj("b", map[string]string{"mesh": "on"}), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Namespaces().Update(t.Context(), nsObj("a", nil), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		sink.WaitFor(t, waitTimeout, func(st registrytest.State) bool {
			return slices.Equal(hosts(st), []string{"s.b.svc.cluster.local"})
		})
	})
}

func TestRejectionsArePublished(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset(svcObj("x", "udp", nil, corev1.ServicePort{Name: "u", Port: 53, Protocol: corev1.ProtocolUDP}))
	sink := startFake(t, "east", Config{}, cs)
	st := sink.WaitFor(t, waitTimeout, registrytest.State.Synced)
	if len(st.Services) != 0 || len(st.Rejected) != 1 || st.Rejected[0].Host != "udp.x.svc.cluster.local" {
		t.Errorf("services %v, rejected %v; want none and the UDP service rejected", st.Services, st.Rejected)
	}
	if st.Services == nil {
		t.Error("empty state published as a nil slice")
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset(ordersFixture()...)
	n := 0
	registrytest.Conformance(t, func(t *testing.T) registries.Registry {
		n++
		return NewForClient(common(fmt.Sprintf("conformance-%d", n)), Config{}, cs, nil)
	}, registrytest.Mutation{
		Name: "add a service",
		Apply: func(t *testing.T) {
			if _, err := cs.CoreV1().Services("shop").Create(context.Background(), svcObj("shop", "new", nil, svcPort("http", 80)), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		},
		Want: func(s []model.Service) bool { _, ok := find(s, "new.shop.svc.cluster.local"); return ok },
	}, registrytest.Mutation{
		Name: "delete it",
		Apply: func(t *testing.T) {
			if err := cs.CoreV1().Services("shop").Delete(context.Background(), "new", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		},
		Want: func(s []model.Service) bool { _, ok := find(s, "new.shop.svc.cluster.local"); return !ok },
	})
}

// TestUnreachableAPIServer: before the first sync an unreachable API
// server makes the registry Degraded (publishing nothing), with a stable
// message; Run still returns promptly when cancelled.
func TestUnreachableAPIServer(t *testing.T) {
	t.Parallel()
	l := servers.LowListener(t)
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeclienttest.Kubeconfig(t, "https://"+addr, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &Config{Kubeconfig: path}
	c.ApplyDefaults()
	reg, err := c.New(common("east"), nil)
	if err != nil {
		t.Fatal(err)
	}
	sink := registrytest.NewSink()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- reg.Run(ctx, sink) }()
	st := sink.WaitFor(t, waitTimeout, func(st registrytest.State) bool { return st.Failing() })
	if st.Replaces != 0 {
		t.Errorf("published before the first sync: %s", st)
	}
	if msg := st.Status.Err; !strings.Contains(msg, addr) || !strings.Contains(msg, "connection refused") || strings.Contains(msg, "?") {
		t.Errorf("Degraded reason %q, want the API server's address and the cause, without the query", msg)
	}
	time.Sleep(time.Second) // let the reflectors enter their retry backoff
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return within 2s of cancel while the API server is unreachable")
	}
}
