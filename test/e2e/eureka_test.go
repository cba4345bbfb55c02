package e2e

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hudl/fargo"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/test/servers"
)

// TestEurekaRegistryToGRPCClient: apps registered, taken OUT_OF_SERVICE,
// DOWN and deregistered through the Eureka REST API of a real server
// (Polaris) reach a grpc-go xDS client calling real gRPC backends; a
// stopped server leaves the registry Degraded with its endpoints served,
// and a restarted one brings it back to Synced.
func TestEurekaRegistryToGRPCClient(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	p := servers.StartPolaris(t)
	backends := []*backend{startBackend(t, "x"), startBackend(t, "y")}
	// The app's port is the one most instances give, the smaller on a tie:
	// b1 takes the smaller port so that the port the client dials stays
	// the app's port while b1 is registered.
	sort.Slice(backends, func(i, j int) bool { return backends[i].port < backends[j].port })
	b1, b2 := backends[0], backends[1]
	register := func(b *backend) *fargo.Instance {
		return p.Register(t, servers.EurekaInstance{App: "ECHO", ID: "echo-" + b.name, IP: "127.0.0.1", Port: b.port,
			Metadata: map[string]string{"meshfed.protocol": "grpc", "zone": "zone-a", "version": b.name}})
	}
	i1 := register(b1)

	dir := t.TempDir()
	config, xdsAddr, adminAddr := writeClusters(t, dir, fmt.Sprintf(
		"  - name: legacy\n    kind: eureka\n    domain: eureka\n    eureka: {urls: [\"%s\"], pollInterval: 1s}\n", p.URL))
	m := startMeshfed(t, config, xdsAddr, adminAddr)
	eventually(t, 30*time.Second, "echo.eureka served", func() error { return endpointCount(m, "echo.eureka", 1) })
	bootstrap, stderr, code := meshfedCmd(t, "bootstrap", "--grpc", "--config", config, "--node-id", "e2e-eureka")
	if code != 0 {
		t.Fatalf("bootstrap: exit %d: %s", code, stderr)
	}
	c := startClient(t, bootstrap, fmt.Sprintf("xds:///echo.eureka:%d", b1.port))
	c.waitFor(t, b1.name, 5, 30*time.Second)

	i2 := register(b2)
	eventually(t, 30*time.Second, "b2 in endpointz", func() error { return endpointCount(m, "echo.eureka", 2) })
	c.waitFor(t, b2.name, 1, 30*time.Second)

	// OUT_OF_SERVICE → DRAINING: only b2 answers.
	p.SetStatus(t, i1, fargo.OUTOFSERVICE)
	c.waitFor(t, b2.name, 20, 30*time.Second)
	// b1 UP again, b2 DOWN → UNHEALTHY: only b1 answers.
	p.SetStatus(t, i1, fargo.UP)
	p.SetStatus(t, i2, fargo.DOWN)
	c.waitFor(t, b1.name, 20, 30*time.Second)
	// b2 deregistered: gone from the endpoints, b1 still answers.
	p.Deregister(t, i2)
	eventually(t, 30*time.Second, "b2 gone from endpointz", func() error { return endpointCount(m, "echo.eureka", 1) })
	c.waitFor(t, b1.name, 5, 10*time.Second)
	if err := deltaFetches(m); err != nil {
		t.Error(err)
	}

	// Server stopped: Degraded, endpoints kept, the client keeps calling.
	p.Stop(t)
	eventually(t, 30*time.Second, "legacy Degraded", func() error {
		var h admin.RegistryHealth
		code := m.getJSON(t, "/healthz/registries/legacy", &h)
		if code != 503 || h.State.String() != "Degraded" {
			return fmt.Errorf("code %d state %s", code, h.State)
		}
		return contains(h.LastError, "127.0.0.1")
	})
	if err := endpointCount(m, "echo.eureka", 1); err != nil {
		t.Errorf("during the outage: %v", err)
	}
	c.waitFor(t, b1.name, 10, 10*time.Second)

	// Restarted: Synced again.
	p.Start(t)
	eventually(t, 30*time.Second, "legacy Synced again", func() error {
		var h admin.RegistryHealth
		if code := m.getJSON(t, "/healthz/registries/legacy", &h); code != 200 {
			return fmt.Errorf("code %d state %s: %s", code, h.State, h.LastError)
		}
		return nil
	})
	c.waitFor(t, b1.name, 5, 10*time.Second)
	if err := m.stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
}

// endpointCount checks that host has n endpoints on endpointz.
func endpointCount(m *meshfed, host string, n int) error {
	got, err := hostEndpoints(m, host)
	if err != nil || got != n {
		return fmt.Errorf("%d endpoints (%v), want %d", got, err, n)
	}
	return nil
}

// deltaFetches checks on /metrics that the changes came through deltas.
func deltaFetches(m *meshfed) error {
	resp, err := http.Get("http://" + m.admin + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, `meshfed_eureka_fetches_total{registry="legacy",result="ok",type="delta"}`) {
			if f := strings.Fields(line); len(f) == 2 && f[1] != "0" {
				return nil
			}
		}
	}
	return fmt.Errorf("no successful delta fetch on /metrics")
}
