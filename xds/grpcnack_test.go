package xds

import (
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/translate"
)

// Observation 1, as grpc-go sees it: a CLA whose endpoint weights in one
// locality sum above 2^32-1 (what the gate now scales and translation
// refuses) is NACKed by grpc-go 1.85, and the NACK shows on the server's
// status. This keeps the rule the gate and grpcAcceptsCLA apply tied to
// the real client, and shows that a NACK is seen where test/hostile looks.
func TestGRPCGoNacksOverflowingWeights(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a grpc-go xDS client")
	}
	t.Parallel()
	srv := NewServer(Options{})
	srv.Update(model.NewSnapshot(1, []*model.Service{{
		Hostname: "orders.test", Ports: []model.Port{{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}},
		Endpoints: []model.Endpoint{{Address: "127.0.0.1", Locality: model.Locality{Region: "r1"}}},
	}}))
	// What the gate and translation no longer let through, put in the store
	// directly.
	name := translate.ClusterName("orders.test", 8080)
	lb := func(addr string) *endpoint.LbEndpoint {
		return &endpoint.LbEndpoint{LoadBalancingWeight: wrapperspb.UInt32(math.MaxUint32),
			HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{Address: translate.SocketAddress(addr, 1)}}}
	}
	bad := &endpoint.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpoint.LocalityLbEndpoints{{
		Locality: &core.Locality{Region: "r1"}, LoadBalancingWeight: wrapperspb.UInt32(math.MaxUint32),
		LbEndpoints: []*endpoint.LbEndpoint{lb("127.0.0.1"), lb("127.0.0.2")},
	}}}
	if err := bad.ValidateAll(); err != nil {
		t.Fatalf("the CLA should pass ValidateAll (grpc-go's rule is beyond it): %v", err)
	}
	srv.mu.Lock()
	srv.ads.Apply(translate.Changes{translate.KindOf("", translate.EndpointType): {Updated: map[string]types.Resource{name: bad}}})
	srv.mu.Unlock()
	addr := startServer(t, srv)

	boot, err := GRPCBootstrap(addr, "nack-client", model.Locality{}, nil)
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
	cmd.Env = append(os.Environ(), childEnv+"=1", "GRPC_XDS_BOOTSTRAP="+bootFile, "MESHFED_XDS_TEST_TARGETS=xds:///orders.test:8080")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var nack string
	eventually(t, "grpc-go's NACK of the CLA", func() bool {
		if p := proxy(srv, "nack-client"); p != nil {
			if n := typeStatus(p, translate.EndpointType).LastNack; n != nil {
				nack = n.Error
				return true
			}
		}
		return false
	})
	if !strings.Contains(nack, "sum of weights of endpoints in the same locality exceeds maximum value 4294967295") {
		t.Errorf("NACK %q, want grpc-go's weight-sum rejection", nack)
	}
}
