package filewatch

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries/registrytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 5 * time.Second

// lines is a Watch whose files hold one hostname per line; a line "!"
// makes the file invalid. Merge serves every hostname, in path order.
func lines(dir string) *Watch[[]string] {
	return &Watch[[]string]{
		Patterns: []string{dir},
		Parse: func(path string, data []byte) ([]string, error) {
			var out []string
			for _, l := range strings.Fields(string(data)) {
				if l == "!" {
					return nil, errors.New(filepath.Base(path) + ": invalid")
				}
				out = append(out, l)
			}
			return out, nil
		},
		Merge: func(files []File[[]string]) ([]model.Service, []model.Rejection) {
			svcs := []model.Service{}
			for _, f := range files {
				for _, h := range f.Value {
					svcs = append(svcs, model.Service{Hostname: h, Ports: []model.Port{{Name: "tcp", Number: 1, Protocol: model.ProtocolTCP}},
						Endpoints: []model.Endpoint{{Address: "192.0.2.1", Source: model.Source{Registry: "lines"}}}})
				}
			}
			return svcs, nil
		},
		Shard:  model.ShardKey{Kind: "test", Name: "lines"},
		Timing: Timing{Confirm: time.Hour, Quiet: 5 * time.Millisecond, MaxWait: 20 * time.Millisecond, Settle: 20 * time.Millisecond, Interval: time.Hour},
	}
}

func put(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func hostnames(s registrytest.State) string {
	var out []string
	for _, svc := range s.Services {
		out = append(out, svc.Hostname)
	}
	return strings.Join(out, ",")
}

// TestMergeKeepsLastGoodPerFile: files merge in path order; a file that
// fails to parse keeps its last good parse (Degraded, invalid) while the
// others update; one that is removed takes its parse with it.
func TestMergeKeepsLastGoodPerFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	put(t, filepath.Join(dir, "b.yaml"), "b1\n")
	put(t, filepath.Join(dir, "a.yaml"), "a1 a2\n")
	put(t, filepath.Join(dir, "c.txt"), "ignored\n")
	w := lines(dir)
	sink := registrytest.NewSink()
	defer registrytest.Start(t, w, sink)()
	sink.WaitFor(t, wait, func(s registrytest.State) bool { return hostnames(s) == "a1,a2,b1" })

	put(t, filepath.Join(dir, "a.yaml"), "a1\n!\n")
	put(t, filepath.Join(dir, "b.yaml"), "b2\n")
	st := sink.WaitFor(t, wait, func(s registrytest.State) bool {
		return hostnames(s) == "a1,a2,b2" && s.Failing()
	})
	if !st.Status.Invalid || st.Status.Err != "a.yaml: invalid" {
		t.Errorf("status = %+v, want Degraded, invalid, naming a.yaml", st.Status)
	}

	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, wait, func(s registrytest.State) bool {
		return hostnames(s) == "b2" && s.Healthy()
	})
}

// TestConfirmSendsDropAgain: an update that removed endpoints is sent
// again once the files stayed unchanged for Confirm (services of one
// endpoint each: endpoints are what a drop is counted in).
func TestConfirmSendsDropAgain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	put(t, filepath.Join(dir, "a.yaml"), "a1 a2\n")
	w := lines(dir)
	w.Confirm = 50 * time.Millisecond
	sink := registrytest.NewSink()
	defer registrytest.Start(t, w, sink)()
	sink.WaitFor(t, wait, func(s registrytest.State) bool { return s.Replaces == 2 }) // the first update, confirmed
	put(t, filepath.Join(dir, "a.yaml"), "a1\n")
	st := sink.WaitFor(t, wait, func(s registrytest.State) bool { return s.Replaces == 4 })
	if hostnames(st) != "a1" {
		t.Errorf("confirmation sent %q, want the update that dropped a2", hostnames(st))
	}
}
