package seam_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/registries/filewatch"
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
	s := newSeam(t, "held-confirmed", filewatch.Options{Path: path},
		aggregate.Options{HoldDown: time.Hour}, aggregate.RegistryOptions{MaxDeleteRatio: 0.5})
	s.reg.SetConfirmAfter(time.Second)
	s.start()

	const host = "orders.vm.internal"
	s.waitFor("4 endpoints", host, func(aggregate.RegistryStatus) bool { return s.endpoints(host) == 4 })
	write(t, path, ordersYAML("10.0.0.1"))
	s.waitFor("the update held", host, func(st aggregate.RegistryStatus) bool {
		return st.State == aggregate.Held && s.endpoints(host) == 4
	})
	s.waitFor("the held update applied by confirmation", host, func(st aggregate.RegistryStatus) bool {
		return s.endpoints(host) == 1 && st.Hold == nil && st.State == aggregate.Synced
	})
}

// TestFirstUpdateConfirmationIsQuiet: a file registry re-sends its Run's
// first update once the files stayed unchanged (it may replace a restored
// state the hold-down holds). On a fresh start nothing was removed: the
// re-send neither logs that removed endpoints are sent again nor moves
// the registry's lastSync (it did, 30 s after every start).
func TestFirstUpdateConfirmationIsQuiet(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "services.yaml")
	write(t, path, ordersYAML("10.0.0.1", "10.0.0.2"))
	s := newSeam(t, "first-confirm", filewatch.Options{Path: path},
		aggregate.Options{HoldDown: time.Hour}, aggregate.RegistryOptions{MaxDeleteRatio: 0.5})
	const confirm = 100 * time.Millisecond
	s.reg.SetConfirmAfter(confirm)
	s.start()

	const host = "orders.vm.internal"
	first := s.waitFor("the first state", host, func(st aggregate.RegistryStatus) bool {
		return st.State == aggregate.Synced && s.endpoints(host) == 2
	})
	time.Sleep(5 * confirm) // the confirmation is due after confirm, and its re-read settles
	st, _ := s.agg.Registry(s.c.Name)
	if !st.LastSync.Equal(first.LastSync) || st.State != aggregate.Synced {
		t.Errorf("after the first update's confirmation: %+v; want Synced with lastSync unchanged (%v)", st, first.LastSync)
	}
	if logs := s.logs.String(); strings.Contains(logs, "removed endpoints") {
		t.Errorf("registry log says endpoints were removed on a fresh start:\n%s", logs)
	}
}
