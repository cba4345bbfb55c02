package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/meshfed/meshfed/test/servers"
)

// startStoppableBackend is startBackend returning the server, to stop it
// mid-test.
func startStoppableBackend(t *testing.T, name string) (*backend, *grpc.Server) {
	t.Helper()
	lis := servers.LowListener(t)
	s := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-backend", name))
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return &backend{name: name, host: "127.0.0.1", port: lis.Addr().(*net.TCPAddr).Port}, s
}

// withLocality sets the node locality of a gRPC bootstrap.
func withLocality(t *testing.T, bootstrap, region, zone string) string {
	t.Helper()
	var b map[string]any
	if err := json.Unmarshal([]byte(bootstrap), &b); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	node, _ := b["node"].(map[string]any)
	if node == nil {
		t.Fatalf("bootstrap without node: %s", bootstrap)
	}
	node["locality"] = map[string]any{"region": region, "zone": zone}
	out, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestLocalityFailoverGRPC: a DestinationRule with outlier detection and
// localityLbSetting failover; a real grpc-go client whose bootstrap puts
// it in region-a sends every call to region-a's backend (the other
// region's would get about half without per-locality priorities), and
// once that backend stops, its calls go to region-b's.
func TestLocalityFailoverGRPC(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := t.TempDir()
	a, aSrv := startStoppableBackend(t, "a")
	b := startBackend(t, "b")
	writeFile(t, filepath.Join(dir, "services.yaml"), fmt.Sprintf(`services:
  - name: near
    ports: [{name: grpc, port: 8080, protocol: GRPC}]
    endpoints:
      - {address: 127.0.0.1, ports: {grpc: %d}, locality: region-a/zone-1}
      - {address: 127.0.0.1, ports: {grpc: %d}, locality: region-b/zone-1}
`, a.port, b.port))
	traffic := filepath.Join(dir, "traffic")
	if err := os.Mkdir(traffic, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(traffic, "dr.yaml"), `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: near, namespace: e2e}
spec:
  host: near.vm.internal
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 5, interval: 1s, baseEjectionTime: 30s, maxEjectionPercent: 100}
    loadBalancer:
      localityLbSetting:
        failover: [{from: region-a, to: region-b}]
`)
	config, xdsAddr, adminAddr := writeClusters(t, dir,
		"  - {name: vms, kind: file, domain: vm.internal, file: {path: services.yaml}}\nconfigSources:\n  - {name: local, dir: traffic}\n")
	m := startMeshfed(t, config, xdsAddr, adminAddr)
	m.waitReady(t, 20*time.Second)
	bs, stderr, code := meshfedCmd(t, "bootstrap", "--grpc", "--config", config, "--node-id", "near-a")
	if code != 0 {
		t.Fatalf("bootstrap: exit %d: %s", code, stderr)
	}
	c := startClientCmd(t, withLocality(t, bs, "region-a", "zone-1"),
		xdsClientBin, "-target", "xds:///near.vm.internal:8080", "-interval", "5ms", "-duration", "3m")

	// 200 calls in a row on region-a's backend: with both at one
	// priority, round robin would alternate.
	c.waitFor(t, "a", 200, 30*time.Second)
	// The config dump shows the variant this proxy is sent.
	_, body, err := m.get("/debug/config_dump?proxy=near-a")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Resources map[string][]struct {
			ClusterName string `json:"clusterName"`
			Endpoints   []struct {
				Locality struct {
					Region string `json:"region"`
				} `json:"locality"`
				Priority int `json:"priority"`
			} `json:"endpoints"`
		} `json:"resources"`
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatalf("config_dump: %v: %s", err, body)
	}
	prio := map[string]int{}
	for _, cla := range d.Resources["type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"] {
		for _, l := range cla.Endpoints {
			prio[l.Locality.Region] = l.Priority
		}
	}
	if prio["region-a"] != 0 || prio["region-b"] != 1 {
		t.Errorf("config_dump priorities = %v, want region-a 0, region-b 1: %s", prio, body)
	}
	aSrv.Stop()
	c.drain()
	c.waitFor(t, "b", 100, 60*time.Second)
}
