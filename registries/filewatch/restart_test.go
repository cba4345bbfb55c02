package filewatch

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

// TestRestartWithFileMissingKeepsState: after a restart (the sink serves
// the state of both files, restored or from the previous Run) one of two
// listed files is missing. The other file's services alone must never be
// published as a complete state, which would drop the missing file's:
// the Watch publishes them only as a partial state (not Complete, failing
// naming the file), which the aggregator holds as the Run's first while it
// serves a state (aggregate.TestPartialFirstStateHeld,
// test/seam.TestFileMissingAtRestartKeepsServedState), and sends no
// hold-down confirmation; once the file is back both are published.
func TestRestartWithFileMissingKeepsState(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	put(t, a, "a1\n")
	w := lines(dir)
	w.Patterns = []string{a, b}
	w.Confirm = 50 * time.Millisecond
	sink := registrytest.NewSink()
	prior := []model.Service{{Hostname: "a1"}, {Hostname: "b1"}}
	sink.Publish(w.Shard, registries.FullState(prior, nil))

	defer registrytest.Start(t, w, sink)()
	st := sink.WaitFor(t, wait, func(s registrytest.State) bool { return s.Failing() })
	if st.Status.Invalid {
		t.Errorf("a missing file is an outage, not invalid data: %+v", st.Status)
	}
	time.Sleep(4 * w.Confirm) // past twice the confirmation period
	st = sink.State(w.Shard)
	for i, u := range st.Updates[1:] {
		if u.HasState && (u.Complete || !u.Failing()) {
			t.Fatalf("update #%d published a complete state while b.yaml is missing: %s", i+2, st)
		}
	}

	put(t, b, "b2\n")
	sink.WaitFor(t, wait, func(s registrytest.State) bool {
		return hostnames(s) == "a1,b2" && s.Healthy()
	})
}
