package federation

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKubeConfigSourceUnreachableHoldsReady: a restart while the API
// server of a Kubernetes config source is unreachable. Its
// VirtualServices and DestinationRules are not saved across restarts, so
// serving without them (e.g. no TLS origination) could black-hole hosts:
// /readyz stays 503 naming the cluster, and xDS does not serve, also
// well after syncTimeout (which releases the registries).
func TestKubeConfigSourceUnreachableHoldsReady(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	down := "https://" + freeAddr(t) // nothing listens there
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+down+`", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: ctx, context: {cluster: c, user: u}}]
current-context: ctx
`), 0o600); err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, filepath.Join(dir, "s.yaml"), svcFile("10.0.0.1"))
	const syncTimeout = 300 * time.Millisecond
	cfg, err := Parse(filepath.Join(dir, "clusters.yaml"), []byte(`xds: {address: "`+freeAddr(t)+`"}
admin: {address: "`+freeAddr(t)+`"}
debounce: {quiet: 1ms, max: 10ms}
syncTimeout: 300ms
registries:
  - {name: vms, kind: file, domain: vm.internal, file: {path: s.yaml}}
  - {name: east, kind: kubernetes, domain: svc.cluster.local, kubernetes: {kubeconfig: kubeconfig}}
configSources:
  - {name: k8s, kubernetes: {clusters: [east]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGateway(cfg, GatewayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	runGateway(t, g)
	readyz := func() (int, map[string]any) {
		rec := httptest.NewRecorder()
		g.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("readyz: %v %s", err, rec.Body)
		}
		return rec.Code, body
	}
	// The registries are released by syncTimeout; the config source is not.
	time.Sleep(5 * syncTimeout)
	if ok, why := g.agg.Ready(); !ok {
		t.Fatalf("registries not ready after syncTimeout: %s", why)
	}
	code, body := readyz()
	reason, _ := body["reason"].(string)
	if code != 503 || !strings.Contains(reason, "config source k8s cluster east") {
		t.Fatalf("readyz = %d %v, want 503 waiting for config source k8s cluster east", code, body)
	}
	if g.serving.Load() {
		t.Error("xDS serves without the Kubernetes config source's rules")
	}
}
