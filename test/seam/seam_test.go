package seam_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/registries/filewatch"
)

const broken = "services:\n  - name: orders\n    ports:\n      - {name: http, port: 80, protocol: HTTP}\n    endpoints:\n      - address: 10.0.0.2\n        health: SICK\n"

// TestBrokenFileAtRestartHoldsTheFirstPublish: after a restart the
// aggregator serves the shard's saved state (restored), with the broken
// file's last good services. The file registry's first read finds that
// file broken: what it publishes (the other file alone, a partial state)
// is held, the registry is Degraded saying so (HeldPrefix) and the
// restored state stays served; once the file is fixed every file is
// served.
func TestBrokenFileAtRestartHoldsTheFirstPublish(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), svcYAML("alpha", "10.0.0.1"))
	bad := filepath.Join(dir, "services.yaml")
	write(t, bad, broken)
	s := newSeam(t, "vms", filewatch.Options{Path: dir}, aggregate.Options{}, aggregate.RegistryOptions{})
	s.restore(map[string]string{"alpha.vm.internal": "10.0.0.1", "orders.vm.internal": "10.0.0.9"})
	s.start()

	const orders = "orders.vm.internal"
	st := s.waitFor("the held first update", orders, func(st aggregate.RegistryStatus) bool { return st.State == aggregate.Degraded })
	if !strings.HasPrefix(st.LastError, aggregate.HeldPrefix) || !strings.Contains(st.LastError, "services.yaml") ||
		!st.LastSync.IsZero() || !st.Restored {
		t.Errorf("want Degraded (held), nothing applied while a file is broken at restart: %+v", st)
	}
	time.Sleep(200 * time.Millisecond)
	if got := s.served(orders); got != "10.0.0.9" {
		t.Errorf("orders served at %q while its file is broken at restart, want the restored 10.0.0.9", got)
	}

	write(t, bad, svcYAML("orders", "10.0.0.2"))
	s.waitFor("every file served", orders, func(st aggregate.RegistryStatus) bool {
		return st.State == aggregate.Synced && s.served(orders) == "10.0.0.2" && s.served("alpha.vm.internal") == "10.0.0.1"
	})
}

// TestFileMissingAtRestartKeepsServedState: after a restart the aggregator
// serves the shard's saved state (restored), with the services of both
// listed files. The file registry's first read finds one of them missing:
// what it publishes (the other file alone, a partial state) is held, the
// registry is Degraded saying so (HeldPrefix) and the missing file's
// restored services stay served, past the confirmation period too; once
// the file is back both are served.
func TestFileMissingAtRestartKeepsServedState(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	write(t, a, svcYAML("alpha", "10.0.0.1"))
	s := newSeam(t, "missing-at-restart", filewatch.Options{Path: a, Paths: []string{b}}, aggregate.Options{}, aggregate.RegistryOptions{})
	const confirm = 100 * time.Millisecond
	s.reg.SetConfirmAfter(confirm)
	s.restore(map[string]string{"alpha.vm.internal": "10.0.0.1", "beta.vm.internal": "10.0.0.9"})
	s.start()

	const beta = "beta.vm.internal"
	st := s.waitFor("the held first update", beta, func(st aggregate.RegistryStatus) bool { return st.State == aggregate.Degraded })
	if !strings.HasPrefix(st.LastError, aggregate.HeldPrefix) || !strings.Contains(st.LastError, "b.yaml") ||
		!st.LastSync.IsZero() || !st.Restored {
		t.Errorf("want Degraded (held), nothing applied while a file is missing at restart: %+v", st)
	}
	time.Sleep(4 * confirm) // past twice the confirmation period
	if got := s.served(beta); got != "10.0.0.9" {
		t.Errorf("beta served at %q while its file is missing at restart, want the restored 10.0.0.9", got)
	}
	if st, _ := s.agg.Registry(s.c.Name); !st.LastSync.IsZero() {
		t.Errorf("a state was applied while b.yaml is missing: %+v", st)
	}

	write(t, b, svcYAML("beta", "10.0.0.2"))
	s.waitFor("both files served", beta, func(st aggregate.RegistryStatus) bool {
		return st.State == aggregate.Synced && s.served(beta) == "10.0.0.2" && s.served("alpha.vm.internal") == "10.0.0.1"
	})
}
