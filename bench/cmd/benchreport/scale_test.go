package main

import (
	"strings"
	"testing"
	"time"
)

// TestScaleScenariosSmoke runs the issue #16 scenarios (F with the meshfed
// binary, and istiod when it is built; S7, S8, SOAK) at a tiny size through
// the real processes, and checks that every change reached every client
// and no stream was left behind. It asserts no timing.
func TestScaleScenariosSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the bench binaries and starts servers")
	}
	t.Chdir("../../..") // build() compiles ./bench/cmd/... and ./cmd/meshfed
	dir := t.TempDir()
	if err := build(dir); err != nil {
		t.Fatal(err)
	}
	c := config{quick: true, services: 30, eps: 3, streams: 10, per: 5, common: 2, s1Events: 2,
		syncTimeout: time.Minute, s7Streams: 10, s7Procs: 2, s7Flips: 2, s8Services: 50, s8Flips: 2,
		soak: 6 * time.Second, soakRate: 50, fFiles: 3}
	r := &runner{c: c, dir: dir, rep: newReport(c), logf: t.Logf}
	for _, s := range []struct {
		id   string
		fn   func() error
		rows int
	}{{"F", r.runF, 7}, {"S7", r.runS7, 3}, {"S8", r.runS8, 2}, {"SOAK", r.runSoak, 5}} {
		if err := s.fn(); err != nil {
			t.Fatalf("%s: %v", s.id, err)
		}
		n := 0
		for _, x := range r.rep.rows {
			if x.id != s.id {
				continue
			}
			n++
			if x.mf == nil || x.mf.N == 0 {
				t.Errorf("%s %q: no figure", x.id, x.figure)
			}
			if strings.Contains(x.note, "NOT ") || strings.Contains(x.note, "run failed") {
				t.Errorf("%s %q: %s", x.id, x.figure, x.note)
			}
			if strings.Contains(x.figure, "write → last watcher ACK") && (x.met == nil || !*x.met) {
				t.Errorf("SOAK left streams behind: %s", x.note)
			}
		}
		if n != s.rows {
			t.Errorf("%s: %d rows, want %d", s.id, n, s.rows)
		}
	}
}

// TestFOneWithEnvAndLoadArgs runs F's one-file case alone (-f.one) with
// an environment for the meshfed binary (-f.env) and load generator
// arguments (-f.lgargs): every edit reaches every client, and the rows
// say what was set and that istiod was not run.
func TestFOneWithEnvAndLoadArgs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the bench binaries and starts servers")
	}
	t.Chdir("../../..")
	dir := t.TempDir()
	if err := build(dir); err != nil {
		t.Fatal(err)
	}
	c := config{quick: true, services: 30, eps: 3, streams: 10, per: 5, common: 2, s1Events: 2,
		syncTimeout: time.Minute, fFiles: 3, fOne: true, fEnv: []string{"GOGC=50"}, fLoadArgs: []string{"-fixed-windows"}}
	r := &runner{c: c, dir: dir, rep: newReport(c), logf: t.Logf}
	if err := r.runF(); err != nil {
		t.Fatal(err)
	}
	first, rss := r.rep.rows[0], r.rep.rows[len(r.rep.rows)-1]
	if first.mf == nil || first.mf.N != 2 || strings.Contains(first.note, "NOT ") {
		t.Errorf("one-file row: %+v, want both edits ACKed by every client", first)
	}
	for _, want := range []string{"GOGC=50", "-fixed-windows", "istiod not run (-f.one)"} {
		if !strings.Contains(first.note, want) {
			t.Errorf("one-file row's note %q does not say %q", first.note, want)
		}
	}
	if !strings.Contains(rss.note, "GOGC=50") {
		t.Errorf("RSS row's note %q does not name GOGC=50", rss.note)
	}
}
