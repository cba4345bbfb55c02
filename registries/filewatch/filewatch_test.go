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

// TestParseBuffers: with ParseEdit the Watch reuses its read buffers, and
// ParseEdit sees exactly the file's bytes as the file grows, shrinks and
// stays the same (an unchanged file is not parsed again), with the Edit
// of the last parse's bytes that Diff gives, while the bytes of the
// previous parse stay unchanged until the next returns (ParseEdit may
// compare with them, as registries/file does). A file that grows or
// shrinks by a few bytes per edit is read into the same two buffers.
func TestParseBuffers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "a.yaml")
	var prev, prevCopy []byte
	parses := 0
	buffers := map[*byte]bool{}
	wt := lines(dir)
	wt.Parse = nil
	wt.ParseEdit = func(_ string, data []byte, e Edit) ([]string, error) {
		parses++
		if string(prev) != string(prevCopy) {
			t.Errorf("parse %d: the previous parse's bytes changed before this parse returned", parses)
		}
		if len(prev) > 0 && len(data) > 0 && &prev[0] == &data[0] {
			t.Errorf("parse %d: the same buffer as the previous parse", parses)
		}
		if want := Diff(prev, data); e.Prefix != want.Prefix || e.Suffix != want.Suffix || string(e.Prev) != string(prev) || (prev == nil) != (e.Prev == nil) {
			t.Errorf("parse %d: edit {%d bytes, %d, %d}, want the last parse's %d bytes, %d, %d", parses, len(e.Prev), e.Prefix, e.Suffix, len(prev), want.Prefix, want.Suffix)
		}
		if cap(data) > 0 {
			buffers[&data[:1][0]] = true
		}
		prev, prevCopy = data, append([]byte(nil), data...)
		return strings.Fields(string(data)), nil
	}
	sink := registrytest.NewSink()
	l, err := wt.NewLoop(sink)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	big := strings.Repeat("y\n", 70000)
	contents := []string{"a\n", "a\nb\nc\n" + strings.Repeat("x\n", 5000), "a\nb\n", "a\nb\n", "c\n" + big, "d\n", "", "e\n",
		"e\n" + big, "e\n" + big + "f\n", "e\nf\n" + big + "f\n", "ee\nf\n" + big + "f\n", "e\nf\n" + big, "e\nf\n" + big + "gg\n"}
	wantParses := 0
	for i, c := range contents {
		put(t, path, c)
		if i == 0 || c != contents[i-1] {
			wantParses++
		}
		l.Reload(true) // a full re-read: every file's bytes are read
		if parses != wantParses {
			t.Fatalf("step %d: %d parses, want %d", i, parses, wantParses)
		}
		if string(prev) != c {
			t.Fatalf("step %d: parsed %d bytes, want the file's %d", i, len(prev), len(c))
		}
		if i == 8 {
			clear(buffers) // from here the file's size changes by a few bytes per edit
		}
	}
	if len(buffers) != 2 {
		t.Errorf("a file growing and shrinking by a few bytes was read into %d buffers, want the same two", len(buffers))
	}
}
