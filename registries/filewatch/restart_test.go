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
// listed files is missing. The first read must not publish the other
// file's services alone, which would drop the missing file's: the Watch
// reports Degraded naming the file, publishes nothing, and sends no
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
	sink.Replace(w.Shard, prior, nil)

	defer registrytest.Start(t, w, sink)()
	st := sink.WaitFor(t, wait, func(s registrytest.State) bool { return s.Status.State == registries.Degraded })
	if st.Status.Invalid {
		t.Errorf("a missing file is an outage, not invalid data: %+v", st.Status)
	}
	time.Sleep(4 * w.Confirm) // past twice the confirmation period
	if st := sink.State(w.Shard); st.Replaces != 1 || hostnames(st) != "a1,b1" {
		t.Fatalf("published while b.yaml is missing: %s", st)
	}

	put(t, b, "b2\n")
	sink.WaitFor(t, wait, func(s registrytest.State) bool {
		return hostnames(s) == "a1,b2" && s.Status.State == registries.Synced
	})
}
