package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/admin"
)

func servicesYAML(endpoints ...string) string {
	var b strings.Builder
	b.WriteString("services:\n  - name: echo\n    ports:\n      - {name: grpc, port: 8080, protocol: GRPC}\n    endpoints:\n")
	for _, e := range endpoints {
		b.WriteString("      - " + e + "\n")
	}
	return b.String()
}

func localEndpoint(b *backend, version string) string {
	return fmt.Sprintf("{address: 127.0.0.1, ports: {grpc: %d}, labels: {version: %s}, locality: test/zone-a}", b.port, version)
}

// fileSetup is a file registry "vms" (domain vm.internal) whose services
// file serves echo.vm.internal:8080 from backend b1; b2 is ready for edits.
type fileSetup struct {
	b1, b2             *backend
	svcFile, config    string
	xdsAddr, adminAddr string
}

func newFileSetup(t *testing.T) fileSetup {
	t.Helper()
	dir := t.TempDir()
	f := fileSetup{b1: startBackend(t, "b1"), b2: startBackend(t, "b2"), svcFile: filepath.Join(dir, "services.yaml")}
	writeFile(t, f.svcFile, servicesYAML(localEndpoint(f.b1, "v1")))
	f.config, f.xdsAddr, f.adminAddr = writeClusters(t, dir,
		"  - name: vms\n    kind: file\n    domain: vm.internal\n    file: {path: services.yaml}\n")
	return f
}

// TestFileRegistryToGRPCClient drives the whole pipeline with the built
// binary: a services file → meshfed → a grpc-go xDS client calling real
// gRPC backends, through edits, a broken edit and a SIGTERM.
func TestFileRegistryToGRPCClient(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	f := newFileSetup(t)
	b1, b2, svcFile, config := f.b1, f.b2, f.svcFile, f.config

	out, stderr, code := meshfedCmd(t, "validate", config)
	if code != 0 || !strings.Contains(out, "vms") {
		t.Fatalf("validate: exit %d, stdout %q, stderr %q", code, out, stderr)
	}

	m := startMeshfed(t, config, f.xdsAddr, f.adminAddr)
	m.waitReady(t, 20*time.Second)

	bootstrap, stderr, code := meshfedCmd(t, "bootstrap", "--grpc", "--config", config, "--node-id", "e2e-client")
	if code != 0 {
		t.Fatalf("bootstrap: exit %d: %s", code, stderr)
	}
	if err := contains(bootstrap, f.xdsAddr, `"GENERATOR"`, `"grpc"`, "e2e-client"); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}

	c := startClient(t, bootstrap, "xds:///echo.vm.internal:8080")
	c.waitFor(t, "b1", 5, 30*time.Second)

	connectedAt := proxyConnected(t, m, "e2e-client")

	// Second backend added, first removed: the client follows.
	writeFile(t, svcFile, servicesYAML(localEndpoint(b2, "v2")))
	c.waitFor(t, "b2", 10, 15*time.Second)
	if got := proxyConnected(t, m, "e2e-client"); !got.Equal(connectedAt) {
		t.Errorf("client reconnected: stream connected at %v, now %v", connectedAt, got)
	}

	// A broken edit: the registry is Degraded, names the line, and the
	// client keeps reaching b2.
	writeFile(t, svcFile, servicesYAML(localEndpoint(b2, "v2"))+"      - {address: 10.0.0.9, health: SICK}\n")
	eventually(t, 10*time.Second, "vms shows Degraded", func() error {
		var h admin.RegistryHealth
		code := m.getJSON(t, "/healthz/registries/vms", &h)
		if code != 503 || h.State.String() != "Degraded" {
			return fmt.Errorf("code %d state %s", code, h.State)
		}
		return contains(h.LastError, "services.yaml:", "SICK")
	})
	c.waitFor(t, "b2", 10, 10*time.Second)
	var eps []admin.EndpointInfo
	m.getJSON(t, "/debug/endpointz?host=echo.vm.internal", &eps)
	if len(eps) != 1 || eps[0].Ports["grpc"] != uint32(b2.port) || eps[0].Locality != "test/zone-a" {
		t.Errorf("endpointz after broken edit = %+v, want only b2 on port %d", eps, b2.port)
	}

	// A bad address is quarantined alone and listed; the rest is served.
	writeFile(t, svcFile, servicesYAML(localEndpoint(b2, "v2"), "{address: not-an-ip}", localEndpoint(b1, "v1")))
	eventually(t, 10*time.Second, "bad address listed in /debug/conflictz", func() error {
		_, body, err := m.get("/debug/conflictz")
		if err != nil {
			return err
		}
		return contains(string(body), "not-an-ip", "echo.vm.internal")
	})
	eventually(t, 10*time.Second, "vms back to Synced", func() error {
		var h admin.RegistryHealth
		if code := m.getJSON(t, "/healthz/registries/vms", &h); code != 200 {
			return fmt.Errorf("code %d state %s: %s", code, h.State, h.LastError)
		}
		return nil
	})
	m.getJSON(t, "/debug/endpointz?host=echo.vm.internal", &eps)
	if len(eps) != 2 {
		t.Errorf("endpointz = %+v, want b1 and b2 served, the bad one quarantined", eps)
	}
	c.waitFor(t, "b1", 1, 15*time.Second)
	c.waitFor(t, "b2", 1, 15*time.Second)

	status, stderr, code := meshfedCmd(t, "status", "--config", config)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, stderr)
	}
	if err := contains(status, "vms", "Synced", "e2e-client", "EDS", "SYNCED"); err != nil {
		t.Errorf("status output: %v\n%s", err, status)
	}

	if err := m.stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, m.logs.String())
	}
}

// proxyConnected returns when the proxy's current ADS stream was opened.
func proxyConnected(t *testing.T, m *meshfed, id string) time.Time {
	t.Helper()
	var at time.Time
	eventually(t, 10*time.Second, "proxy "+id+" in /debug/syncz", func() error {
		var proxies []admin.ProxySync
		_, body, err := m.get("/debug/syncz")
		if err != nil {
			return err
		}
		if err := json.Unmarshal(body, &proxies); err != nil {
			return err
		}
		for _, p := range proxies {
			if p.ID == id {
				at = p.Connected
				return nil
			}
		}
		return fmt.Errorf("not listed: %s", body)
	})
	return at
}

// TestFileRegistryToGRPCJSClient proves the proxyless resources also work
// for grpc-js-xds, whose bootstrap must carry a node locality.
func TestFileRegistryToGRPCJSClient(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	f := newFileSetup(t)
	m := startMeshfed(t, f.config, f.xdsAddr, f.adminAddr)

	bootstrap, stderr, code := meshfedCmd(t, "bootstrap", "--grpc", "--config", f.config, "--node-id", "e2e-js", "--locality", "test/zone-a")
	if code != 0 {
		t.Fatalf("bootstrap: exit %d: %s", code, stderr)
	}
	c := startJSClient(t, bootstrap, "xds:///echo.vm.internal:8080")
	c.waitFor(t, "b1", 5, 30*time.Second)
	writeFile(t, f.svcFile, servicesYAML(localEndpoint(f.b2, "v2")))
	c.waitFor(t, "b2", 10, 15*time.Second)
	proxyConnected(t, m, "e2e-js")
}

// TestFileRegistryDirectory: a file registry over a directory of services
// files, one team one file. Editing one file moves the grpc-go client; a
// second declaration of the same service in another file is listed as a
// conflict naming both files while the first keeps being served; a
// broken file is reported with its file:line and the other files keep
// serving.
func TestFileRegistryDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := t.TempDir()
	confD := filepath.Join(dir, "services.d")
	if err := os.Mkdir(confD, 0o755); err != nil {
		t.Fatal(err)
	}
	b1, b2 := startBackend(t, "b1"), startBackend(t, "b2")
	teamA, teamB, teamC := filepath.Join(confD, "team-a.yaml"), filepath.Join(confD, "team-b.yaml"), filepath.Join(confD, "team-c.yaml")
	other := func(name, addr string) string {
		return "services:\n  - name: " + name + "\n    ports:\n      - {name: http, port: 80, protocol: HTTP}\n    endpoints:\n      - address: " + addr + "\n"
	}
	writeFile(t, teamA, servicesYAML(localEndpoint(b1, "v1")))
	writeFile(t, teamB, other("orders", "10.1.0.1"))
	writeFile(t, teamC, other("billing", "10.2.0.1"))
	config, xdsAddr, adminAddr := writeClusters(t, dir,
		"  - name: vms\n    kind: file\n    domain: vm.internal\n    file: {path: services.d}\n")
	m := startMeshfed(t, config, xdsAddr, adminAddr)
	bootstrap, stderr, code := meshfedCmd(t, "bootstrap", "--grpc", "--config", config, "--node-id", "e2e-dir")
	if code != 0 {
		t.Fatalf("bootstrap: exit %d: %s", code, stderr)
	}
	c := startClient(t, bootstrap, "xds:///echo.vm.internal:8080")
	c.waitFor(t, "b1", 5, 30*time.Second)
	for _, host := range []string{"orders.vm.internal", "billing.vm.internal"} {
		eventually(t, 10*time.Second, host+" served", func() error {
			if n, err := hostEndpoints(m, host); err != nil || n != 1 {
				return fmt.Errorf("%d endpoints, %v", n, err)
			}
			return nil
		})
	}

	// Edit one file of three: the client follows.
	writeFile(t, teamA, servicesYAML(localEndpoint(b2, "v2")))
	c.waitFor(t, "b2", 10, 15*time.Second)

	// team-c declares echo too: a conflict naming both files; team-a's
	// declaration (first in path order) is still the one served.
	writeFile(t, teamC, other("billing", "10.2.0.1")+"  - name: echo\n    ports:\n      - {name: grpc, port: 8080, protocol: GRPC}\n    endpoints:\n      - address: 10.3.0.1\n")
	eventually(t, 10*time.Second, "the conflict listed in /debug/conflictz", func() error {
		_, body, err := m.get("/debug/conflictz")
		if err != nil {
			return err
		}
		return contains(string(body), "echo.vm.internal", "team-a.yaml", "team-c.yaml")
	})
	c.waitFor(t, "b2", 10, 15*time.Second)

	// team-b breaks: Degraded naming team-b.yaml:line; orders keeps its
	// last good endpoint, the other files keep serving.
	writeFile(t, teamB, other("orders", "10.1.0.1")+"        health: SICK\n")
	eventually(t, 10*time.Second, "vms shows Degraded naming team-b.yaml", func() error {
		var h admin.RegistryHealth
		code := m.getJSON(t, "/healthz/registries/vms", &h)
		if code != 503 || h.State.String() != "Degraded" {
			return fmt.Errorf("code %d state %s", code, h.State)
		}
		return contains(h.LastError, "team-b.yaml:7:", "SICK")
	})
	if n, err := hostEndpoints(m, "orders.vm.internal"); err != nil || n != 1 {
		t.Errorf("orders after its file broke: %d endpoints (%v), want its last good one", n, err)
	}
	writeFile(t, teamA, servicesYAML(localEndpoint(b1, "v1")))
	c.waitFor(t, "b1", 10, 15*time.Second)

	// Removing a file removes its services.
	if err := os.Remove(teamC); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "billing withdrawn", func() error {
		code, body, err := m.get("/debug/endpointz?host=billing.vm.internal")
		if err != nil || code != 404 {
			return fmt.Errorf("status %d: %s %v", code, body, err)
		}
		return nil
	})
	if err := m.stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, m.logs.String())
	}
}
