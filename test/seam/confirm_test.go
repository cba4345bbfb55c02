package seam_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/file"
	"github.com/meshfed/meshfed/registries/filewatch"
	"github.com/meshfed/meshfed/registries/registrytest"
)

// ordersYAML returns a services file with one service, orders, and one
// endpoint per address.
func ordersYAML(addresses ...string) string {
	var b strings.Builder
	b.WriteString("services:\n  - name: orders\n    ports:\n      - {name: grpc, port: 8080, protocol: GRPC}\n    endpoints:\n")
	for _, a := range addresses {
		b.WriteString("      - address: " + a + "\n")
	}
	return b.String()
}

// TestHeldFileUpdateIsConfirmed: through a real aggregator with the
// hold-down on (maxDeleteRatio 0.5) and a hold-down time far beyond the
// test, a services file cut from 4 endpoints to 1 is held, then applied
// because the unchanged file confirms it.
func TestHeldFileUpdateIsConfirmed(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "services.yaml")
	write(t, path, ordersYAML("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"))
	c := registries.Common{Name: "held-confirmed", Kind: "file", Domain: "vm.internal"}
	cfg := &file.Config{Options: filewatch.Options{Path: path}}
	cfg.ApplyDefaults()
	reg, err := cfg.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg.(*file.Registry).SetConfirmAfter(time.Second)
	agg := aggregate.New(aggregate.Options{HoldDown: time.Hour})
	agg.AddRegistry(aggregate.RegistryOptions{Common: c, MaxDeleteRatio: 0.5})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agg.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	registrytest.Start(t, reg, agg)

	const host = "orders.vm.internal"
	endpoints := func() int {
		s, ok := agg.Snapshot().Service(host)
		if !ok {
			return -1
		}
		return len(s.Endpoints)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				st, _ := agg.Registry(c.Name)
				t.Fatalf("timed out waiting for %s; %d endpoints served, registry %+v", what, endpoints(), st)
			}
		}
	}
	waitFor("4 endpoints", func() bool { return endpoints() == 4 })

	write(t, path, ordersYAML("10.0.0.1"))
	waitFor("the update held", func() bool {
		st, _ := agg.Registry(c.Name)
		return st.State == aggregate.Held && endpoints() == 4
	})
	waitFor("the held update applied by confirmation", func() bool {
		st, _ := agg.Registry(c.Name)
		return endpoints() == 1 && st.Hold == nil && st.State == aggregate.Synced
	})
}
