package file

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/filewatch"
	"github.com/meshfed/meshfed/registries/registrytest"
)

// svcYAML returns a services file declaring one service per name, each with
// one endpoint at addr.
func svcYAML(addr string, names ...string) string {
	var b strings.Builder
	b.WriteString("services:\n")
	for _, n := range names {
		b.WriteString("  - name: " + n + "\n    ports:\n      - {name: http, port: 80, protocol: HTTP}\n    endpoints:\n      - address: " + addr + "\n")
	}
	return b.String()
}

// parseCounter counts parses by file base name.
type parseCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *parseCounter) add(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[filepath.Base(path)]++
}

func (c *parseCounter) get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

// newMulti returns a registry over cfg, events only, counting parses.
func newMulti(t *testing.T, cfg Config) (*Registry, *parseCounter) {
	t.Helper()
	c := registries.Common{Name: strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), Kind: "file", Domain: "vm.internal"}
	reg, err := cfg.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := reg.(*Registry)
	r.timing.Quiet, r.timing.MaxWait, r.timing.Interval = 5*time.Millisecond, 50*time.Millisecond, time.Hour
	pc := &parseCounter{n: map[string]int{}}
	r.parsed = pc.add
	return r, pc
}

// hosts waits for: synced, exactly these hostnames (short names) served.
func hosts(want ...string) func(registrytest.State) bool {
	return func(s registrytest.State) bool {
		var got []string
		for _, h := range registrytest.Hostnames(s.Services) {
			got = append(got, strings.TrimSuffix(h, ".vm.internal"))
		}
		slices.Sort(got)
		return s.Synced() && strings.Join(got, ",") == strings.Join(want, ",")
	}
}

func TestDirectoryReadsOnlyTheFileThatChanged(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), svcYAML("10.0.0.1", "alpha"))
	write(t, filepath.Join(dir, "b.yml"), svcYAML("10.0.0.2", "beta"))
	write(t, filepath.Join(dir, "c.json"), `{"services": [{"name": "gamma", "ports": [{"name": "http", "port": 80, "protocol": "HTTP"}], "endpoints": []}]}`)
	write(t, filepath.Join(dir, ".hidden.yaml"), "not: [valid")
	write(t, filepath.Join(dir, "notes.txt"), "not: [valid")
	r, pc := newMulti(t, Config{Options: filewatch.Options{Path: dir}})
	sink := registrytest.NewSink()
	registrytest.Start(t, r, sink)
	sink.WaitFor(t, wait, hosts("alpha", "beta", "gamma"))

	// Edit one file: only it is parsed again.
	replace(t, filepath.Join(dir, "b.yml"), svcYAML("10.0.0.9", "beta"))
	st := sink.WaitFor(t, wait, func(s registrytest.State) bool { return strings.Contains(strings.Join(addresses(s), ","), "10.0.0.9") })
	if st.Replaces != 2 {
		t.Errorf("Replaces = %d, want 2", st.Replaces)
	}
	if a, b, c := pc.get("a.yaml"), pc.get("b.yml"), pc.get("c.json"); a != 1 || b != 2 || c != 1 {
		t.Errorf("parses a=%d b=%d c=%d after editing b, want 1, 2, 1", a, b, c)
	}
	if pc.get(".hidden.yaml")+pc.get("notes.txt") != 0 {
		t.Error("a hidden file or a .txt file was parsed")
	}

	// A file added to the directory adds its services; others are not re-read.
	replace(t, filepath.Join(dir, "d.yaml"), svcYAML("10.0.0.4", "delta"))
	sink.WaitFor(t, wait, hosts("alpha", "beta", "delta", "gamma"))
	// A file removed takes its services away.
	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	st = sink.WaitFor(t, wait, hosts("beta", "delta", "gamma"))
	if !st.Healthy() {
		t.Errorf("status after removing a file from the directory = %+v, want Synced", st.Status)
	}
	if a, b, c, d := pc.get("a.yaml"), pc.get("b.yml"), pc.get("c.json"), pc.get("d.yaml"); a != 1 || b != 2 || c != 1 || d != 1 {
		t.Errorf("parses a=%d b=%d c=%d d=%d, want 1, 2, 1, 1", a, b, c, d)
	}
}

func TestGlobAndPaths(t *testing.T) {
	t.Parallel()
	dir, other := t.TempDir(), t.TempDir()
	write(t, filepath.Join(dir, "team-a.yaml"), svcYAML("10.0.0.1", "alpha"))
	write(t, filepath.Join(dir, "team-b.yaml"), svcYAML("10.0.0.2", "beta"))
	write(t, filepath.Join(dir, "draft.yml"), svcYAML("10.0.0.3", "draft"))
	write(t, filepath.Join(other, "legacy.yaml"), svcYAML("10.0.0.4", "legacy"))
	r, pc := newMulti(t, Config{Options: filewatch.Options{Path: filepath.Join(dir, "team-*.yaml"), Paths: []string{filepath.Join(other, "legacy.yaml")}}})
	sink := registrytest.NewSink()
	registrytest.Start(t, r, sink)
	sink.WaitFor(t, wait, hosts("alpha", "beta", "legacy"))

	write(t, filepath.Join(dir, "team-c.yaml"), svcYAML("10.0.0.5", "gamma"))
	sink.WaitFor(t, wait, hosts("alpha", "beta", "gamma", "legacy"))
	write(t, filepath.Join(other, "legacy.yaml"), svcYAML("10.0.0.4", "legacy", "legacy-2"))
	sink.WaitFor(t, wait, hosts("alpha", "beta", "gamma", "legacy", "legacy-2"))
	if pc.get("draft.yml") != 0 || pc.get("team-a.yaml") != 1 {
		t.Errorf("parses draft=%d team-a=%d, want 0, 1", pc.get("draft.yml"), pc.get("team-a.yaml"))
	}
}

func TestServiceInTwoFilesIsAConflict(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	write(t, a, svcYAML("10.0.0.1", "orders"))
	write(t, b, svcYAML("10.0.0.2", "orders", "billing"))
	r, _ := newMulti(t, Config{Options: filewatch.Options{Path: dir}})
	sink := registrytest.NewSink()
	registrytest.Start(t, r, sink)
	st := sink.WaitFor(t, wait, hosts("billing", "orders"))
	if got := strings.Join(addresses(st), ","); got != "10.0.0.2,10.0.0.1" && got != "10.0.0.1,10.0.0.2" {
		t.Errorf("addresses = %s, want orders from a.yaml (10.0.0.1) and billing (10.0.0.2)", got)
	}
	for _, svc := range st.Services {
		if svc.Hostname == "orders.vm.internal" && (len(svc.Endpoints) != 1 || svc.Endpoints[0].Address != "10.0.0.1") {
			t.Errorf("orders = %+v, want the declaration of a.yaml", svc.Endpoints)
		}
	}
	if len(st.Rejected) != 1 {
		t.Fatalf("rejected = %v, want one conflict", st.Rejected)
	}
	rej := st.Rejected[0]
	if msg := rej.String(); rej.Host != "orders.vm.internal" || !strings.Contains(msg, a) || !strings.Contains(msg, b) {
		t.Errorf("rejection = %q, want it to name orders.vm.internal, %s and %s", msg, a, b)
	}

	// Resolving the conflict removes the rejection.
	replace(t, b, svcYAML("10.0.0.2", "billing"))
	sink.WaitFor(t, wait, func(s registrytest.State) bool { return len(s.Rejected) == 0 && s.Replaces == 2 })
}

func TestBrokenFileAmongGoodOnes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "services.yaml")
	write(t, good, svcYAML("10.0.0.1", "alpha"))
	write(t, bad, servicesYAML("10.0.0.2"))
	r, _ := newMulti(t, Config{Options: filewatch.Options{Path: filepath.Join(dir, "*.yaml")}})
	sink := registrytest.NewSink()
	registrytest.Start(t, r, sink)
	sink.WaitFor(t, wait, hasAddresses("10.0.0.1", "10.0.0.2"))

	replace(t, bad, broken)
	st := sink.WaitFor(t, wait, degradedWith(brokenErr))
	if !st.Status.Invalid || st.Status.Err != brokenErr {
		t.Errorf("status = %+v, want Invalid with exactly %q", st.Status, brokenErr)
	}
	brokenAt := len(st.History)
	// The good file still updates; the broken one keeps its last good
	// services. The update is published with the Degraded status in the
	// same step: the shard never shows Synced while the file is broken.
	replace(t, good, svcYAML("10.0.0.3", "alpha"))
	st = sink.WaitFor(t, wait, func(s registrytest.State) bool {
		return strings.Join(addresses(s), ",") == "10.0.0.3,10.0.0.2" &&
			s.Failing() && s.Status.Err == brokenErr
	})
	for i, h := range st.History[brokenAt:] {
		if !h.Failing() || h.Err != brokenErr || !h.Invalid {
			t.Errorf("status #%d after the break = %+v, want Degraded (invalid) with %q throughout", brokenAt+i, h, brokenErr)
		}
	}
	// Fixing the broken file clears the error.
	replace(t, bad, servicesYAML("10.0.0.4"))
	sink.WaitFor(t, wait, func(s registrytest.State) bool {
		return s.Healthy() && strings.Join(addresses(s), ",") == "10.0.0.3,10.0.0.4"
	})
}

// TestBrokenFileAtRestartHoldsTheFirstPublish: a Run whose first read
// finds a file broken publishes the good files only as a partial state
// (not Complete, invalid, naming the file), which the aggregator holds
// while it serves the shard's saved state, saying the update is held
// (test/seam.TestBrokenFileAtRestartHoldsTheFirstPublish checks that
// through a real aggregator); once the file is fixed every file is
// published, complete.
func TestBrokenFileAtRestartHoldsTheFirstPublish(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), svcYAML("10.0.0.1", "alpha"))
	bad := filepath.Join(dir, "services.yaml")
	write(t, bad, broken)
	r, _ := newMulti(t, Config{Options: filewatch.Options{Path: dir}})
	sink := registrytest.NewSink()
	registrytest.Start(t, r, sink)
	st := sink.WaitFor(t, wait, degradedWith(brokenErr))
	for i, u := range st.Updates {
		if u.HasState && (u.Complete || !u.Invalid || !strings.Contains(u.Err, brokenErr)) {
			t.Errorf("update #%d: want only partial (invalid) states while a file is broken at restart: %+v", i+1, st)
		}
	}
	replace(t, bad, servicesYAML("10.0.0.2"))
	sink.WaitFor(t, wait, func(s registrytest.State) bool {
		return s.Healthy() && s.Complete && strings.Join(addresses(s), ",") == "10.0.0.1,10.0.0.2"
	})
}

// TestBrokenFileAtFreshStartPublishesTheGoodOne: on a fresh start (nothing
// served yet) one broken file of two does not keep the good one from being
// served: it is published, Degraded naming the broken file.
func TestBrokenFileAtFreshStartPublishesTheGoodOne(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), svcYAML("10.0.0.1", "alpha"))
	bad := filepath.Join(dir, "services.yaml")
	write(t, bad, broken)
	r, _ := newMulti(t, Config{Options: filewatch.Options{Path: dir}})
	sink := registrytest.NewSink()
	registrytest.Start(t, r, sink)
	st := sink.WaitFor(t, wait, func(s registrytest.State) bool { return s.Replaces > 0 })
	if strings.Join(addresses(st), ",") != "10.0.0.1" || !st.Failing() ||
		!strings.Contains(st.Status.Err, brokenErr) || strings.Contains(st.Status.Err, "held") {
		t.Errorf("want a.yaml's service published, Degraded naming the broken file: %s", st)
	}
	replace(t, bad, servicesYAML("10.0.0.2"))
	sink.WaitFor(t, wait, func(s registrytest.State) bool {
		return s.Healthy() && strings.Join(addresses(s), ",") == "10.0.0.1,10.0.0.2"
	})
}

func TestConfigPaths(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cfg Config
		key string
	}{
		{Config{}, "path"},
		{Config{Options: filewatch.Options{Path: "/x/[a"}}, "path"},
		{Config{Options: filewatch.Options{Path: "/x", Paths: []string{"/y", "/z/[b"}}}, "paths[1]"},
		{Config{Options: filewatch.Options{Paths: []string{""}}}, "paths[0]"},
	} {
		_, err := tt.cfg.New(registries.Common{Name: "vms"}, nil)
		var fe *registries.FieldError
		if !errors.As(err, &fe) || fe.Key != tt.key {
			t.Errorf("New(%+v) = %v, want a FieldError on %s", tt.cfg, err, tt.key)
		}
	}
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), svcYAML("10.0.0.1", "alpha"))
	write(t, filepath.Join(dir, "b.yaml"), broken)
	c := Config{Options: filewatch.Options{Path: "conf", Paths: []string{"conf/*.yaml"}}}
	c.ResolvePaths(filepath.Dir(dir))
	c.Path, c.Paths[0] = dir, filepath.Join(dir, "*.yaml")
	refs := c.Files()
	if len(refs) != 4 {
		t.Fatalf("Files() = %d refs, want 4 (two files, matched twice)", len(refs))
	}
	var bad int
	for _, ref := range refs {
		if err := registries.CheckFile(ref); err != nil {
			bad++
			if !strings.Contains(err.Error(), "b.yaml:7:17") {
				t.Errorf("check of %s = %v, want b.yaml:7:17", ref.Path, err)
			}
		}
	}
	if bad != 2 {
		t.Errorf("%d refs failed the check, want 2", bad)
	}
}
