package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
	mcp "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
)

// scopeClient is a raw ADS client presenting an Envoy node: wildcard
// CDS, SotW or delta, ACKing everything; it records the clusters it
// holds and every CDS response.
type scopeClient struct {
	mu        sync.Mutex
	held      map[string]bool
	responses [][]string // SotW: the clusters of each response; delta: the clusters it held after each
	removed   []string   // delta: every removal
}

func dialScopeClient(t *testing.T, xdsAddr string, node *core.Node, delta bool) *scopeClient {
	t.Helper()
	conn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &scopeClient{held: map[string]bool{}}
	cl := discovery.NewAggregatedDiscoveryServiceClient(conn)
	done := make(chan struct{})
	if delta {
		st, err := cl.DeltaAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: clusterType}); err != nil {
			t.Fatal(err)
		}
		go func() {
			defer close(done)
			for {
				r, err := st.Recv()
				if err != nil {
					return
				}
				c.mu.Lock()
				for _, res := range r.GetResources() {
					c.held[res.GetName()] = true
				}
				for _, n := range r.GetRemovedResources() {
					delete(c.held, n)
					c.removed = append(c.removed, n)
				}
				c.responses = append(c.responses, slices.Sorted(maps.Keys(c.held)))
				c.mu.Unlock()
				if st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: clusterType, ResponseNonce: r.GetNonce()}) != nil {
					return
				}
			}
		}()
	} else {
		st, err := cl.StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: clusterType}); err != nil {
			t.Fatal(err)
		}
		go func() {
			defer close(done)
			for {
				r, err := st.Recv()
				if err != nil {
					return
				}
				var names []string
				for _, a := range r.GetResources() {
					m, err := a.UnmarshalNew()
					if err != nil {
						return
					}
					names = append(names, cache.GetResourceName(m))
				}
				slices.Sort(names)
				c.mu.Lock()
				c.held = map[string]bool{}
				for _, n := range names {
					c.held[n] = true
				}
				c.responses = append(c.responses, names)
				c.mu.Unlock()
				if st.Send(&discovery.DiscoveryRequest{TypeUrl: clusterType, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}) != nil {
					return
				}
			}
		}()
	}
	t.Cleanup(func() { cancel(); <-done; conn.Close() })
	return c
}

// holds waits until the client holds exactly the clusters of hosts (port 8080).
func (c *scopeClient) holds(t *testing.T, what string, hosts ...string) {
	t.Helper()
	var want []string
	for _, h := range hosts {
		want = append(want, "outbound|8080||"+h)
	}
	slices.Sort(want)
	eventually(t, 20*time.Second, what, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if got := slices.Sorted(maps.Keys(c.held)); !slices.Equal(got, want) {
			return fmt.Errorf("holds %v, want %v", got, want)
		}
		return nil
	})
}

// responsesSince returns the responses after the first n.
func (c *scopeClient) responsesSince(n int) [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.responses[n:])
}

func (c *scopeClient) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.responses)
}

func sidecarFile(hosts ...string) string {
	return "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: shop}\nspec:\n  egress:\n  - hosts: [\"" +
		strings.Join(hosts, `", "`) + "\"]\n"
}

// TestSidecarScoping runs the built binary with two file registries
// (namespaces vms and pay; pay's services exported only to pay) and a
// Sidecar in namespace shop from a config directory. Raw ADS clients
// presenting Envoy node ids in two namespaces each receive exactly their
// scope; a Sidecar edit moves the shop's scope without removing a
// cluster that stays in it; a grpc-go client reaches a service outside
// every scope; an MCP client sees the exportTo.
func TestSidecarScoping(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	t.Parallel()
	dir := t.TempDir()
	b := startBackend(t, "b1")
	ep := localEndpoint(b, "v1")
	svcs := func(names ...string) string {
		var s strings.Builder
		s.WriteString("services:\n")
		for _, n := range names {
			fmt.Fprintf(&s, "  - name: %s\n    ports: [{name: grpc, port: 8080, protocol: GRPC}]\n    endpoints: [%s]\n", n, ep)
		}
		return s.String()
	}
	writeFile(t, filepath.Join(dir, "vms.yaml"), svcs("a", "b", "c"))
	writeFile(t, filepath.Join(dir, "pay.yaml"), svcs("d"))
	if err := os.Mkdir(filepath.Join(dir, "traffic"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "traffic", "sidecar.yaml"), sidecarFile("vms/a.vm.internal", "vms/b.vm.internal", "pay/*"))
	config, xdsAddr, adminAddr := writeClusters(t, dir,
		"  - {name: vms, kind: file, domain: vm.internal, file: {path: vms.yaml}}\n"+
			"  - {name: pay, kind: file, domain: pay.internal, exportTo: [\".\"], file: {path: pay.yaml}}\n"+
			"configSources:\n  - {name: local, dir: traffic}\n")
	m := startMeshfed(t, config, xdsAddr, adminAddr)
	m.waitReady(t, 20*time.Second)

	shop := dialScopeClient(t, xdsAddr, &core.Node{Id: "sidecar~10.1.0.1~web-1.shop~shop.svc.cluster.local"}, false)
	md, _ := structpb.NewStruct(map[string]any{"NAMESPACE": "pay", "LABELS": map[string]any{"app": "billing"}})
	pay := dialScopeClient(t, xdsAddr, &core.Node{Id: "sidecar~10.1.0.2~billing-1.pay~pay.svc.cluster.local", Metadata: md}, true)
	other := dialScopeClient(t, xdsAddr, &core.Node{Id: "sidecar~10.1.0.3~x-1.other~other.svc.cluster.local"}, true)
	// d is exported to pay only: the Sidecar's "pay/*" does not widen that.
	shop.holds(t, "shop holds its Sidecar's scope", "a.vm.internal", "b.vm.internal")
	pay.holds(t, "pay holds everything exported to it", "a.vm.internal", "b.vm.internal", "c.vm.internal", "d.pay.internal")
	other.holds(t, "other holds what is exported everywhere", "a.vm.internal", "b.vm.internal", "c.vm.internal")

	// The Sidecar is edited: a leaves the scope, c comes in, b stays in
	// every response on the way.
	n := shop.count()
	writeFile(t, filepath.Join(dir, "traffic", "sidecar.yaml"), sidecarFile("vms/b.vm.internal", "vms/c.vm.internal"))
	shop.holds(t, "shop holds its edited scope", "b.vm.internal", "c.vm.internal")
	for _, r := range shop.responsesSince(n) {
		if !slices.Contains(r, "outbound|8080||b.vm.internal") {
			t.Errorf("a CDS response during the move lacks b, which stays in scope: %v", r)
		}
	}
	pay.holds(t, "pay is unaffected by the shop's Sidecar", "a.vm.internal", "b.vm.internal", "c.vm.internal", "d.pay.internal")
	pay.mu.Lock()
	if len(pay.removed) != 0 {
		t.Errorf("pay was told of removals: %v", pay.removed)
	}
	pay.mu.Unlock()

	// proxy-config shows the shop proxy's scope.
	out, stderr, code := meshfedCmd(t, "proxy-config", "scope", "web-1.shop", "--config", config)
	if code != 0 {
		t.Fatalf("proxy-config scope: exit %d: %s", code, stderr)
	}
	if err := contains(out, "Sidecar: shop/default", "b.vm.internal", "c.vm.internal"); err != nil || strings.Contains(out, "a.vm.internal") {
		t.Errorf("proxy-config scope: %v\n%s", err, out)
	}

	// Proxyless gRPC subscribes by name: not scoped, d is reached.
	bootstrap, stderr, code := meshfedCmd(t, "bootstrap", "--grpc", "--config", config, "--node-id", "sidecar~10.1.0.4~g-1.shop~shop.svc.cluster.local")
	if code != 0 {
		t.Fatalf("bootstrap: exit %d: %s", code, stderr)
	}
	c := startClient(t, bootstrap, "xds:///d.pay.internal:8080")
	c.waitFor(t, "b1", 3, 30*time.Second)

	// istiod over MCP: d's ServiceEntry carries its exportTo.
	eventually(t, 20*time.Second, "MCP ServiceEntry of d carries exportTo [pay]", func() error {
		se, err := mcpServiceEntry(xdsAddr, "meshfed/d.pay.internal")
		if err != nil {
			return err
		}
		if !slices.Equal(se.GetExportTo(), []string{"pay"}) {
			return fmt.Errorf("exportTo %v", se.GetExportTo())
		}
		return nil
	})
}

// mcpServiceEntry asks meshfed for its ServiceEntries over MCP, as istiod
// does, and returns the one named name.
func mcpServiceEntry(xdsAddr, name string) (*networking.ServiceEntry, error) {
	conn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	const seType = "networking.istio.io/v1/ServiceEntry"
	if err := st.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "istiod"}, TypeUrl: seType}); err != nil {
		return nil, err
	}
	r, err := st.Recv()
	if err != nil {
		return nil, err
	}
	for _, a := range r.GetResources() {
		var res mcp.Resource
		if err := a.UnmarshalTo(&res); err != nil {
			return nil, err
		}
		if res.GetMetadata().GetName() != name {
			continue
		}
		var se networking.ServiceEntry
		if err := res.GetBody().UnmarshalTo(&se); err != nil {
			return nil, err
		}
		return &se, nil
	}
	return nil, fmt.Errorf("no %s among %d ServiceEntries", name, len(r.GetResources()))
}
