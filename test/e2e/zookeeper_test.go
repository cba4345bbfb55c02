package e2e

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/meshfed/meshfed/test/servers"
)

// TestZooKeeperToGRPCClient registers Curator instances as Spring Cloud
// Zookeeper does (ephemeral nodes of a provider's own session) and follows
// them through meshfed to a grpc-go xDS client.
func TestZooKeeperToGRPCClient(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	z := servers.StartZooKeeper(t)
	b1 := startBackend(t, "b1")
	b2 := startBackendOn(t, "b2", "127.0.0.2", b1.port)

	dir := t.TempDir()
	config, xdsAddr, adminAddr := writeClusters(t, dir, fmt.Sprintf(
		"  - name: spring\n    kind: zookeeper\n    domain: zk\n    zookeeper: {servers: [%q], layout: curator, root: /services}\n", z.Addr()))
	m := startMeshfed(t, config, xdsAddr, adminAddr)

	p1 := zkSession(t, z.Addr())
	registerCuratorInstance(t, p1, "echo", "i-1", b1)
	p2 := zkSession(t, z.Addr())
	registerCuratorInstance(t, p2, "echo", "i-2", b2)

	bootstrap, stderr, code := meshfedCmd(t, "bootstrap", "--grpc", "--config", config, "--node-id", "zk-client")
	if code != 0 {
		t.Fatalf("bootstrap: exit %d: %s", code, stderr)
	}
	c := startClient(t, bootstrap, fmt.Sprintf("xds:///echo.zk:%d", b1.port))
	c.waitFor(t, "b1", 1, 30*time.Second)
	c.waitFor(t, "b2", 1, 15*time.Second)

	// The first provider's session closes: its ephemeral node and its
	// endpoint leave.
	p1.Close()
	c.waitFor(t, "b2", 20, 20*time.Second)
	var eps []struct {
		Address string `json:"address"`
	}
	m.getJSON(t, "/debug/endpointz?host=echo.zk", &eps)
	if len(eps) != 1 || eps[0].Address != "127.0.0.2" {
		t.Errorf("endpointz = %+v, want only 127.0.0.2", eps)
	}
}

func zkSession(t *testing.T, addr string) *zk.Conn {
	t.Helper()
	c, ev, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	deadline := time.After(15 * time.Second)
	for {
		select {
		case e := <-ev:
			if e.State == zk.StateHasSession {
				return c
			}
		case <-deadline:
			t.Fatal("no ZooKeeper session")
		}
	}
}

// registerCuratorInstance writes <root>/<service>/<id> as Curator's
// ServiceDiscovery does for Spring Cloud Zookeeper.
func registerCuratorInstance(t *testing.T, c *zk.Conn, service, id string, b *backend) {
	t.Helper()
	data, err := json.Marshal(map[string]any{
		"name": service, "id": id, "address": b.host, "port": b.port, "sslPort": nil,
		"payload": map[string]any{
			"@class":   "org.springframework.cloud.zookeeper.discovery.ZookeeperInstance",
			"id":       service + "-" + id,
			"name":     service,
			"metadata": map[string]string{"instance_status": "UP", "version": b.name},
		},
		"registrationTimeUTC": time.Now().UnixMilli(),
		"serviceType":         "DYNAMIC",
		"uriSpec": map[string]any{"parts": []map[string]any{
			{"value": "scheme", "variable": true}, {"value": "://", "variable": false},
			{"value": "address", "variable": true}, {"value": ":", "variable": false},
			{"value": "port", "variable": true},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/services", "/services/" + service} {
		if _, err := c.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			t.Fatalf("create %s: %v", p, err)
		}
	}
	if _, err := c.Create("/services/"+service+"/"+id, data, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("register %s: %v", id, err)
	}
}
