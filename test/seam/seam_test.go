package seam_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/file"
	"github.com/meshfed/meshfed/registries/filewatch"
	"github.com/meshfed/meshfed/registries/registrytest"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func svcYAML(name, addr string) string {
	return "services:\n  - name: " + name + "\n    ports:\n      - {name: http, port: 80, protocol: HTTP}\n    endpoints:\n      - address: " + addr + "\n"
}

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
	c := registries.Common{Name: "vms", Kind: "file", Domain: "vm.internal"}
	cfg := &file.Config{Options: filewatch.Options{Path: dir}}
	cfg.ApplyDefaults()
	reg, err := cfg.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	agg := aggregate.New(aggregate.Options{})
	agg.AddRegistry(aggregate.RegistryOptions{Common: c})
	saved := []model.Service{
		{Hostname: "alpha.vm.internal", Ports: []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}},
			Endpoints: []model.Endpoint{{Address: "10.0.0.1", Source: model.Source{Registry: c.Name}}}},
		{Hostname: "orders.vm.internal", Ports: []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}},
			Endpoints: []model.Endpoint{{Address: "10.0.0.9", Source: model.Source{Registry: c.Name}}}},
	}
	if !agg.Restore(c.Shard(), saved, nil) {
		t.Fatal("Restore refused")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agg.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	registrytest.Start(t, reg, agg)

	served := func(host string) string {
		s, ok := agg.Snapshot().Service(host)
		if !ok || len(s.Endpoints) == 0 {
			return ""
		}
		return s.Endpoints[0].Address
	}
	waitFor := func(what string, cond func(aggregate.RegistryStatus) bool) aggregate.RegistryStatus {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			st, _ := agg.Registry(c.Name)
			if cond(st) {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; registry %+v, orders at %q", what, st, served("orders.vm.internal"))
			}
		}
	}
	st := waitFor("the held first update", func(st aggregate.RegistryStatus) bool { return st.State == aggregate.Degraded })
	if !strings.HasPrefix(st.LastError, aggregate.HeldPrefix) || !strings.Contains(st.LastError, "services.yaml") ||
		!st.LastSync.IsZero() || !st.Restored {
		t.Errorf("want Degraded (held), nothing applied while a file is broken at restart: %+v", st)
	}
	time.Sleep(200 * time.Millisecond)
	if got := served("orders.vm.internal"); got != "10.0.0.9" {
		t.Errorf("orders served at %q while its file is broken at restart, want the restored 10.0.0.9", got)
	}

	write(t, bad, svcYAML("orders", "10.0.0.2"))
	waitFor("every file served", func(st aggregate.RegistryStatus) bool {
		return st.State == aggregate.Synced && served("orders.vm.internal") == "10.0.0.2" && served("alpha.vm.internal") == "10.0.0.1"
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
	c := registries.Common{Name: "missing-at-restart", Kind: "file", Domain: "vm.internal"}
	cfg := &file.Config{Options: filewatch.Options{Path: a, Paths: []string{b}}}
	cfg.ApplyDefaults()
	reg, err := cfg.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	const confirm = 100 * time.Millisecond
	reg.(*file.Registry).SetConfirmAfter(confirm)
	agg := aggregate.New(aggregate.Options{})
	agg.AddRegistry(aggregate.RegistryOptions{Common: c})
	saved := []model.Service{
		{Hostname: "alpha.vm.internal", Ports: []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}},
			Endpoints: []model.Endpoint{{Address: "10.0.0.1", Source: model.Source{Registry: c.Name}}}},
		{Hostname: "beta.vm.internal", Ports: []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}},
			Endpoints: []model.Endpoint{{Address: "10.0.0.9", Source: model.Source{Registry: c.Name}}}},
	}
	if !agg.Restore(c.Shard(), saved, nil) {
		t.Fatal("Restore refused")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agg.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	registrytest.Start(t, reg, agg)

	served := func(host string) string {
		s, ok := agg.Snapshot().Service(host)
		if !ok || len(s.Endpoints) == 0 {
			return ""
		}
		return s.Endpoints[0].Address
	}
	waitFor := func(what string, cond func(aggregate.RegistryStatus) bool) aggregate.RegistryStatus {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			st, _ := agg.Registry(c.Name)
			if cond(st) {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; registry %+v, beta at %q", what, st, served("beta.vm.internal"))
			}
		}
	}
	st := waitFor("the held first update", func(st aggregate.RegistryStatus) bool { return st.State == aggregate.Degraded })
	if !strings.HasPrefix(st.LastError, aggregate.HeldPrefix) || !strings.Contains(st.LastError, "b.yaml") ||
		!st.LastSync.IsZero() || !st.Restored {
		t.Errorf("want Degraded (held), nothing applied while a file is missing at restart: %+v", st)
	}
	time.Sleep(4 * confirm) // past twice the confirmation period
	if got := served("beta.vm.internal"); got != "10.0.0.9" {
		t.Errorf("beta served at %q while its file is missing at restart, want the restored 10.0.0.9", got)
	}
	if st, _ := agg.Registry(c.Name); !st.LastSync.IsZero() {
		t.Errorf("a state was applied while b.yaml is missing: %+v", st)
	}

	write(t, b, svcYAML("beta", "10.0.0.2"))
	waitFor("both files served", func(st aggregate.RegistryStatus) bool {
		return st.State == aggregate.Synced && served("beta.vm.internal") == "10.0.0.2" && served("alpha.vm.internal") == "10.0.0.1"
	})
}
