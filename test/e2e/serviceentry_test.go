package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/test/servers"
)

// seYAML is a ServiceEntry echo.mesh.example:8080 selecting the
// WorkloadEntries labelled app: echo, and a DNS ServiceEntry
// dns.mesh.example:8080 whose one endpoint is the hostname localhost.
func seYAML(dnsBackend *backend) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: shop}
spec:
  hosts: [echo.mesh.example]
  location: MESH_INTERNAL
  ports: [{number: 8080, name: grpc, protocol: GRPC}]
  resolution: STATIC
  workloadSelector: {labels: {app: echo}}
---
apiVersion: networking.istio.io/v1beta1
kind: ServiceEntry
metadata: {name: dns, namespace: shop}
spec:
  hosts: [dns.mesh.example]
  ports: [{number: 8080, name: grpc, protocol: GRPC, targetPort: %d}]
  resolution: DNS
  endpoints: [{address: localhost, locality: test/zone-a}]
`, dnsBackend.port)
}

// workloadEntry is a WorkloadEntry of namespace shop labelled app: echo.
func workloadEntry(name, address string, port int) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: %s, namespace: shop}
spec:
  address: %q
  ports: {grpc: %d}
  labels: {app: echo, backend: %s}
  locality: test/zone-a
`, name, address, port, name)
}

// TestServiceEntryRegistryToGRPCClient: a serviceentry registry over a
// directory of Istio YAML (ServiceEntries in one file, WorkloadEntries in
// another) reaches real grpc-go xDS clients through the built binary; a
// WorkloadEntry with a bad address is quarantined alone and listed on
// /debug/conflictz with its file:line while the others keep serving.
func TestServiceEntryRegistryToGRPCClient(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := t.TempDir()
	istio := filepath.Join(dir, "istio")
	if err := os.Mkdir(istio, 0o755); err != nil {
		t.Fatal(err)
	}
	b1, b2, b3 := startBackend(t, "b1"), startBackend(t, "b2"), startBackend(t, "b3")
	writeFile(t, filepath.Join(istio, "serviceentries.yaml"), seYAML(b3))
	wlFile := filepath.Join(istio, "workloads.yaml")
	writeFile(t, wlFile, workloadEntry("b1", "127.0.0.1", b1.port))
	config, xdsAddr, adminAddr := writeClusters(t, dir,
		"  - name: istio\n    kind: serviceentry\n    domain: mesh.example\n    serviceentry: {path: istio}\n")

	out, stderr, code := meshfedCmd(t, "validate", config)
	if code != 0 || !strings.Contains(out, "istio") {
		t.Fatalf("validate: exit %d, stdout %q, stderr %q", code, out, stderr)
	}

	m := startMeshfed(t, config, xdsAddr, adminAddr)
	m.waitReady(t, 20*time.Second)
	bootstrap, stderr, code := meshfedCmd(t, "bootstrap", "--grpc", "--config", config, "--node-id", "e2e-se")
	if code != 0 {
		t.Fatalf("bootstrap: exit %d: %s", code, stderr)
	}
	c := startClient(t, bootstrap, "xds:///echo.mesh.example:8080")
	c.waitFor(t, "b1", 5, 30*time.Second)

	// DNS resolution: the client resolves the endpoint's hostname itself.
	dns := startClient(t, bootstrap, "xds:///dns.mesh.example:8080")
	dns.waitFor(t, "b3", 5, 30*time.Second)

	// A bad WorkloadEntry address among good ones: quarantined alone.
	writeFile(t, wlFile, workloadEntry("b1", "127.0.0.1", b1.port)+"---\n"+
		workloadEntry("bad", "999.0.0.1", b1.port)+"---\n"+workloadEntry("b2", "127.0.0.1", b2.port))
	c.waitFor(t, "b2", 1, 15*time.Second)
	c.waitFor(t, "b1", 1, 15*time.Second)
	eventually(t, 10*time.Second, "the bad WorkloadEntry listed in /debug/conflictz", func() error {
		_, body, err := m.get("/debug/conflictz")
		if err != nil {
			return err
		}
		return contains(string(body), `999.0.0.1 (`, `workloads.yaml:10 WorkloadEntry shop/bad`, "echo.mesh.example", `"registry": "istio"`)
	})
	var eps []admin.EndpointInfo
	m.getJSON(t, "/debug/endpointz?host=echo.mesh.example", &eps)
	if len(eps) != 2 {
		t.Errorf("endpointz = %+v, want b1 and b2 served, the bad one quarantined", eps)
	}
	var h admin.RegistryHealth
	if code := m.getJSON(t, "/healthz/registries/istio", &h); code != 200 || h.Kind != "serviceentry" {
		t.Errorf("/healthz/registries/istio: %d %+v, want 200 Synced, kind serviceentry", code, h)
	}

	// A host outside the registry's domain is rejected alone.
	writeFile(t, filepath.Join(istio, "outside.yaml"), `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: outside, namespace: shop}
spec:
  hosts: [api.example.org, inside.mesh.example]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
`)
	eventually(t, 10*time.Second, "outside host listed, inside host served", func() error {
		_, body, err := m.get("/debug/conflictz")
		if err != nil {
			return err
		}
		if err := contains(string(body), `outside.yaml:5)`, `host rejected: it is outside the registry's domain \"mesh.example\"`); err != nil {
			return err
		}
		n, err := hostEndpoints(m, "inside.mesh.example")
		if err == nil && n != 1 {
			err = fmt.Errorf("inside.mesh.example has %d endpoints, want 1 (itself)", n)
		}
		return err
	})
	if _, body, err := m.get("/debug/registryz"); err != nil || strings.Contains(string(body), "api.example.org") {
		t.Errorf("/debug/registryz serves the host outside the domain: %s", body)
	}
	c.waitFor(t, "b2", 1, 10*time.Second)

	if err := m.stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, m.logs.String())
	}
}

// TestServiceEntryFromKubernetesToGRPCClient: a serviceentry registry
// reading a real kube-apiserver (Istio's CRDs installed; the cluster is a
// kubernetes registry whose credentials it reuses) reaches a grpc-go xDS
// client through the built binary: a WorkloadEntry's address change is
// followed, a bad address is quarantined alone and listed with
// namespace/name (cluster), deleting the ServiceEntry removes the service.
func TestServiceEntryFromKubernetesToGRPCClient(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	api := servers.StartKubeClusters(t, 1).Servers[0]
	api.InstallIstioCRDs(t)
	api.EnsureNamespace(t, "shop")
	istio := newIstioApplier(t, api)
	b1, b2, b3 := startBackend(t, "b1"), startBackend(t, "b2"), startBackend(t, "b3")
	istio.apply(seYAML(b3) + "---\n" + workloadEntry("b1", "127.0.0.1", b1.port))

	dir := t.TempDir()
	config, xdsAddr, adminAddr := writeClusters(t, dir,
		kubeEntry("east", api.WriteKubeconfig(t, "east", servers.AdminToken), "")+
			"  - name: istio\n    kind: serviceentry\n    domain: mesh.example\n    serviceentry: {kubernetes: {clusters: [east], namespaces: [shop]}}\n")
	if out, stderr, code := meshfedCmd(t, "validate", config); code != 0 || !strings.Contains(out, "istio") {
		t.Fatalf("validate: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	m := startMeshfed(t, config, xdsAddr, adminAddr)
	m.waitReady(t, 60*time.Second)
	bootstrap, stderr, code := meshfedCmd(t, "bootstrap", "--grpc", "--config", config, "--node-id", "e2e-se-kube")
	if code != 0 {
		t.Fatalf("bootstrap: exit %d: %s", code, stderr)
	}
	c := startClient(t, bootstrap, "xds:///echo.mesh.example:8080")
	c.waitFor(t, "b1", 5, 30*time.Second)
	dns := startClient(t, bootstrap, "xds:///dns.mesh.example:8080")
	dns.waitFor(t, "b3", 5, 30*time.Second)

	// The WorkloadEntry moves to b2's port: the client follows.
	istio.apply(workloadEntry("b1", "127.0.0.1", b2.port))
	c.waitFor(t, "b2", 5, 30*time.Second)

	// A bad address among good ones: quarantined alone.
	istio.apply(workloadEntry("bad", "999.0.0.1", b1.port) + "---\n" + workloadEntry("b3", "127.0.0.1", b3.port))
	c.waitFor(t, "b3", 1, 30*time.Second)
	c.waitFor(t, "b2", 1, 30*time.Second)
	eventually(t, 20*time.Second, "the bad WorkloadEntry listed in /debug/conflictz", func() error {
		_, body, err := m.get("/debug/conflictz")
		if err != nil {
			return err
		}
		return contains(string(body), `999.0.0.1 (shop/bad (east) WorkloadEntry shop/bad)`, "echo.mesh.example", `"registry": "istio"`)
	})
	var eps []admin.EndpointInfo
	m.getJSON(t, "/debug/endpointz?host=echo.mesh.example", &eps)
	if len(eps) != 2 {
		t.Errorf("endpointz = %+v, want b1 (now on b2's port) and b3 served, the bad one quarantined", eps)
	}

	// Deleting the ServiceEntry removes the service.
	istio.delete("ServiceEntry", "shop", "echo")
	eventually(t, 90*time.Second, "echo.mesh.example gone", func() error {
		if _, body, err := m.get("/debug/registryz"); err != nil || strings.Contains(string(body), "echo.mesh.example") {
			return fmt.Errorf("still served (%v)", err)
		}
		return nil
	})

	if err := m.stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, m.logs.String())
	}
}
