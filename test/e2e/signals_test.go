package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshfed/meshfed/admin"
)

// TestHoldDownAndRelease: `services: []` written over a live services file
// (hold-down on by default) withdraws nothing: the registry is Held (503,
// with a hold object), `meshfed status` shows it, the grpc-go client keeps
// reaching its backend, and `meshfed release` applies the update.
func TestHoldDownAndRelease(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	f := newFileSetup(t)
	m := startMeshfed(t, f.config, f.xdsAddr, f.adminAddr)
	bootstrap, stderr, code := meshfedCmd(t, "bootstrap", "--grpc", "--config", f.config, "--node-id", "hold-client")
	if code != 0 {
		t.Fatalf("bootstrap: exit %d: %s", code, stderr)
	}
	c := startClient(t, bootstrap, "xds:///echo.vm.internal:8080")
	c.waitFor(t, "b1", 5, 30*time.Second)

	writeFile(t, f.svcFile, "services: []\n")
	var h admin.RegistryHealth
	eventually(t, 10*time.Second, "vms Held", func() error {
		code := m.getJSON(t, "/healthz/registries/vms", &h)
		if code != 503 || h.State.String() != "Held" || h.Hold == nil {
			return fmt.Errorf("code %d, %+v", code, h)
		}
		return nil
	})
	if h.Hold.Served != 1 || h.Hold.Pending != 0 || !strings.Contains(h.Hold.Reason, "would remove 1 of 1 endpoints") || h.Hold.Since.IsZero() {
		t.Errorf("hold %+v, want served 1, pending 0, a reason and a time", *h.Hold)
	}
	// The raw JSON carries the contract's names.
	_, body, _ := m.get("/healthz/registries/vms")
	if err := contains(string(body), `"state": "Held"`, `"hold": {`, `"since":`, `"served": 1`, `"pending": 0`, `"reason":`); err != nil {
		t.Error(err)
	}
	c.waitFor(t, "b1", 10, 10*time.Second)

	// Held is not Synced: status exits 2 (issue #15's contract).
	status, stderr, code := meshfedCmd(t, "status", "--admin", f.adminAddr)
	if code != 2 {
		t.Fatalf("status: exit %d, want 2: %s", code, stderr)
	}
	if err := contains(status, "Held", "HELD vms", "meshfed release vms"); err != nil {
		t.Errorf("status: %v\n%s", err, status)
	}

	if _, stderr, code := meshfedCmd(t, "release", "nope", "--admin", f.adminAddr); code != 1 || !strings.Contains(stderr, "no registry") {
		t.Errorf("release of an unknown registry: exit %d, %q", code, stderr)
	}
	out, stderr, code := meshfedCmd(t, "release", "vms", "--admin", f.adminAddr)
	if code != 0 || !strings.Contains(out, "released vms: Synced") {
		t.Fatalf("release: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	var infos []admin.ServiceInfo
	m.getJSON(t, "/debug/registryz", &infos)
	if len(infos) != 0 {
		t.Errorf("after release: /debug/registryz = %+v, want nothing", infos)
	}
	if _, stderr, code := meshfedCmd(t, "release", "vms", "--admin", f.adminAddr); code != 1 || !strings.Contains(stderr, "no update is held") {
		t.Errorf("second release: exit %d, %q, want 'no update is held'", code, stderr)
	}
}

// TestSIGHUPReload drives clusters.yaml reloads of the built binary: a
// registry added, an invalid file (kept running, said on /readyz and in
// the log), a registry changed make-before-break while a grpc-go client
// calls through it without a single failed call, a registry removed, and
// SIGTERM still exiting 0.
func TestSIGHUPReload(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end")
	}
	f := newFileSetup(t)
	dir := filepath.Dir(f.config)
	base, err := os.ReadFile(f.config)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "more.yaml"), "services:\n  - name: pay\n    ports: [{name: http, port: 80, protocol: HTTP}]\n    endpoints: [{address: 127.0.0.9}]\n")
	more := "  - {name: more, kind: file, domain: more.internal, file: {path: more.yaml}}\n"

	m := startMeshfed(t, f.config, f.xdsAddr, f.adminAddr)
	bootstrap, stderr, code := meshfedCmd(t, "bootstrap", "--grpc", "--config", f.config, "--node-id", "hup-client")
	if code != 0 {
		t.Fatalf("bootstrap: exit %d: %s", code, stderr)
	}
	c := startClient(t, bootstrap, "xds:///echo.vm.internal:8080")
	c.waitFor(t, "b1", 5, 30*time.Second)
	hup := func() {
		t.Helper()
		if err := m.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	hosts := func() []string {
		var infos []admin.ServiceInfo
		m.getJSON(t, "/debug/registryz", &infos)
		var out []string
		for _, i := range infos {
			out = append(out, i.Host)
		}
		return out
	}
	type readyz struct {
		Ready  bool                `json:"ready"`
		Reason string              `json:"reason"`
		Reload *admin.ReloadStatus `json:"reload"`
	}

	// Added.
	writeFile(t, f.config, string(base)+more)
	hup()
	eventually(t, 10*time.Second, "pay.more.internal served", func() error {
		return contains(strings.Join(hosts(), ","), "pay.more.internal", "echo.vm.internal")
	})

	// Invalid: the running configuration stays; /readyz stays 200 and says why.
	writeFile(t, f.config, string(base)+more+"  - {name: bad, kind: file, domian: x, file: {path: more.yaml}}\n")
	hup()
	eventually(t, 10*time.Second, "/readyz names the failed reload", func() error {
		var r readyz
		code := m.getJSON(t, "/readyz", &r)
		if code != 200 || !r.Ready || r.Reload == nil || r.Reload.OK {
			return fmt.Errorf("code %d %+v", code, r)
		}
		return contains(r.Reason, "reload failed", "clusters.yaml:", "domian")
	})
	// The log line is written before /readyz changes, but reaches the
	// test through a pipe: wait for it.
	eventually(t, 10*time.Second, "the failed reload logged", func() error {
		return contains(m.logs.String(), "clusters.yaml reload failed", "domian")
	})
	if err := contains(strings.Join(hosts(), ","), "pay.more.internal", "echo.vm.internal"); err != nil {
		t.Errorf("after an invalid reload: %v", err)
	}

	// Changed: vms now reads another file (same service, b2 added, b1
	// kept). The client must not see one failed call.
	writeFile(t, filepath.Join(dir, "services2.yaml"), servicesYAML(localEndpoint(f.b1, "v1"), localEndpoint(f.b2, "v2")))
	for len(c.lines) > 0 {
		<-c.lines
	}
	writeFile(t, f.config, strings.Replace(string(base), "services.yaml", "services2.yaml", 1)+more)
	hup()
	eventually(t, 15*time.Second, "changed registry serves b2", func() error {
		var eps []admin.EndpointInfo
		m.getJSON(t, "/debug/endpointz?host=echo.vm.internal", &eps)
		if len(eps) != 2 {
			return fmt.Errorf("%+v", eps)
		}
		return nil
	})
	c.waitFor(t, "b2", 1, 15*time.Second)
	for len(c.lines) > 0 {
		if l := <-c.lines; l.Err != "" {
			t.Errorf("call %d failed during the make-before-break reload: %s", l.Seq, l.Err)
		}
	}
	var r readyz
	if code := m.getJSON(t, "/readyz", &r); code != 200 || r.Reason != "" || r.Reload == nil || !r.Reload.OK {
		t.Errorf("/readyz after a good reload: %d %+v", code, r)
	}

	// Removed.
	writeFile(t, f.config, strings.Replace(string(base), "services.yaml", "services2.yaml", 1))
	hup()
	eventually(t, 10*time.Second, "pay.more.internal withdrawn", func() error {
		if h := strings.Join(hosts(), ","); h != "echo.vm.internal" {
			return fmt.Errorf("hosts %s", h)
		}
		return nil
	})
	var regs []admin.RegistryHealth
	m.getJSON(t, "/healthz/registries", &regs)
	if b, _ := json.Marshal(regs); len(regs) != 1 || regs[0].Name != "vms" {
		t.Errorf("registries after removal: %s", b)
	}

	if err := m.stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
}
