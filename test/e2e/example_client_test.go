package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/test/servers"
)

// exampleSetup runs the built meshfed on a copy of the default
// clusters.yaml (xDS and admin moved to free ports, state in a temp dir)
// over servicesYAML, and writes a gRPC bootstrap for it.
func exampleSetup(t *testing.T, servicesYAML string) (bootstrap string) {
	t.Helper()
	dir := t.TempDir()
	def, err := os.ReadFile("../../clusters.yaml")
	if err != nil {
		t.Fatal(err)
	}
	xdsAddr := fmt.Sprintf("127.0.0.1:%d", servers.LowPort(t))
	adminAddr := fmt.Sprintf("127.0.0.1:%d", servers.LowPort(t))
	cfg := string(def)
	for old, repl := range map[string]string{
		"address: 127.0.0.1:15010":     "address: " + xdsAddr,
		"address: 127.0.0.1:15014":     "address: " + adminAddr,
		"path: examples/services.yaml": "path: services.yaml",
		"dir: .meshfed/state":          "dir: state",
	} {
		if !strings.Contains(cfg, old) {
			t.Fatalf("default clusters.yaml no longer has %q", old)
		}
		cfg = strings.Replace(cfg, old, repl, 1)
	}
	config := filepath.Join(dir, "clusters.yaml")
	writeFile(t, config, cfg)
	writeFile(t, filepath.Join(dir, "services.yaml"), servicesYAML)

	m := startMeshfed(t, config, xdsAddr, adminAddr)
	eventually(t, 20*time.Second, "/readyz is 200", func() error {
		code, body, err := m.get("/readyz")
		if err != nil || code != 200 {
			return fmt.Errorf("%d %s %v", code, body, err)
		}
		return nil
	})
	bs, stderr, code := meshfedCmd(t, "bootstrap", "--grpc", "--config", config)
	if code != 0 {
		t.Fatalf("bootstrap: exit %d: %s", code, stderr)
	}
	bootstrap = filepath.Join(dir, "bootstrap.json")
	writeFile(t, bootstrap, bs)
	return bootstrap
}

// runExampleClient runs examples/grpc-client to completion (it exits by
// itself; the deadline only guards the test).
func runExampleClient(t *testing.T, bootstrap string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	cmd := exec.Command(exampleClientBin, args...)
	cmd.Env = append(os.Environ(), "GRPC_XDS_BOOTSTRAP="+bootstrap)
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("grpc-client %v did not exit within 60s\nstdout:\n%s\nstderr:\n%s", args, o.String(), e.String())
	}
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// TestExampleGRPCClientQuickstart runs the README quickstart: meshfed on
// the default config and examples/services.yaml, no servers. The example
// client lists the endpoints of orders.vm.internal:8080, says nobody
// answers, and exits 0.
func TestExampleGRPCClientQuickstart(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	svc, err := os.ReadFile("../../examples/services.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bootstrap := exampleSetup(t, string(svc))
	out, stderr, code := runExampleClient(t, bootstrap, "-target", "xds:///orders.vm.internal:8080", "-n", "1", "-timeout", "20s")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	if err := contains(out, "resolved xds:///orders.vm.internal:8080 via xDS",
		"127.0.0.1:18080", "127.0.0.11:8080", "connectivity state:", "health check 1:"); err != nil {
		t.Errorf("%v\n%s", err, out)
	}
	// 18080 may be taken on a developer's machine; nothing should listen
	// on 127.0.0.11:8080.
	if !strings.Contains(out, "127.0.0.11:8080        no server: connection refused") {
		t.Errorf("127.0.0.11:8080 not reported as refused:\n%s", out)
	}
}

// TestExampleGRPCClientCallsServer registers a real gRPC health server
// (127.0.0.1, a port below 32768) and a dead endpoint for
// orders.vm.internal: the client lists both, and every health check is
// answered by the live one.
func TestExampleGRPCClientCallsServer(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	live := startBackendOn(t, "live", "127.0.0.1", servers.LowPort(t))
	dead := servers.LowPort(t)
	bootstrap := exampleSetup(t, fmt.Sprintf(`services:
  - name: orders
    ports:
      - {name: grpc, port: 8080, protocol: GRPC}
    endpoints:
      - {address: 127.0.0.1, ports: {grpc: %d}}
      - {address: 127.0.0.2, ports: {grpc: %d}}
`, live.port, dead))
	liveAddr := fmt.Sprintf("127.0.0.1:%d", live.port)
	deadAddr := fmt.Sprintf("127.0.0.2:%d", dead)
	out, stderr, code := runExampleClient(t, bootstrap, "-target", "xds:///orders.vm.internal:8080", "-n", "3", "-timeout", "20s")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	if err := contains(out, "resolved xds:///orders.vm.internal:8080 via xDS",
		liveAddr+" ", "server accepted the connection",
		deadAddr+" ", "no server: connection refused",
		"connectivity state: READY",
		"health check 1: SERVING from "+liveAddr,
		"health check 2: SERVING from "+liveAddr,
		"health check 3: SERVING from "+liveAddr); err != nil {
		t.Errorf("%v\n%s", err, out)
	}
	if strings.Contains(out, "no server answered") {
		t.Errorf("says no server answered:\n%s", out)
	}
}

// TestExampleGRPCClientUnknownHost: a host meshfed does not serve makes
// the client exit 1 with an error naming the target and the timeout.
func TestExampleGRPCClientUnknownHost(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	svc, err := os.ReadFile("../../examples/services.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bootstrap := exampleSetup(t, string(svc))
	out, stderr, code := runExampleClient(t, bootstrap, "-target", "xds:///nope.vm.internal:8080", "-timeout", "3s")
	if code != 1 {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	if err := contains(stderr, "could not resolve xds:///nope.vm.internal:8080 via xDS within 3s"); err != nil {
		t.Errorf("%v\nstderr:\n%s", err, stderr)
	}
	if strings.Contains(out, "resolved") {
		t.Errorf("stdout claims resolution:\n%s", out)
	}
}
