package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/test/servers"
)

// TestHAReplicasAgree runs two meshfed replicas (the built binary) on the
// same real ZooKeeper and the same services file, with no shared state:
// their /debug/digestz agree after the start, after changes in both
// registries, and after one replica restarts having missed a change;
// `meshfed status --admin A --admin B` reports no drift, and names the
// registry where a third, differently configured replica drifts.
func TestHAReplicasAgree(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	z := servers.StartZooKeeper(t)
	shared := t.TempDir()
	svcFile := filepath.Join(shared, "services.yaml")
	writeFile(t, svcFile, servicesYAML("{address: 127.0.0.10, labels: {version: v1}}"))
	registriesYAML := func(file string) string {
		return fmt.Sprintf("  - name: spring\n    kind: zookeeper\n    domain: zk\n    zookeeper: {servers: [%q], layout: curator, root: /services}\n"+
			"  - name: vms\n    kind: file\n    domain: vm.internal\n    file: {path: %q}\n", z.Addr(), file)
	}
	provider := zkSession(t, z.Addr())
	registerCuratorInstance(t, provider, "orders", "i-1", &backend{name: "v1", host: "127.0.0.21", port: 9001})

	replica := func(file string) *meshfed {
		config, xdsAddr, adminAddr := writeClusters(t, t.TempDir(), registriesYAML(file))
		return startMeshfed(t, config, xdsAddr, adminAddr)
	}
	a, b := replica(svcFile), replica(svcFile)

	// agree waits until both replicas serve wantHosts' endpoint counts and
	// have equal digests, and returns them.
	agree := func(what string, want map[string]int) admin.DigestInfo {
		t.Helper()
		var da, db admin.DigestInfo
		eventually(t, 30*time.Second, what, func() error {
			for _, m := range []*meshfed{a, b} {
				for host, n := range want {
					if got, err := hostEndpoints(m, host); err != nil || got != n {
						return fmt.Errorf("%s: %s has %d endpoints (%v), want %d", m.admin, host, got, err, n)
					}
				}
			}
			a.getJSON(t, "/debug/digestz", &da)
			b.getJSON(t, "/debug/digestz", &db)
			if da.Overall != db.Overall || fmt.Sprint(da.Registries) != fmt.Sprint(db.Registries) {
				return fmt.Errorf("digests differ:\n%+v\n%+v", da, db)
			}
			return nil
		})
		for _, reg := range []string{"spring", "vms"} {
			if h := da.Registries[reg]; len(h) != 64 || h == model.EmptyDigest {
				t.Fatalf("%s: registry %s digest %q, want a non-empty sha256", what, reg, h)
			}
		}
		return da
	}
	first := agree("replicas agree after the start", map[string]int{"orders.zk": 1, "echo.vm.internal": 1})
	noDrift := func(what string, admins ...string) {
		t.Helper()
		args := []string{"status"}
		for _, ad := range admins {
			args = append(args, "--admin", ad)
		}
		out, stderr, code := meshfedCmd(t, args...)
		if code != 0 || !strings.Contains(out, "no drift: 2 replicas") || strings.Contains(out, "DRIFT") {
			t.Errorf("%s: status exit %d:\n%s%s", what, code, out, stderr)
		}
	}
	noDrift("after the start", a.admin, b.admin)

	// Changes in both registries.
	registerCuratorInstance(t, provider, "orders", "i-2", &backend{name: "v2", host: "127.0.0.22", port: 9001})
	writeFile(t, svcFile, servicesYAML("{address: 127.0.0.10, labels: {version: v1}}", "{address: 127.0.0.11, health: DRAINING}"))
	changed := agree("replicas agree after changes", map[string]int{"orders.zk": 2, "echo.vm.internal": 2})
	if changed.Registries["spring"] == first.Registries["spring"] || changed.Registries["vms"] == first.Registries["vms"] || changed.Overall == first.Overall {
		t.Errorf("digests did not change with the content: %+v then %+v", first, changed)
	}

	// Replica b restarts; the ZooKeeper change made while it is down is
	// there when it comes back, and it agrees with a again.
	if err := b.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	registerCuratorInstance(t, provider, "orders", "i-3", &backend{name: "v3", host: "127.0.0.23", port: 9001})
	b = startMeshfed(t, b.config, b.xds, b.admin)
	restarted := agree("replicas agree after b restarts", map[string]int{"orders.zk": 3, "echo.vm.internal": 2})
	if restarted.Registries["spring"] == changed.Registries["spring"] || restarted.Registries["vms"] != changed.Registries["vms"] {
		t.Errorf("after the restart: spring should differ from before, vms not: %+v then %+v", changed, restarted)
	}
	noDrift("after b restarts", a.admin, b.admin)

	// A replica reading another services file as "vms" drifts on vms only.
	otherFile := filepath.Join(t.TempDir(), "services.yaml")
	writeFile(t, otherFile, servicesYAML("{address: 127.0.0.99}"))
	c := replica(otherFile)
	eventually(t, 30*time.Second, "the third replica serves echo.vm.internal", func() error {
		if n, err := hostEndpoints(c, "echo.vm.internal"); err != nil || n != 1 {
			return fmt.Errorf("echo.vm.internal: %d endpoints (%v)", n, err)
		}
		if n, err := hostEndpoints(c, "orders.zk"); err != nil || n != 3 {
			return fmt.Errorf("orders.zk: %d endpoints (%v)", n, err)
		}
		return nil
	})
	out, stderr, code := meshfedCmd(t, "status", "--admin", a.admin, "--admin", c.admin)
	if code != 2 || !strings.Contains(out, "differ on (overall), vms") {
		t.Errorf("status with a drifted replica: exit %d, want 2 naming vms only:\n%s%s", code, out, stderr)
	}

	// The digests and the build are on /metrics too.
	_, metrics, err := a.get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`meshfed_snapshot_digest{registry="spring"}`, `meshfed_snapshot_digest{registry="vms"}`,
		"meshfed_snapshot_digest_overall ", `meshfed_build_info{goversion="go`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
