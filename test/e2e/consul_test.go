package e2e

import (
	"fmt"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"

	"github.com/meshfed/meshfed/test/servers"
)

// TestConsulToGRPCClient registers instances through a real Consul agent's
// API and follows registration, TTL health and deregistration through
// meshfed to a grpc-go xDS client.
func TestConsulToGRPCClient(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	agent := servers.StartConsul(t, servers.ConsulOptions{Dev: true})
	b1 := startBackend(t, "b1")
	b2 := startBackendOn(t, "b2", "127.0.0.2", b1.port)

	dir := t.TempDir()
	config, xdsAddr, adminAddr := writeClusters(t, dir, fmt.Sprintf(
		"  - name: dc1\n    kind: consul\n    domain: dc1.consul\n    consul: {address: %q, waitTime: 10s}\n", agent.HTTPAddr))
	m := startMeshfed(t, config, xdsAddr, adminAddr)

	cc, err := capi.NewClient(&capi.Config{Address: agent.HTTPAddr})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []*backend{b1, b2} {
		reg := &capi.AgentServiceRegistration{
			ID: "echo-" + b.name, Name: "echo", Address: b.host, Port: b.port,
			Tags: []string{"version=" + b.name}, Meta: map[string]string{"protocol": "grpc"},
			Check: &capi.AgentServiceCheck{CheckID: "ttl-" + b.name, TTL: "5m", Status: capi.HealthPassing},
		}
		if err := cc.Agent().ServiceRegister(reg); err != nil {
			t.Fatal(err)
		}
	}

	bootstrap, stderr, code := meshfedCmd(t, "bootstrap", "--grpc", "--config", config, "--node-id", "consul-client")
	if code != 0 {
		t.Fatalf("bootstrap: exit %d: %s", code, stderr)
	}
	c := startClient(t, bootstrap, fmt.Sprintf("xds:///echo.dc1.consul:%d", b1.port))
	c.waitFor(t, "b1", 1, 30*time.Second)
	c.waitFor(t, "b2", 1, 15*time.Second)

	// b1's TTL check goes critical: EDS marks it UNHEALTHY and the client
	// stops using it.
	if err := cc.Agent().UpdateTTL("ttl-b1", "test says critical", capi.HealthCritical); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, "b2", 20, 20*time.Second)
	eventually(t, 10*time.Second, "config_dump shows b1 UNHEALTHY", func() error {
		return edsHealth(m, "consul-client", "echo.dc1.consul", b1.port, "127.0.0.1", "UNHEALTHY")
	})

	// Passing again: HEALTHY, and the client uses b1 again.
	if err := cc.Agent().UpdateTTL("ttl-b1", "", capi.HealthPassing); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, "b1", 1, 20*time.Second)
	eventually(t, 10*time.Second, "config_dump shows b1 HEALTHY", func() error {
		return edsHealth(m, "consul-client", "echo.dc1.consul", b1.port, "127.0.0.1", "HEALTHY")
	})

	// Deregistered: gone.
	if err := cc.Agent().ServiceDeregister("echo-b1"); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, "b2", 20, 20*time.Second)
}

// edsHealth checks the health status that proxy was served (and ACKed)
// for the endpoint at address in cluster outbound|<port>||<host>.
func edsHealth(m *meshfed, proxy, host string, port int, address, want string) error {
	eps, err := servedCLA(m, proxy, host, port)
	if err != nil {
		return err
	}
	for _, e := range eps {
		if e.addr == address {
			if e.health != want {
				return fmt.Errorf("endpoint %s is %s, want %s", address, e.health, want)
			}
			return nil
		}
	}
	return fmt.Errorf("endpoint %s not served: %+v", address, eps)
}
