package file

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/meshfed/meshfed/registries/registrytest"
)

// An update that removed endpoints is sent again once the file stayed
// unchanged for the confirmation period; so is the first update of a Run
// (test/seam.TestHeldFileUpdateIsConfirmed checks that a real aggregator
// applies a held update so confirmed).
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
