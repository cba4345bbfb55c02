package e2e

// Kubernetes end to end: real kube-apiservers (one etcd, one prefix per
// cluster; no controller manager, so the tests write the EndpointSlices)
// → the meshfed binary → the grpc-go xDS client.
//
// The endpoints use documentation addresses (192.0.2.0/24): the API server
// rejects loopback ones, and on this machine 192.0.2.0/24 is also the real
// network. So the client runs in a network namespace of its own
// (ip netns) whose loopback carries the endpoint addresses, with the gRPC
// backends it calls in the same process (xdsclient -serve): real calls
// reach the endpoints meshfed served, and no packet leaves the namespace.
// The namespace reaches meshfed's xDS port through a unix socket that the
// test relays to 127.0.0.1.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/test/servers"
)

const kubeHost = "orders.shop.svc.cluster.local"

// Endpoint addresses (only inside the client's network namespace).
const (
	eastAddr  = "192.0.2.101"
	westAddr  = "192.0.2.102"
	west2Addr = "192.0.2.103"
	podPort   = 18080
)

// kubeCluster is one test cluster: its API server and an admin client.
type kubeCluster struct {
	name   string
	api    *servers.KubeAPIServer
	client kubernetes.Interface
	region string
}

func newKubeCluster(t *testing.T, name, region string, api *servers.KubeAPIServer) *kubeCluster {
	t.Helper()
	k := &kubeCluster{name: name, api: api, client: api.Client(t, servers.AdminToken), region: region}
	ctx := context.Background()
	mustCreate(t, errOnly(k.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{})))
	mustCreate(t, errOnly(k.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + name, Labels: map[string]string{
		"topology.kubernetes.io/region": region, "topology.kubernetes.io/zone": region + "a"}}}, metav1.CreateOptions{})))
	return k
}

func errOnly[T any](_ T, err error) error { return err }

func mustCreate(t *testing.T, err error) {
	t.Helper()
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// service creates shop/name with one port grpc/number (targetPort podPort).
func (k *kubeCluster) service(t *testing.T, name string, number int32) {
	t.Helper()
	mustCreate(t, errOnly(k.client.CoreV1().Services("shop").Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: number, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})))
}

type kubeEndpoint struct {
	addr  string
	ready bool
}

// slice writes the EndpointSlice <svc>-<cluster> of service svc.
func (k *kubeCluster) slice(t *testing.T, svc string, eps ...kubeEndpoint) {
	t.Helper()
	ctx := context.Background()
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: svc + "-" + k.name,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](podPort), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, e := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{e.addr},
			NodeName:   ptr.To("node-" + k.name),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(e.ready), Serving: ptr.To(e.ready), Terminating: ptr.To(false)},
		})
	}
	slices := k.client.DiscoveryV1().EndpointSlices("shop")
	old, err := slices.Get(ctx, s.Name, metav1.GetOptions{})
	switch {
	case err == nil:
		s.ResourceVersion = old.ResourceVersion
		_, err = slices.Update(ctx, s, metav1.UpdateOptions{})
	case apierrors.IsNotFound(err):
		_, err = slices.Create(ctx, s, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// netns is a network namespace owned by one test, with the endpoint
// addresses on its loopback.
type netns struct{ name string }

var netnsSeq atomic.Int64

func newNetns(t *testing.T, addrs ...string) *netns {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		servers.Missing(t, "ip (iproute2)", "apt-get install iproute2")
	}
	if os.Geteuid() != 0 {
		servers.Missing(t, "root for ip netns", "run the tests as root")
	}
	n := &netns{name: fmt.Sprintf("meshfed-e2e-%d-%d", os.Getpid(), netnsSeq.Add(1))}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	run("netns", "add", n.name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.name).Run() })
	run("-n", n.name, "link", "set", "lo", "up")
	for _, a := range addrs {
		run("-n", n.name, "addr", "add", a+"/32", "dev", "lo")
	}
	return n
}

// relayXDS accepts on a unix socket and forwards each connection to
// meshfed's xDS address; it returns the socket's path.
func relayXDS(t *testing.T, xdsAddr string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mfx")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "xds.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", xdsAddr)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(up, c); up.Close() })
			wg.Go(func() { _, _ = io.Copy(c, up); c.Close() })
		}
	})
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
		os.RemoveAll(dir)
	})
	return sock
}

// startNetnsClient runs the grpc-go client in ns, with backends on the
// given addr=name pairs, against meshfed's xDS through a relay.
func startNetnsClient(t *testing.T, ns *netns, config, xdsAddr, nodeID, target string, backends ...string) *client {
	t.Helper()
	bootstrap, stderr, code := meshfedCmd(t, "bootstrap", "--grpc", "--config", config, "--node-id", nodeID)
	if code != 0 {
		t.Fatalf("bootstrap: exit %d: %s", code, stderr)
	}
	sock := relayXDS(t, xdsAddr)
	bootstrap = strings.ReplaceAll(bootstrap, `"`+xdsAddr+`"`, `"unix://`+sock+`"`)
	if !strings.Contains(bootstrap, sock) {
		t.Fatalf("bootstrap does not name %s:\n%s", xdsAddr, bootstrap)
	}
	return startClientCmd(t, bootstrap, "ip", "netns", "exec", ns.name, xdsClientBin,
		"-target", target, "-interval", "20ms", "-duration", "5m", "-rpc-timeout", "1s",
		"-serve", strings.Join(backends, ","))
}

// answered reads n calls and returns how many each backend answered
// (failed calls count under "error: <message>").
func (c *client) answered(t *testing.T, n int) map[string]int {
	t.Helper()
	out := map[string]int{}
	deadline := time.After(30 * time.Second)
	for range n {
		select {
		case l := <-c.lines:
			if l.Err != "" {
				out["error: "+l.Err]++
			} else {
				out[l.Backend]++
			}
		case <-deadline:
			t.Fatalf("client printed fewer than %d calls in 30s; so far %v", n, out)
		}
	}
	return out
}

// waitBackends waits until a window of 40 calls is answered by exactly
// the backends want (each at least once, no others, no errors).
func (c *client) waitBackends(t *testing.T, timeout time.Duration, want ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var got map[string]int
	for time.Now().Before(deadline) {
		got = c.answered(t, 40)
		keys := make([]string, 0, len(got))
		for k := range got {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if slices.Equal(keys, want) {
			return
		}
	}
	t.Fatalf("calls not answered by exactly %v within %v; last window %v", want, timeout, got)
}

// waitCLA waits until the proxy was served (and ACKed) exactly want.
func waitCLA(t *testing.T, m *meshfed, proxy string, timeout time.Duration, want ...claEndpoint) {
	t.Helper()
	eventually(t, timeout, "EDS served to "+proxy, func() error {
		got, err := servedCLA(m, proxy, kubeHost, 8080)
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("endpoints %+v, want %+v", got, want)
		}
		return nil
	})
}

func registryState(m *meshfed, name string) (string, error) {
	var h admin.RegistryHealth
	code, body, err := m.get("/healthz/registries/" + name)
	if err != nil {
		return "", err
	}
	if code == 404 {
		return "absent", nil
	}
	if err := json.Unmarshal(body, &h); err != nil {
		return "", fmt.Errorf("%v: %s", err, body)
	}
	return h.State.String(), nil
}

func waitRegistry(t *testing.T, m *meshfed, name, want string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "registry "+name+" is "+want, func() error {
		got, err := registryState(m, name)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("state %s", got)
		}
		return nil
	})
}

func kubeEntry(name, kubeconfig, extra string) string {
	return fmt.Sprintf("  - name: %s\n    kind: kubernetes\n    domain: svc.cluster.local\n    kubernetes: {kubeconfig: %q, context: %s, network: mesh-net%s}\n",
		name, kubeconfig, name, extra)
}

// TestKubernetesMulticlusterToGRPCClient: one Service in two clusters is
// one service whose endpoints come from both, each with its locality;
// readiness flips, an API server outage and scaling to zero follow.
func TestKubernetesMulticlusterToGRPCClient(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	ns := newNetns(t, eastAddr, westAddr, west2Addr)
	etcd := servers.StartEtcd(t)
	east := newKubeCluster(t, "east", "east-1", servers.StartKubeAPIServer(t, etcd, "/east"))
	west := newKubeCluster(t, "west", "west-1", servers.StartKubeAPIServer(t, etcd, "/west"))
	westPeer := servers.StartKubeAPIServer(t, etcd, "/west") // a second API server of west
	for _, k := range []*kubeCluster{east, west} {
		k.service(t, "orders", 8080)
	}
	east.slice(t, "orders", kubeEndpoint{eastAddr, true})
	west.slice(t, "orders", kubeEndpoint{westAddr, true})
	// Same service, different port: reported, not silently resolved.
	east.service(t, "mismatch", 7000)
	west.service(t, "mismatch", 7001)

	dir := t.TempDir()
	config, xdsAddr, adminAddr := writeClusters(t, dir,
		kubeEntry("east", east.api.WriteKubeconfig(t, "east", servers.AdminToken), "")+
			kubeEntry("west", west.api.WriteKubeconfig(t, "west", servers.AdminToken), ""))
	m := startMeshfed(t, config, xdsAddr, adminAddr)
	waitRegistry(t, m, "east", "Synced", 60*time.Second)
	waitRegistry(t, m, "west", "Synced", 60*time.Second)

	c := startNetnsClient(t, ns, config, xdsAddr, "kube-client", "xds:///"+kubeHost+":8080",
		fmt.Sprintf("%s:%d=east-1", eastAddr, podPort), fmt.Sprintf("%s:%d=west-1", westAddr, podPort),
		fmt.Sprintf("%s:%d=west-2", west2Addr, podPort))
	c.waitBackends(t, 60*time.Second, "east-1", "west-1")
	waitCLA(t, m, "kube-client", 10*time.Second,
		claEndpoint{eastAddr, "HEALTHY", "east-1", "east-1a"},
		claEndpoint{westAddr, "HEALTHY", "west-1", "west-1a"})

	// Each endpoint names its cluster and network.
	var eps []admin.EndpointInfo
	m.getJSON(t, "/debug/endpointz?host="+kubeHost, &eps)
	for _, e := range eps {
		if want := map[string]string{eastAddr: "east", westAddr: "west"}[e.Address]; e.Cluster != want || e.Network != "mesh-net" {
			t.Errorf("endpoint %s: cluster %q network %q, want %q mesh-net", e.Address, e.Cluster, e.Network, want)
		}
	}
	eventually(t, 10*time.Second, "port mismatch on /debug/conflictz", func() error {
		var conflicts []aggregate.Conflict
		if _, body, err := m.get("/debug/conflictz"); err != nil {
			return err
		} else if err := json.Unmarshal(body, &conflicts); err != nil {
			return err
		}
		for _, c := range conflicts {
			if c.Host == "mismatch.shop.svc.cluster.local" && c.Category == aggregate.CategoryPortMismatch && c.Registry == "west" {
				return nil
			}
		}
		return fmt.Errorf("no port-mismatch for mismatch.shop.svc.cluster.local in %+v", conflicts)
	})

	// Readiness flips reach EDS as health, and the client follows.
	east.slice(t, "orders", kubeEndpoint{eastAddr, false})
	waitCLA(t, m, "kube-client", 20*time.Second,
		claEndpoint{eastAddr, "UNHEALTHY", "east-1", "east-1a"},
		claEndpoint{westAddr, "HEALTHY", "west-1", "west-1a"})
	c.waitBackends(t, 20*time.Second, "west-1")
	east.slice(t, "orders", kubeEndpoint{eastAddr, true})
	waitCLA(t, m, "kube-client", 20*time.Second,
		claEndpoint{eastAddr, "HEALTHY", "east-1", "east-1a"},
		claEndpoint{westAddr, "HEALTHY", "west-1", "west-1a"})
	c.waitBackends(t, 20*time.Second, "east-1", "west-1")

	// West's API server stops: Degraded, its endpoints kept. A change made
	// meanwhile (through west's other API server) arrives once it is back.
	west.api.Stop(t)
	waitRegistry(t, m, "west", "Degraded", 60*time.Second)
	if code, _, _ := m.get("/healthz/registries/west"); code != 503 {
		t.Errorf("/healthz/registries/west while Degraded = %d, want 503", code)
	}
	c.waitBackends(t, 10*time.Second, "east-1", "west-1")
	newKubeCluster(t, "west", "west-1", westPeer).slice(t, "orders", kubeEndpoint{westAddr, true}, kubeEndpoint{west2Addr, true})
	west.api.Start(t)
	waitRegistry(t, m, "west", "Synced", 60*time.Second)
	waitCLA(t, m, "kube-client", 60*time.Second,
		claEndpoint{eastAddr, "HEALTHY", "east-1", "east-1a"},
		claEndpoint{westAddr, "HEALTHY", "west-1", "west-1a"},
		claEndpoint{west2Addr, "HEALTHY", "west-1", "west-1a"})
	c.waitBackends(t, 20*time.Second, "east-1", "west-1", "west-2")

	// West scaled to zero: more than half of west's endpoints at once, so
	// the hold-down (on by default) holds it and west's endpoints stay
	// served until an operator releases it; then only east's is left.
	west.slice(t, "orders")
	waitRegistry(t, m, "west", "Held", 20*time.Second)
	c.waitBackends(t, 10*time.Second, "east-1", "west-1", "west-2")
	if out, stderr, code := meshfedCmd(t, "release", "west", "--admin", m.admin); code != 0 {
		t.Fatalf("meshfed release west: exit %d: %s%s", code, out, stderr)
	}
	waitCLA(t, m, "kube-client", 20*time.Second, claEndpoint{eastAddr, "HEALTHY", "east-1", "east-1a"})
	c.waitBackends(t, 20*time.Second, "east-1")
}

// TestKubernetesRemoteClusterBySecret adds and removes a remote cluster
// through a Secret in the first cluster (istioctl create-remote-secret's
// format); each remote cluster shows on /healthz/registries.
func TestKubernetesRemoteClusterBySecret(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	ns := newNetns(t, eastAddr, westAddr)
	kc := servers.StartKubeClusters(t, 2)
	east := newKubeCluster(t, "east", "east-1", kc.Servers[0])
	west := newKubeCluster(t, "west", "west-1", kc.Servers[1])
	for _, k := range []*kubeCluster{east, west} {
		k.service(t, "orders", 8080)
	}
	east.slice(t, "orders", kubeEndpoint{eastAddr, true})
	west.slice(t, "orders", kubeEndpoint{westAddr, true})
	east.api.EnsureNamespace(t, "istio-system")

	dir := t.TempDir()
	config, xdsAddr, adminAddr := writeClusters(t, dir,
		kubeEntry("east", east.api.WriteKubeconfig(t, "east", servers.AdminToken), ", secretDiscovery: {}"))
	m := startMeshfed(t, config, xdsAddr, adminAddr)
	waitRegistry(t, m, "east", "Synced", 60*time.Second)
	c := startNetnsClient(t, ns, config, xdsAddr, "kube-remote", "xds:///"+kubeHost+":8080",
		fmt.Sprintf("%s:%d=east-1", eastAddr, podPort), fmt.Sprintf("%s:%d=west-1", westAddr, podPort))
	c.waitBackends(t, 60*time.Second, "east-1")

	secrets := east.client.CoreV1().Secrets("istio-system")
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "istio-remote-secret-west",
			Labels:      map[string]string{"istio/multiCluster": "true"},
			Annotations: map[string]string{"networking.istio.io/cluster": "west"}},
		Data: map[string][]byte{"west": west.api.Kubeconfig(t, "west", servers.AdminToken)},
	}
	if _, err := secrets.Create(context.Background(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRegistry(t, m, "west", "Synced", 60*time.Second)
	waitCLA(t, m, "kube-remote", 20*time.Second,
		claEndpoint{eastAddr, "HEALTHY", "east-1", "east-1a"},
		claEndpoint{westAddr, "HEALTHY", "west-1", "west-1a"})
	c.waitBackends(t, 20*time.Second, "east-1", "west-1")
	var regs []admin.RegistryHealth
	m.getJSON(t, "/healthz/registries", &regs)
	if len(regs) != 2 {
		t.Errorf("/healthz/registries lists %d registries, want east and west", len(regs))
	}

	if err := secrets.Delete(context.Background(), secret.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRegistry(t, m, "west", "absent", 30*time.Second)
	waitCLA(t, m, "kube-remote", 20*time.Second, claEndpoint{eastAddr, "HEALTHY", "east-1", "east-1a"})
	c.waitBackends(t, 20*time.Second, "east-1")
	if err := m.stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
}
