package kube

// Tests against real kube-apiservers (tools/testservers builds them; see
// test/servers). There is no controller manager: the tests create the
// EndpointSlices, with documentation addresses (192.0.2.0/24), since the
// API server rejects loopback ones.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
	"github.com/meshfed/meshfed/test/servers"
)

// realTimeout bounds waits on real servers.
const realTimeout = 60 * time.Second

// errOf drops a call's result, for created(t, errOf(client.Create(...))).
func errOf[T any](_ T, err error) error { return err }

// created fails t unless err is nil or AlreadyExists.
func created(t *testing.T, err error) {
	t.Helper()
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// seed creates namespace shop with a node, a pod and the service orders
// whose slice holds addrs (ready) on node-a.
func seed(t *testing.T, cs kubernetes.Interface, addrs ...string) {
	t.Helper()
	ctx := context.Background()
	created(t, errOf(cs.CoreV1().Namespaces().Create(ctx, nsObj("shop", nil), metav1.CreateOptions{})))
	created(t, errOf(cs.CoreV1().Nodes().Create(ctx, nodeObj("node-a", "eu-west", "eu-west-1a"), metav1.CreateOptions{})))
	pod := podObj("shop", "orders-1", map[string]string{"app": "orders", "version": "v1"})
	pod.Spec.Containers = []corev1.Container{{Name: "app", Image: "example.invalid/orders"}}
	created(t, errOf(cs.CoreV1().Pods("shop").Create(ctx, pod, metav1.CreateOptions{})))
	created(t, errOf(cs.CoreV1().Services("shop").Create(ctx, svcObj("shop", "orders", func(s *corev1.Service) { s.Spec.ClusterIP = "" },
		svcPort("grpc", 8080)), metav1.CreateOptions{})))
	setSlice(t, cs, "orders-1", addrs...)
}

// setSlice creates or replaces slice name of service orders with addrs,
// all ready, the first one backed by pod orders-1 on node-a.
func setSlice(t *testing.T, cs kubernetes.Interface, name string, addrs ...string) {
	t.Helper()
	ctx := context.Background()
	var eps []epSpec
	for i, a := range addrs {
		e := epSpec{addr: a, ready: ptr.To(true)}
		if i == 0 {
			e.node, e.pod = "node-a", "orders-1"
		}
		eps = append(eps, e)
	}
	s := sliceObj("shop", name, "orders", discoveryv1.AddressTypeIPv4, map[string]int32{"grpc": 18080}, eps...)
	old, err := cs.DiscoveryV1().EndpointSlices("shop").Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		s.ResourceVersion = old.ResourceVersion
		_, err = cs.DiscoveryV1().EndpointSlices("shop").Update(ctx, s, metav1.UpdateOptions{})
	} else if apierrors.IsNotFound(err) {
		_, err = cs.DiscoveryV1().EndpointSlices("shop").Create(ctx, s, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

func healthy(addrs ...string) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a + "=HEALTHY"
	}
	return out
}

// registryFor builds a registry named name from a kubeconfig file, as
// clusters.yaml would.
func registryFor(t *testing.T, name, kubeconfig string, mut func(*Config)) registries.Registry {
	t.Helper()
	c := &Config{Kubeconfig: kubeconfig, Context: name}
	if mut != nil {
		mut(c)
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	reg, err := c.New(common(name), nil)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestRealRBACIsEnough runs the registry with the token of the
// ServiceAccount that the Helm chart creates and binds (its RBAC objects,
// as deploy/kubernetes/meshfed.yaml holds them rendered: release meshfed
// in namespace meshfed, secretDiscovery there): it syncs and follows
// changes, and the roles grant nothing beyond reading.
func TestRealRBACIsEnough(t *testing.T) {
	t.Parallel()
	api := servers.StartKubeClusters(t, 1).Servers[0]
	admin := api.Client(t, servers.AdminToken)
	manifest, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", "meshfed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	api.EnsureNamespace(t, "meshfed")
	api.Apply(t, rbacOnly(t, manifest))
	token := api.ServiceAccountToken(t, "meshfed", "meshfed")
	seed(t, admin, "192.0.2.1")

	kubeconfig := api.WriteKubeconfig(t, "east", token)
	sink := registrytest.NewSink()
	registrytest.Start(t, registryFor(t, "east", kubeconfig, func(c *Config) {
		c.NamespaceSelector = "kubernetes.io/metadata.name in (shop)"
		c.SecretDiscovery = &SecretDiscovery{Namespace: "meshfed"}
	}), sink)
	st := sink.WaitFor(t, realTimeout, hasAddrs("orders.shop.svc.cluster.local", healthy("192.0.2.1")...))
	s, _ := find(st.Services, "orders.shop.svc.cluster.local")
	if e := s.Endpoints[0]; e.Labels["version"] != "v1" || e.Locality != (model.Locality{Region: "eu-west", Zone: "eu-west-1a"}) || e.Ports["grpc"] != 18080 {
		t.Errorf("endpoint = %+v, want pod labels, node locality and the target port", e)
	}
	for _, r := range st.Reports {
		if r.Failing() {
			t.Errorf("reported %v with the deployed RBAC", r)
		}
	}

	// Nothing more than reading: no writes, no secrets outside the
	// secretDiscovery namespace, nothing of other kinds.
	reader := api.Client(t, token)
	ctx := context.Background()
	forbidden := map[string]error{}
	_, forbidden["create service"] = reader.CoreV1().Services("shop").Create(ctx, svcObj("shop", "x", nil, svcPort("http", 80)), metav1.CreateOptions{})
	_, forbidden["list secrets in shop"] = reader.CoreV1().Secrets("shop").List(ctx, metav1.ListOptions{})
	_, forbidden["list configmaps"] = reader.CoreV1().ConfigMaps("shop").List(ctx, metav1.ListOptions{})
	forbidden["delete pod"] = reader.CoreV1().Pods("shop").Delete(ctx, "orders-1", metav1.DeleteOptions{})
	for what, err := range forbidden {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s with the reader's token: %v, want Forbidden", what, err)
		}
	}
}

// rbacOnly keeps the ServiceAccount and RBAC documents of a manifest.
func rbacOnly(t *testing.T, manifest []byte) []byte {
	t.Helper()
	var out []string
	for _, doc := range strings.Split(string(manifest), "\n---\n") {
		for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
			if strings.Contains(doc, "\nkind: "+kind+"\n") {
				out = append(out, doc)
			}
		}
	}
	if len(out) < 5 {
		t.Fatalf("manifest has %d RBAC documents, want ServiceAccount, ClusterRole(Binding), Role(Binding)", len(out))
	}
	return []byte(strings.Join(out, "\n---\n"))
}

// TestRealOutage stops the API server the registry talks to: Degraded with
// the last state kept; a change made meanwhile (through a second API
// server of the same cluster) shows up once it is back, Synced.
func TestRealOutage(t *testing.T) {
	t.Parallel()
	etcd := servers.StartEtcd(t)
	api := servers.StartKubeAPIServer(t, etcd, "/outage")
	other := servers.StartKubeAPIServer(t, etcd, "/outage") // same cluster, HA style
	seed(t, api.Client(t, servers.AdminToken), "192.0.2.1")

	sink := registrytest.NewSink()
	registrytest.Start(t, registryFor(t, "east", api.WriteKubeconfig(t, "east", servers.AdminToken), nil), sink)
	const host = "orders.shop.svc.cluster.local"
	sink.WaitFor(t, realTimeout, hasAddrs(host, healthy("192.0.2.1")...))
	replaces := sink.Replaces(shard("east"))

	api.Stop(t)
	st := sink.WaitFor(t, realTimeout, func(st registrytest.State) bool { return st.Failing() })
	if st.Replaces != replaces || !hasAddrs(host, healthy("192.0.2.1")...)(st) {
		t.Errorf("state changed while the API server is down: %s", st)
	}
	if st.Status.Err == "" {
		t.Error("Degraded without a reason")
	}
	setSlice(t, other.Client(t, servers.AdminToken), "orders-1", "192.0.2.1", "192.0.2.2")

	api.Start(t)
	st = sink.WaitFor(t, realTimeout, func(st registrytest.State) bool {
		return st.Healthy() && hasAddrs(host, healthy("192.0.2.1", "192.0.2.2")...)(st)
	})
	if p := sink.Problems(); len(p) > 0 {
		t.Error(p)
	}
	// Between the first sync and the end, the service was never published
	// without its first endpoint.
	for _, r := range st.Reports {
		if r.Failing() && !r.Failing() {
			t.Errorf("reported %v", r)
		}
	}
}

// TestRealRestartsHealPromptly SIGKILLs the API server and restarts it
// on the same etcd, five times in a row, and changes the slice as soon as
// it is back each time: every change is published within restartHeal.
// Each restart advances the reflectors' retry backoff several times
// (refused watches, 429 while the new server's watch cache starts, 410
// "too old resource version"); with client-go's shared informers the
// relist then waited 13–82 s by the third round (30–60 s per wait at
// their cap), with kubeclient.RetryBackoff at most 7.5 s per wait
// (docs/registries/kubernetes.md#outages).
func TestRealRestartsHealPromptly(t *testing.T) {
	t.Parallel()
	const restartHeal = 30 * time.Second // generous: measured 1–7 s
	etcd := servers.StartEtcd(t)
	api := servers.StartKubeAPIServer(t, etcd, "/restarts")
	seed(t, api.Client(t, servers.AdminToken), "192.0.2.1")
	sink := registrytest.NewSink()
	registrytest.Start(t, registryFor(t, "west", api.WriteKubeconfig(t, "west", servers.AdminToken), nil), sink)
	const host = "orders.shop.svc.cluster.local"
	sink.WaitFor(t, realTimeout, hasAddrs(host, healthy("192.0.2.1")...))
	for i := range 5 {
		api.Process().Kill()
		<-api.Process().Exited()
		time.Sleep(2 * time.Second) // down a while: refused watches
		api.Start(t)
		addr := fmt.Sprintf("192.0.2.%d", 10+i)
		setSlice(t, api.Client(t, servers.AdminToken), "orders-1", addr)
		changed := time.Now()
		sink.WaitFor(t, realTimeout, func(st registrytest.State) bool {
			return st.Healthy() && hasAddrs(host, healthy(addr)...)(st)
		})
		if d := time.Since(changed); d > restartHeal {
			t.Errorf("restart %d: a change made right after it was published after %s (bound %s)", i+1, d.Round(time.Second), restartHeal)
		}
	}
	if p := sink.Problems(); len(p) > 0 {
		t.Error(p)
	}
}

// TestRealRemoteClusterThroughSecret adds and removes a remote cluster by a
// Secret in the first cluster, with a real kubeconfig of the second.
func TestRealRemoteClusterThroughSecret(t *testing.T) {
	t.Parallel()
	kc := servers.StartKubeClusters(t, 2)
	east, west := kc.Servers[0], kc.Servers[1]
	seed(t, east.Client(t, servers.AdminToken), "192.0.2.1")
	seed(t, west.Client(t, servers.AdminToken), "192.0.2.2")
	east.EnsureNamespace(t, "istio-system")

	sink := registrytest.NewSink()
	launcher := newTestLauncher(sink, "east")
	reg := registryFor(t, "east", east.WriteKubeconfig(t, "east", servers.AdminToken), func(c *Config) { c.SecretDiscovery = &SecretDiscovery{} }).(*Registry)
	reg.SetLauncher(launcher)
	t.Cleanup(reg.stopAll)
	registrytest.Start(t, reg, sink)
	const host = "orders.shop.svc.cluster.local"
	sink.WaitForShard(t, shard("east"), realTimeout, hasAddrs(host, healthy("192.0.2.1")...))

	secrets := east.Client(t, servers.AdminToken).CoreV1().Secrets("istio-system")
	ctx := context.Background()
	if _, err := secrets.Create(ctx, remoteSecret("istio-remote-secret-west", nil, map[string][]byte{
		"west": west.Kubeconfig(t, "west", servers.AdminToken),
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sink.WaitForShard(t, shard("west"), realTimeout, hasAddrs(host, healthy("192.0.2.2")...))

	// The remote registry follows its cluster.
	setSlice(t, west.Client(t, servers.AdminToken), "orders-1", "192.0.2.2", "192.0.2.3")
	sink.WaitForShard(t, shard("west"), realTimeout, hasAddrs(host, healthy("192.0.2.2", "192.0.2.3")...))

	if err := secrets.Delete(ctx, "istio-remote-secret-west", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, stopped := launcher.state(); return slices.Equal(stopped, []string{"west"}) })
}

// TestRealConformance checks the Registry contract against a real API
// server.
func TestRealConformance(t *testing.T) {
	t.Parallel()
	api := servers.StartKubeClusters(t, 1).Servers[0]
	admin := api.Client(t, servers.AdminToken)
	seed(t, admin, "192.0.2.1")
	kubeconfig := api.WriteKubeconfig(t, "east", servers.AdminToken)
	registrytest.Conformance(t, func(t *testing.T) registries.Registry {
		return registryFor(t, "east", kubeconfig, nil)
	}, registrytest.Mutation{
		Name:  "scale the slice to two endpoints",
		Apply: func(t *testing.T) { setSlice(t, admin, "orders-1", "192.0.2.1", "192.0.2.9") },
		Want: func(s []model.Service) bool {
			return hasAddrs("orders.shop.svc.cluster.local", healthy("192.0.2.1", "192.0.2.9")...)(registrytest.State{Services: s})
		},
	}, registrytest.Mutation{
		Name:  "scale it to zero",
		Apply: func(t *testing.T) { setSlice(t, admin, "orders-1") },
		Want: func(s []model.Service) bool {
			return hasAddrs("orders.shop.svc.cluster.local")(registrytest.State{Services: s})
		},
	})
}
