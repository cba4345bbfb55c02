package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/test/servers"
)

// istiodConfig is one config of istiod's /debug/configz.
type istiodConfig struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Hosts     []string `json:"hosts"`
		Endpoints []struct {
			Address string            `json:"address"`
			Ports   map[string]uint32 `json:"ports"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// istiodServiceEntries returns the ServiceEntries istiod holds, by name.
func istiodServiceEntries(d *servers.Istiod) (map[string]istiodConfig, error) {
	b, err := d.Get("/debug/configz")
	if err != nil {
		return nil, err
	}
	var all []istiodConfig
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, fmt.Errorf("configz: %v", err)
	}
	out := map[string]istiodConfig{}
	for _, c := range all {
		if c.Kind == "ServiceEntry" {
			out[c.Metadata.Name] = c
		}
	}
	return out, nil
}

// istiodHasEndpoints waits until istiod's ServiceEntry name lists exactly
// the addresses want.
func istiodHasEndpoints(t *testing.T, d *servers.Istiod, name string, want ...string) istiodConfig {
	t.Helper()
	var se istiodConfig
	eventually(t, 30*time.Second, "istiod ServiceEntry "+name+" has "+strings.Join(want, ","), func() error {
		ses, err := istiodServiceEntries(d)
		if err != nil {
			return err
		}
		var ok bool
		if se, ok = ses[name]; !ok {
			return fmt.Errorf("no ServiceEntry %s", name)
		}
		var got []string
		for _, e := range se.Spec.Endpoints {
			got = append(got, e.Address)
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			return fmt.Errorf("endpoints %v", got)
		}
		return nil
	})
	return se
}

// TestIstiodServesTheFederation runs a real istiod whose only config source
// is meshfed (MCP over xDS), with a file registry and ZooKeeper behind
// meshfed and grpc-go xDS clients bootstrapped against istiod.
func TestIstiodServesTheFederation(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	if _, ok := servers.IstiodBinary(); !ok {
		servers.Missing(t, "istiod "+servers.IstiodVersion, "tools/testservers/build.sh istiod")
	}
	z := servers.StartZooKeeper(t)
	b1 := startBackendOn(t, "b1", "127.0.0.1", 0)
	b2 := startBackendOn(t, "b2", "127.0.0.2", 0)
	zb := startBackendOn(t, "zb", "127.0.0.3", 0)

	dir := t.TempDir()
	svcFile := filepath.Join(dir, "services.yaml")
	endpoint := func(b *backend) string {
		return fmt.Sprintf("{address: %s, ports: {grpc: %d}, labels: {version: %s}, locality: test/zone-a}", b.host, b.port, b.name)
	}
	writeFile(t, svcFile, servicesYAML(endpoint(b1)))
	config, xdsAddr, adminAddr := writeClusters(t, dir, fmt.Sprintf(
		"  - name: vms\n    kind: file\n    domain: vm.internal\n    file: {path: services.yaml}\n"+
			"  - name: spring\n    kind: zookeeper\n    domain: zk\n    zookeeper: {servers: [%q], layout: curator, root: /services}\n", z.Addr()))
	zs := zkSession(t, z.Addr())
	registerCuratorInstance(t, zs, "echo", "i-1", zb)
	// An instance the gate quarantines (not an IP address): it must never
	// reach istiod.
	registerCuratorInstance(t, zs, "echo", "i-bad", &backend{name: "bad", host: "999.1.1.1", port: zb.port})

	m := startMeshfed(t, config, xdsAddr, adminAddr)
	snippet, stderr, code := meshfedCmd(t, "bootstrap", "--istio", "--config", config)
	if code != 0 || !strings.Contains(snippet, "xds://"+xdsAddr) {
		t.Fatalf("bootstrap --istio: exit %d, %q, %s", code, snippet, stderr)
	}
	d := servers.StartIstiod(t, servers.IstiodOptions{ConfigSource: xdsAddr})

	// istiod holds the ServiceEntries with their source labels.
	se := istiodHasEndpoints(t, d, "echo.vm.internal", "127.0.0.1")
	t.Logf("istiod holds ServiceEntry %s/%s labels %v endpoints %+v", se.Metadata.Namespace, se.Metadata.Name, se.Metadata.Labels, se.Spec.Endpoints)
	if se.Metadata.Namespace != "meshfed" || se.Metadata.Labels["meshfed.io/registries"] != "vms" ||
		se.Spec.Endpoints[0].Ports["grpc"] != uint32(b1.port) {
		t.Errorf("istiod's echo.vm.internal: %+v", se)
	}
	zse := istiodHasEndpoints(t, d, "echo.zk", "127.0.0.3")
	if zse.Metadata.Labels["registry.meshfed.io/spring"] != "true" {
		t.Errorf("istiod's echo.zk labels: %v", zse.Metadata.Labels)
	}
	var conflicts []map[string]any
	m.getJSON(t, "/debug/conflictz", &conflicts)
	if b, _ := json.Marshal(conflicts); !strings.Contains(string(b), "999.1.1.1") {
		t.Errorf("conflictz does not list the quarantined instance: %s", b)
	}

	// grpc-go clients bootstrapped against istiod reach both registries'
	// backends.
	bootstrap, stderr, code := meshfedCmd(t, "bootstrap", "--grpc", "--xds", d.GRPCAddr,
		"--node-id", "sidecar~127.0.0.1~client.default~default.svc.cluster.local")
	if code != 0 {
		t.Fatalf("bootstrap: exit %d: %s", code, stderr)
	}
	c := startClient(t, bootstrap, "xds:///echo.vm.internal:8080")
	c.waitFor(t, "b1", 3, 60*time.Second)
	zc := startClient(t, bootstrap, fmt.Sprintf("xds:///echo.zk:%d", zb.port))
	zc.waitFor(t, "zb", 3, 60*time.Second)

	// A registry change reaches the client through istiod.
	writeFile(t, svcFile, servicesYAML(endpoint(b2)))
	istiodHasEndpoints(t, d, "echo.vm.internal", "127.0.0.2")
	c.waitFor(t, "b2", 10, 30*time.Second)

	// meshfed restarts while istiod runs: istiod keeps serving what it
	// had, then resyncs (here: an edit made while meshfed was down).
	if err := m.stop(15 * time.Second); err != nil {
		t.Fatalf("meshfed stop: %v", err)
	}
	c.waitFor(t, "b2", 10, 20*time.Second)
	zc.waitFor(t, "zb", 10, 20*time.Second)
	istiodHasEndpoints(t, d, "echo.vm.internal", "127.0.0.2")
	writeFile(t, svcFile, servicesYAML(endpoint(b1)))
	m2 := startMeshfed(t, config, xdsAddr, adminAddr)
	istiodHasEndpoints(t, d, "echo.vm.internal", "127.0.0.1")
	c.waitFor(t, "b1", 10, 60*time.Second)

	// A ZooKeeper outage keeps istiod's view and the client's endpoints.
	z.Stop()
	eventually(t, 60*time.Second, "meshfed sees the ZooKeeper outage", func() error {
		var h struct {
			State string `json:"state"`
		}
		m2.getJSON(t, "/healthz/registries/spring", &h)
		if h.State != "Degraded" && h.State != "Stale" {
			return fmt.Errorf("state %s", h.State)
		}
		return nil
	})
	zc.waitFor(t, "zb", 20, 30*time.Second)
	istiodHasEndpoints(t, d, "echo.zk", "127.0.0.3")

	// Nothing quarantined ever reached istiod.
	if strings.Contains(d.Log(), "999.1.1.1") {
		t.Error("istiod's log mentions the quarantined address")
	}
	ses, err := istiodServiceEntries(d)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(ses); strings.Contains(string(b), "999.1.1.1") {
		t.Errorf("istiod holds the quarantined address: %s", b)
	}
}
