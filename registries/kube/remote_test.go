package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/meshfed/meshfed/kubeclient"
	"github.com/meshfed/meshfed/kubeclient/kubeclienttest"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

// testLauncher runs launched registries in goroutines against one sink,
// as the gateway runs them under supervisors.
type testLauncher struct {
	sink *registrytest.Sink

	mu       sync.Mutex
	taken    map[string]bool
	launched []string
	stopped  []string
}

func newTestLauncher(sink *registrytest.Sink, taken ...string) *testLauncher {
	l := &testLauncher{sink: sink, taken: map[string]bool{}}
	for _, n := range taken {
		l.taken[n] = true
	}
	return l
}

func (l *testLauncher) Launch(parent string, c registries.Common, reg registries.Registry) (func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.taken[c.Name] {
		return nil, fmt.Errorf("registry %q exists", c.Name)
	}
	l.taken[c.Name] = true
	l.launched = append(l.launched, c.Name)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- reg.Run(ctx, l.sink) }()
	return func() {
		cancel()
		<-done
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.taken, c.Name)
		l.stopped = append(l.stopped, c.Name)
	}, nil
}

func (l *testLauncher) state() (launched, stopped []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.launched), slices.Clone(l.stopped)
}

func remoteSecret(name string, labels map[string]string, data map[string][]byte) *corev1.Secret {
	if labels == nil {
		labels = map[string]string{"istio/multiCluster": "true"}
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: name, Labels: labels}, Data: data}
}

// fakeClusters maps kubeconfig server URLs to fake clientsets.
type fakeClusters map[string]kubernetes.Interface

func (f fakeClusters) clientFor(kc []byte) (clients, func(), error) {
	rc, err := kubeclient.RemoteConfig(kc)
	if err != nil {
		return clients{}, nil, err
	}
	cs, ok := f[rc.Host]
	if !ok {
		return clients{}, nil, errors.New("no cluster at " + rc.Host)
	}
	return clients{kube: cs}, func() {}, nil
}

func clusterWith(addr string) *fake.Clientset {
	return fake.NewClientset(
		svcObj("shop", "orders", nil, svcPort("grpc", 8080)),
		sliceObj("shop", "orders-x", "orders", discoveryv1.AddressTypeIPv4, map[string]int32{"grpc": 8080},
			epSpec{addr: addr, ready: ptr.To(true)}),
	)
}

func TestSecretDiscovery(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	east := fake.NewClientset()
	// slow lists only once release is closed.
	release := make(chan struct{})
	slow := clusterWith("192.0.2.13")
	slow.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return false, nil, nil
	})
	clusters := fakeClusters{
		"https://west.example:6443":  clusterWith("192.0.2.10"),
		"https://west2.example:6443": clusterWith("192.0.2.11"),
		"https://north.example:6443": clusterWith("192.0.2.12"),
		"https://slow.example:6443":  slow,
	}
	sink := registrytest.NewSink()
	launcher := newTestLauncher(sink, "taken")
	reg := NewForClient(common("east"), Config{Network: "east-net", SecretDiscovery: &SecretDiscovery{}}, east, nil)
	reg.clientFor = clusters.clientFor
	reg.SetLauncher(launcher)
	t.Cleanup(reg.stopAll)
	registrytest.Start(t, reg, sink)
	sink.WaitForShard(t, shard("east"), waitTimeout, registrytest.State.Synced)

	const host = "orders.shop.svc.cluster.local"
	secrets := east.CoreV1().Secrets("istio-system")

	// Added: a registry per cluster of the Secret; its own cluster, a bad
	// kubeconfig and a taken name are skipped.
	exec := kubeclienttest.Kubeconfig(t, "https://x.example", func(c *clientcmdapi.Config) {
		c.AuthInfos["c"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "/bin/steal", APIVersion: "client.authentication.k8s.io/v1"}}
	})
	if _, err := secrets.Create(ctx, remoteSecret("istio-remote-secret-west", map[string]string{"istio/multiCluster": "true", labelNetwork: "west-net"}, map[string][]byte{
		"west":  kubeclienttest.Kubeconfig(t, "https://west.example:6443", nil),
		"east":  kubeclienttest.Kubeconfig(t, "https://north.example:6443", nil),
		"evil":  exec,
		"taken": kubeclienttest.Kubeconfig(t, "https://north.example:6443", nil),
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	st := sink.WaitForShard(t, shard("west"), waitTimeout, hasAddrs(host, "192.0.2.10=HEALTHY"))
	if s, _ := find(st.Services, host); s.Endpoints[0].Source != (model.Source{Registry: "west", Cluster: "west", Network: "west-net"}) {
		t.Errorf("remote endpoint source = %+v, want cluster west on west-net", s.Endpoints[0].Source)
	}
	if launched, _ := launcher.state(); !slices.Equal(launched, []string{"west"}) {
		t.Errorf("launched %v, want [west] (own cluster, exec kubeconfig and taken name skipped)", launched)
	}

	// Changed: the new kubeconfig's state replaces the old one without the
	// service ever going empty (make-before-break).
	before := sink.Replaces(shard("west"))
	if _, err := secrets.Update(ctx, remoteSecret("istio-remote-secret-west", nil, map[string][]byte{
		"west": kubeclienttest.Kubeconfig(t, "https://west2.example:6443", nil),
	}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	st = sink.WaitForShard(t, shard("west"), waitTimeout, hasAddrs(host, "192.0.2.11=HEALTHY"))
	if st.Replaces != before+1 {
		t.Errorf("%d Replace calls during the switch, want exactly 1 (old state until the new one synced)", st.Replaces-before)
	}
	if s, _ := find(st.Services, host); s.Endpoints[0].Source.Network != "east-net" {
		t.Errorf("network after the Secret lost its label = %q, want the parent's east-net", s.Endpoints[0].Source.Network)
	}
	for _, r := range st.Reports {
		if r.Failing() {
			t.Errorf("remote reported %v during the switch", r)
		}
	}

	// A kubeconfig whose cluster is slow to list: the old connection keeps
	// serving, and following its cluster, until the new one synced.
	if _, err := secrets.Update(ctx, remoteSecret("istio-remote-secret-west", nil, map[string][]byte{
		"west": kubeclienttest.Kubeconfig(t, "https://slow.example:6443", nil),
	}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := clusters["https://west2.example:6443"].DiscoveryV1().EndpointSlices("shop").Update(ctx,
		sliceObj("shop", "orders-x", "orders", discoveryv1.AddressTypeIPv4, map[string]int32{"grpc": 8080},
			epSpec{addr: "192.0.2.11", ready: ptr.To(true)}, epSpec{addr: "192.0.2.14", ready: ptr.To(true)}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	sink.WaitForShard(t, shard("west"), waitTimeout, hasAddrs(host, "192.0.2.11=HEALTHY", "192.0.2.14=HEALTHY"))
	close(release)
	sink.WaitForShard(t, shard("west"), waitTimeout, hasAddrs(host, "192.0.2.13=HEALTHY"))

	// A second Secret adds a cluster; an unusable update keeps it running.
	if _, err := secrets.Create(ctx, remoteSecret("north", nil, map[string][]byte{
		"north": kubeclienttest.Kubeconfig(t, "https://north.example:6443", nil),
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sink.WaitForShard(t, shard("north"), waitTimeout, hasAddrs(host, "192.0.2.12=HEALTHY"))
	if _, err := secrets.Update(ctx, remoteSecret("north", nil, map[string][]byte{"north": exec}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Deleted: that cluster's registry stops (the gateway then drops its
	// shard); the other one keeps running.
	if err := secrets.Delete(ctx, "istio-remote-secret-west", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, stopped := launcher.state(); return slices.Equal(stopped, []string{"west"}) })
	if launched, _ := launcher.state(); !slices.Equal(launched, []string{"west", "north"}) {
		t.Errorf("launched %v, want [west north]", launched)
	}
}

// waitFor polls cond with a bounded deadline (for state outside a sink).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSecretParsing(t *testing.T) {
	t.Parallel()
	reg := NewForClient(common("east"), Config{Network: "east-net", SecretDiscovery: &SecretDiscovery{Network: "remote-net"}}, fake.NewClientset(), nil)
	for _, tc := range []struct {
		name     string
		mut      func(*clientcmdapi.Config)
		wantBad  string
		dataName string
	}{
		{name: "inline token"},
		{name: "bad name", dataName: "West_1", wantBad: "not a DNS label"},
		{name: "exec", wantBad: "exec plugin", mut: func(c *clientcmdapi.Config) {
			c.AuthInfos["c"].Exec = &clientcmdapi.ExecConfig{Command: "x", APIVersion: "client.authentication.k8s.io/v1"}
		}},
		{name: "token file", wantBad: "token file", mut: func(c *clientcmdapi.Config) { c.AuthInfos["c"].TokenFile = "/var/run/secrets/token" }},
		{name: "cert files", wantBad: "certificate files", mut: func(c *clientcmdapi.Config) {
			c.AuthInfos["c"].ClientCertificate, c.AuthInfos["c"].ClientKey = "/etc/c.pem", "/etc/k.pem"
		}},
		{name: "ca file", wantBad: "CA file", mut: func(c *clientcmdapi.Config) { c.Clusters["c"].CertificateAuthority = "/etc/ca.pem" }},
		{name: "no context", wantBad: "context", mut: func(c *clientcmdapi.Config) { c.CurrentContext = "" }},
	} {
		name := tc.dataName
		if name == "" {
			name = "west"
		}
		good, bad := reg.parseSecret(remoteSecret("s", nil, map[string][]byte{name: kubeclienttest.Kubeconfig(t, "https://w:6443", tc.mut)}))
		switch {
		case tc.wantBad == "" && (len(good) != 1 || good["west"].network != "remote-net"):
			t.Errorf("%s: good %v, bad %v; want west on remote-net", tc.name, good, bad)
		case tc.wantBad != "" && (len(good) != 0 || !strings.Contains(bad[name], tc.wantBad)):
			t.Errorf("%s: good %v, bad %v; want it rejected for %q", tc.name, good, bad, tc.wantBad)
		}
	}
	if good, _ := reg.parseSecret(remoteSecret("s", nil, map[string][]byte{"bad": []byte("{not yaml")})); len(good) != 0 {
		t.Error("garbage accepted as kubeconfig")
	}
}
