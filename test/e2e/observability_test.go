package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestObservabilityPack checks deploy/observability against a running
// meshfed: every expression of the Grafana dashboard and the
// PrometheusRule parses with Prometheus's PromQL parser, and every metric
// they use is on /metrics. The parser runs in tools/promcheck, a module
// of its own (Prometheus's dependency graph stays out of meshfed's
// go.mod).
func TestObservabilityPack(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	f := newFileSetup(t)
	m := startMeshfed(t, f.config, f.xdsAddr, f.adminAddr)
	m.waitReady(t, 20*time.Second)
	code, body, err := m.get("/metrics")
	if err != nil || code != 200 {
		t.Fatalf("/metrics: %d %v", code, err)
	}
	metrics := filepath.Join(t.TempDir(), "metrics.txt")
	if err := os.WriteFile(metrics, body, 0o644); err != nil {
		t.Fatal(err)
	}
	obs, err := filepath.Abs("../../deploy/observability")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", ".",
		"-metrics", metrics,
		"-dashboard", filepath.Join(obs, "grafana-dashboard.json"),
		"-rules", filepath.Join(obs, "prometheusrule.yaml"))
	cmd.Dir = "../../tools/promcheck"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promcheck: %v\n%s", err, out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
}
