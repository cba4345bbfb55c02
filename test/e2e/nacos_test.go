package e2e

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/meshfed/meshfed/test/servers"
)

// TestNacosRegistryToGRPCClient: instances registered through the Nacos
// SDK (gRPC, ephemeral, as applications register) in a real Nacos-protocol
// server (Polaris), then drained (weight 0) and deregistered,
// reach a grpc-go xDS client calling real gRPC backends; a stopped server
// leaves the registry Degraded with its endpoints served, and a restarted
// one brings it back to Synced.
//
// Instances are taken out of traffic with weight 0, not healthy=false:
// Polaris ties an ephemeral instance's health to its client's connection
// and sets it healthy again within about 3s (its Nacos v2 checker), so an
// unhealthy mark does not last long enough for the client to be seen
// avoiding it under load. healthy=false → UNHEALTHY is covered by
// registries/nacos.
func TestNacosRegistryToGRPCClient(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	p := servers.StartPolaris(t, servers.WithNacos())
	nc := p.NacosClient(t, "")
	backends := []*backend{startBackend(t, "x"), startBackend(t, "y")}
	// The service's port is the one most instances give, the smaller on a
	// tie: b1 takes the smaller port so that the port the client dials
	// stays the service's port while b1 is registered.
	sort.Slice(backends, func(i, j int) bool { return backends[i].port < backends[j].port })
	b1, b2 := backends[0], backends[1]
	inst := func(b *backend) servers.NacosInstance {
		return servers.NacosInstance{Service: "echo", IP: "127.0.0.1", Port: b.port,
			Metadata: map[string]string{"protocol": "grpc", "zone": "zone-a", "version": b.name}}
	}
	i1, i2 := inst(b1), inst(b2)
	nc.Register(t, i1)

	dir := t.TempDir()
	config, xdsAddr, adminAddr := writeClusters(t, dir, fmt.Sprintf(
		"  - name: nacos\n    kind: nacos\n    domain: nacos\n    nacos: {servers: [\"%s\"], listInterval: 1s}\n", p.NacosAddr))
	m := startMeshfed(t, config, xdsAddr, adminAddr)
	eventually(t, 30*time.Second, "echo.nacos served", func() error { return endpointCount(m, "echo.nacos", 1) })
	bootstrap, stderr, code := meshfedCmd(t, "bootstrap", "--grpc", "--config", config, "--node-id", "e2e-nacos")
	if code != 0 {
		t.Fatalf("bootstrap: exit %d: %s", code, stderr)
	}
	c := startClient(t, bootstrap, fmt.Sprintf("xds:///echo.nacos:%d", b1.port))
	c.waitFor(t, b1.name, 5, 30*time.Second)

	nc.Register(t, i2)
	eventually(t, 30*time.Second, "b2 in endpointz", func() error { return endpointCount(m, "echo.nacos", 2) })
	c.waitFor(t, b2.name, 1, 30*time.Second)

	// b1 drained → DRAINING: only b2 answers. (Not disabled: Nacos would
	// drop it from its answers, and with it the port the client dials.)
	i1.Drained = true
	nc.Register(t, i1)
	c.waitFor(t, b2.name, 20, 30*time.Second)
	// b1 back in, b2 drained: only b1 answers.
	i1.Drained = false
	nc.Register(t, i1)
	i2.Drained = true
	nc.Register(t, i2)
	c.waitFor(t, b1.name, 20, 30*time.Second)
	// b2 deregistered: gone from the endpoints, b1 still answers.
	nc.Deregister(t, i2)
	eventually(t, 30*time.Second, "b2 gone from endpointz", func() error { return endpointCount(m, "echo.nacos", 1) })
	c.waitFor(t, b1.name, 5, 10*time.Second)

	// Server stopped: Degraded, endpoints kept, the client keeps calling.
	p.Stop(t)
	waitRegistry(t, m, "nacos", "Degraded", 30*time.Second)
	if err := endpointCount(m, "echo.nacos", 1); err != nil {
		t.Errorf("during the outage: %v", err)
	}
	c.waitFor(t, b1.name, 10, 10*time.Second)

	// Restarted: a standalone Nacos forgets ephemeral instances until
	// their clients register again, so the registry may first offer an empty
	// state, which the default hold-down holds back (b1 stays served).
	// b1 registers again (a new client: the old one's reconnection is the
	// SDK's affair) and the registry is Synced with it.
	p.Start(t)
	p.NacosClient(t, "").Register(t, i1)
	waitRegistry(t, m, "nacos", "Synced", 60*time.Second)
	eventually(t, 30*time.Second, "b1 still served", func() error { return endpointCount(m, "echo.nacos", 1) })
	c.waitFor(t, b1.name, 5, 10*time.Second)
	if err := m.stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
}
