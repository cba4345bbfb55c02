package file

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/registries/registrytest"
)

// An update that removed endpoints is sent again once the file stayed
// unchanged for the confirmation period; so is the first update of a Run.
func TestDropIsSentAgainWhenUnchanged(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "services.yaml")
	write(t, path, servicesYAML("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"))
	reg, c := newRegistry(t, path, time.Hour) // no periodic re-read
	reg.timing.Confirm = 100 * time.Millisecond
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	sink.WaitFor(t, wait, func(s registrytest.State) bool { return s.Replaces == 2 && len(addresses(s)) == 4 })

	replace(t, path, servicesYAML("10.0.0.1"))
	st := sink.WaitFor(t, wait, func(s registrytest.State) bool { return s.Replaces == 4 })
	if got := addresses(st); len(got) != 1 || got[0] != "10.0.0.1" {
		t.Errorf("confirmation sent %v, want the dropped state [10.0.0.1]", got)
	}
	if st.Reports = sink.Statuses(c.Shard()); len(st.Reports) != 0 {
		t.Errorf("reports = %v, want none", st.Reports)
	}
}

// TestHeldFileUpdateIsConfirmed: through a real aggregator with the
// hold-down on (maxDeleteRatio 0.5) and a hold-down time far beyond the
// test, a services file cut from 4 endpoints to 1 is held, then applied
// because the unchanged file confirms it.
func TestHeldFileUpdateIsConfirmed(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "services.yaml")
	write(t, path, servicesYAML("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"))
	reg, c := newRegistry(t, path, time.Hour)
	reg.timing.Confirm = time.Second
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

	replace(t, path, servicesYAML("10.0.0.1"))
	waitFor("the update held", func() bool {
		st, _ := agg.Registry(c.Name)
		return st.State == aggregate.Held && endpoints() == 4
	})
	waitFor("the held update applied by confirmation", func() bool {
		st, _ := agg.Registry(c.Name)
		return endpoints() == 1 && st.Hold == nil && st.State == aggregate.Synced
	})
}
