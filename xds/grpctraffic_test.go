package xds

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/test/servers"
	"github.com/meshfed/meshfed/xds/internal/testfixture"
)

// TestGRPCGoAcksFullTraffic: a real grpc-go xDS client (v1.85) is served
// the gRPC side of every traffic feature (testfixture.TrafficConfig, the
// translation goldens' rules) and ACKs every type: calls to the
// hosts with rules (outlier detection, omitted TLS and cookie hashing,
// redirect and direct-response routes, a wildcard rule) reach the
// backends. Every resource is a first version, so a NACK of any of them
// would leave the client without it and fail the call.
func TestGRPCGoAcksFullTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a grpc-go xDS client")
	}
	t.Parallel()
	ports := []uint32{startHealthBackend(t), startHealthBackend(t)}
	svcs := testfixture.TrafficServices()
	for _, s := range svcs {
		for i := range s.Endpoints {
			e := &s.Endpoints[i]
			e.Address = "127.0.0.1"
			e.Ports = map[string]uint32{}
			for _, p := range s.Ports {
				e.Ports[p.Name] = ports[i%2]
			}
		}
	}
	srv := NewServer(Options{})
	snap := model.NewSnapshot(1, svcs)
	objs, rej := istioconfig.ParseObjects("traffic.yaml", []byte(testfixture.TrafficConfig))
	if len(rej) > 0 {
		t.Fatalf("rejected: %v", rej)
	}
	snap.Config = model.NewConfigSnapshot(1, objs)
	srv.Update(snap)
	addr := startServer(t, srv)

	const nodeID = "grpc-full-traffic"
	boot, err := GRPCBootstrap(addr, nodeID, model.Locality{Region: "us-east"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bootFile := filepath.Join(t.TempDir(), "bootstrap.json")
	if err := os.WriteFile(bootFile, boot, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	targets := []string{"xds:///orders.vm.internal:8080", "xds:///orders.vm.internal:8081", "xds:///web.vm.internal:80", "xds:///billing.pay.internal:9000"}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", "GRPC_XDS_BOOTSTRAP="+bootFile, "MESHFED_XDS_TEST_TARGETS="+strings.Join(targets, ","))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("grpc-go xDS client failed: %v\n%s", err, out)
	}
	for _, tg := range targets {
		if !strings.Contains(string(out), tg+" SERVING") {
			t.Errorf("client output lacks %q:\n%s", tg+" SERVING", out)
		}
	}
}

// startHealthBackend starts a gRPC server with the health service on
// 127.0.0.1 and returns its port.
func startHealthBackend(t *testing.T) uint32 {
	t.Helper()
	lis := servers.LowListener(t)
	backend := grpc.NewServer()
	healthpb.RegisterHealthServer(backend, health.NewServer())
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = backend.Serve(lis)
	}()
	t.Cleanup(func() { backend.Stop(); <-served })
	return uint32(lis.Addr().(*net.TCPAddr).Port)
}
