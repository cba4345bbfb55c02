package xds

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	_ "google.golang.org/grpc/xds" // registers the xds:/// resolver

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/test/servers"
)

// childEnv makes the test binary act as a proxyless gRPC client: it dials
// each target in MESHFED_XDS_TEST_TARGETS through xDS (GRPC_XDS_BOOTSTRAP
// is read at process start, hence a child process) and calls the health
// service.
const childEnv = "MESHFED_XDS_TEST_CHILD"

func grpcChild() int {
	for _, target := range strings.Split(os.Getenv("MESHFED_XDS_TEST_TARGETS"), ",") {
		if err := checkHealth(target); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", target, err)
			return 1
		}
		fmt.Printf("%s SERVING\n", target)
	}
	return 0
}

func checkHealth(target string) error {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("status %v", resp.GetStatus())
	}
	return nil
}

// TestGRPCGoClientResolvesThroughXDS runs a real grpc-go xDS client (v1.85)
// against the server: listener, route, cluster and endpoints must all be
// accepted for the RPC to reach the backend.
func TestGRPCGoClientResolvesThroughXDS(t *testing.T) {
	t.Parallel()
	// The backend: a real gRPC server with the health service.
	lis := servers.LowListener(t)
	backend := grpc.NewServer()
	healthpb.RegisterHealthServer(backend, health.NewServer())
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = backend.Serve(lis)
	}()
	t.Cleanup(func() { backend.Stop(); <-served })
	backendPort := uint32(lis.Addr().(*net.TCPAddr).Port)

	srv := NewServer(Options{})
	srv.Update(model.NewSnapshot(1, []*model.Service{{
		Hostname: "orders.test",
		Ports:    []model.Port{{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}},
		Endpoints: []model.Endpoint{{
			Address: "127.0.0.1", Ports: map[string]uint32{"grpc": backendPort},
			Locality: model.Locality{Region: "r1", Zone: "z1"}, Weight: 3,
			Labels: map[string]string{"version": "v1"}, Source: model.Source{Registry: "vms", Cluster: "vms"},
		}},
	}}))
	addr := startServer(t, srv)

	const nodeID = "grpc-client-1"
	boot, err := GRPCBootstrap(addr, nodeID, model.Locality{Region: "r1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bootFile := filepath.Join(t.TempDir(), "bootstrap.json")
	if err := os.WriteFile(bootFile, boot, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", "GRPC_XDS_BOOTSTRAP="+bootFile,
		"MESHFED_XDS_TEST_TARGETS=xds:///orders.test:8080,xds:///orders.test")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("grpc-go xDS client failed: %v\n%s", err, out)
	}
	for _, want := range []string{"xds:///orders.test:8080 SERVING", "xds:///orders.test SERVING"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("client output lacks %q:\n%s", want, out)
		}
	}
}
