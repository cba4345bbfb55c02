package gateway

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/config"
)

// TestKubeConfigSourceUnreachableHoldsReady: a restart while the API
// server of a Kubernetes config source is unreachable. Its
// VirtualServices and DestinationRules are not saved across restarts, so
// serving without them (e.g. no TLS origination) could black-hole hosts:
// /readyz stays 503 naming the cluster, and xDS does not serve, also
// after syncTimeout (which releases the registries), until
// configSyncTimeout (2×syncTimeout); then it serves without, saying so.
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
	const syncTimeout = 1 * time.Second
	cfg, err := config.Parse(filepath.Join(dir, "clusters.yaml"), []byte(`xds: {address: "`+freeAddr(t)+`"}
admin: {address: "`+freeAddr(t)+`"}
debounce: {quiet: 1ms, max: 10ms}
syncTimeout: 1s
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
	// The registries are released by syncTimeout; the config source holds
	// xDS and /readyz until configSyncTimeout (2×syncTimeout), then the
	// gateway serves without it and /readyz says so.
	sawHeld := false
	deadline := time.Now().Add(30 * time.Second)
	for !g.serving.Load() {
		if time.Now().After(deadline) {
			t.Fatal("xDS not serving 30s after start: the config source wait has no end")
		}
		code, body := readyz()
		reason, _ := body["reason"].(string)
		if ok, _ := g.agg.Ready(); ok && !g.serving.Load() {
			if code != 503 || !strings.Contains(reason, "config source k8s cluster east") {
				t.Fatalf("readyz = %d %v, want 503 waiting for config source k8s cluster east", code, body)
			}
			sawHeld = true
		}
		time.Sleep(20 * time.Millisecond)
	}
	if since := time.Since(g.started); since < configSyncFactor*syncTimeout {
		t.Errorf("xDS served %s after start, before configSyncTimeout %s", since, configSyncFactor*syncTimeout)
	}
	if !sawHeld {
		t.Error("never saw the registries ready while the config source held readiness")
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		code, body := readyz()
		reason, _ := body["reason"].(string)
		if code == 200 && strings.Contains(reason, "no sync within configSyncTimeout") && strings.Contains(reason, "config source k8s cluster east") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz = %d %v, want 200 naming the config source served without", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
