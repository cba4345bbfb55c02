package file

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/filewatch"
	"github.com/meshfed/meshfed/registries/registrytest"
)

const wait = 5 * time.Second

// services returns a services file with one service, orders, and one
// endpoint per address.
func servicesYAML(addresses ...string) string {
	var b strings.Builder
	b.WriteString("services:\n  - name: orders\n    ports:\n      - {name: grpc, port: 8080, protocol: GRPC}\n    endpoints:\n")
	for _, a := range addresses {
		b.WriteString("      - address: " + a + "\n")
	}
	if len(addresses) == 0 {
		b.WriteString("      []\n")
	}
	return b.String()
}

// broken has an error on line 7.
const broken = "services:\n  - name: orders\n    ports:\n      - {name: grpc, port: 8080, protocol: GRPC}\n    endpoints:\n      - address: 10.0.0.1\n        health: SICK\n"

const brokenErr = `services.yaml:7:17: services[0].endpoints[0].health: unknown health "SICK" (want HEALTHY, UNHEALTHY, DRAINING or DEGRADED)`

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replace writes content to a temporary file and renames it over path, as
// editors and config management do.
func replace(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	write(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// newRegistry returns a registry named after the test (so its metrics are
// its own) with fast debouncing and the periodic re-read set to interval.
func newRegistry(t *testing.T, path string, interval time.Duration) (*Registry, registries.Common) {
	t.Helper()
	c := registries.Common{Name: strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), Kind: "file", Domain: "vm.internal"}
	reg, err := (&Config{Options: filewatch.Options{Path: path}}).New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := reg.(*Registry)
	r.timing.Quiet, r.timing.MaxWait, r.timing.Interval = 5*time.Millisecond, 50*time.Millisecond, interval
	return r, c
}

func addresses(s registrytest.State) []string {
	var out []string
	for _, svc := range s.Services {
		for _, e := range svc.Endpoints {
			out = append(out, e.Address)
		}
	}
	return out
}

func hasAddresses(want ...string) func(registrytest.State) bool {
	return func(s registrytest.State) bool {
		return s.Synced() && strings.Join(addresses(s), ",") == strings.Join(want, ",")
	}
}

func degradedWith(msg string) func(registrytest.State) bool {
	return func(s registrytest.State) bool {
		return s.Failing() && strings.Contains(s.Status.Err, msg)
	}
}

// waitReloads waits until the registry read its file n times with result.
func waitReloads(t *testing.T, name, result string, n float64) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for testutil.ToFloat64(reloads.WithLabelValues(name, result)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("registry %s: fewer than %v %s reloads within %v", name, n, result, wait)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestNewNeedsPath(t *testing.T) {
	t.Parallel()
	_, err := (&Config{}).New(registries.Common{Name: "vms"}, nil)
	var fe *registries.FieldError
	if !errors.As(err, &fe) || fe.Key != "path" {
		t.Errorf("New without path = %v, want a FieldError on path", err)
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "services.yaml")
	write(t, path, servicesYAML("10.0.0.1"))
	c := registries.Common{Name: "conformance", Kind: "file", Domain: "vm.internal"}
	newReg := func(t *testing.T) registries.Registry {
		reg, err := (&Config{Options: filewatch.Options{Path: path}}).New(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		return reg
	}
	endpoints := func(n int) func([]model.Service) bool {
		return func(s []model.Service) bool { return len(s) == 1 && len(s[0].Endpoints) == n }
	}
	registrytest.Conformance(t, newReg,
		registrytest.Mutation{Name: "add an endpoint", Apply: func(t *testing.T) { write(t, path, servicesYAML("10.0.0.1", "10.0.0.2")) }, Want: endpoints(2)},
		registrytest.Mutation{Name: "remove every endpoint", Apply: func(t *testing.T) { replace(t, path, servicesYAML()) }, Want: endpoints(0)},
		registrytest.Mutation{Name: "remove every service", Apply: func(t *testing.T) { write(t, path, "services: []\n") }, Want: func(s []model.Service) bool { return s != nil && len(s) == 0 }},
	)
}

func TestWatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(t *testing.T, path string, content string)
		// atomic changes never show a reader a missing or partial file;
		// the others may, and a read at that moment reports Degraded.
		atomic bool
	}{
		{name: "write in place", change: write},
		{name: "atomic rename", change: replace, atomic: true},
		{name: "remove then create", change: func(t *testing.T, path, content string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			write(t, path, content)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "services.yaml")
			write(t, path, servicesYAML("10.0.0.1"))
			reg, _ := newRegistry(t, path, time.Hour) // only events can trigger reads
			sink := registrytest.NewSink()
			registrytest.Start(t, reg, sink)
			sink.WaitFor(t, wait, hasAddresses("10.0.0.1"))

			tt.change(t, path, servicesYAML("10.0.0.1", "10.0.0.2"))
			st := sink.WaitFor(t, wait, hasAddresses("10.0.0.1", "10.0.0.2"))
			if st.Replaces != 2 {
				t.Errorf("Replaces = %d, want 2", st.Replaces)
			}
			if tt.atomic && len(st.Reports) != 0 {
				t.Errorf("reports = %v, want none", st.Reports)
			}
		})
	}
}

func TestUnchangedContentIsNotRepublished(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "services.yaml")
	write(t, path, servicesYAML("10.0.0.1"))
	reg, c := newRegistry(t, path, time.Hour)
	okBefore := testutil.ToFloat64(reloads.WithLabelValues(c.Name, "ok")) // -count=N reuses names
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	sink.WaitFor(t, wait, hasAddresses("10.0.0.1"))
	waitReloads(t, c.Name, "ok", okBefore+1)

	// Same services, different bytes (a comment): read, not republished.
	replace(t, path, servicesYAML("10.0.0.1")+"# reviewed\n")
	waitReloads(t, c.Name, "ok", okBefore+2)
	if n := sink.Replaces(c.Shard()); n != 1 {
		t.Errorf("Replaces = %d after an edit that changed no service, want 1", n)
	}
}

func TestBrokenEditKeepsLastGoodState(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "services.yaml")
	good := servicesYAML("10.0.0.1")
	write(t, path, good)
	reg, c := newRegistry(t, path, time.Hour)
	errorsBefore := testutil.ToFloat64(reloads.WithLabelValues(c.Name, "error")) // -count=N reuses names
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	sink.WaitFor(t, wait, hasAddresses("10.0.0.1"))

	replace(t, path, broken)
	st := sink.WaitFor(t, wait, degradedWith(brokenErr))
	if st.Status.Err != brokenErr {
		t.Errorf("Degraded error = %q, want %q", st.Status.Err, brokenErr)
	}
	if st.Replaces != 1 || strings.Join(addresses(st), ",") != "10.0.0.1" {
		t.Errorf("after a broken edit: %d replaces, addresses %v; want the last good state kept", st.Replaces, addresses(st))
	}
	if got := testutil.ToFloat64(reloads.WithLabelValues(c.Name, "error")) - errorsBefore; got != 1 {
		t.Errorf("error reloads = %v, want 1", got)
	}

	// Restoring the very content last published must still mark it Synced.
	replace(t, path, good)
	st = sink.WaitFor(t, wait, func(s registrytest.State) bool { return s.Healthy() })
	if st.Replaces != 2 || strings.Join(addresses(st), ",") != "10.0.0.1" {
		t.Errorf("after the fix: %d replaces, addresses %v; want a second Replace of the good state", st.Replaces, addresses(st))
	}

	// A different fix is published too.
	replace(t, path, broken)
	sink.WaitFor(t, wait, degradedWith("services.yaml:7"))
	write(t, path, servicesYAML("10.0.0.3"))
	sink.WaitFor(t, wait, hasAddresses("10.0.0.3"))
}

func TestMissingFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		sub      string        // directory of the file below the temp dir
		interval time.Duration // periodic re-read
	}{
		// The directory exists and is watched: the file's creation is an event.
		{name: "file appears", sub: ".", interval: time.Hour},
		// The directory does not exist, so it cannot be watched yet: the
		// periodic re-read finds the file and starts watching.
		{name: "directory appears", sub: "conf", interval: 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), tt.sub)
			path := filepath.Join(dir, "services.yaml")
			reg, _ := newRegistry(t, path, tt.interval)
			sink := registrytest.NewSink()
			registrytest.Start(t, reg, sink)
			st := sink.WaitFor(t, wait, degradedWith("no such file or directory"))
			if !strings.Contains(st.Status.Err, path) || st.Synced() {
				t.Errorf("status = %+v, want Degraded naming %s and no Replace", st.Status, path)
			}

			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			replace(t, path, servicesYAML("10.0.0.1"))
			sink.WaitFor(t, wait, hasAddresses("10.0.0.1"))
		})
	}
}

func TestDeletedFileKeepsLastGoodState(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "services.yaml")
	write(t, path, servicesYAML("10.0.0.1"))
	reg, _ := newRegistry(t, path, time.Hour)
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	sink.WaitFor(t, wait, hasAddresses("10.0.0.1"))

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	st := sink.WaitFor(t, wait, degradedWith("no such file or directory"))
	if st.Replaces != 1 {
		t.Errorf("Replaces = %d after the file was deleted, want 1 (keep the last good state)", st.Replaces)
	}
}

// Kubernetes mounts a ConfigMap as services.yaml -> ..data/services.yaml,
// ..data -> ..<timestamp>, and updates it by swapping the ..data symlink:
// services.yaml itself never changes.
func TestConfigMapSymlinkSwap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	version := func(name, content string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, name, "services.yaml"), content)
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..2025_01_01_00_00_00.1", servicesYAML("10.0.0.1"))
	path := filepath.Join(dir, "services.yaml")
	if err := os.Symlink(filepath.Join("..data", "services.yaml"), path); err != nil {
		t.Fatal(err)
	}
	reg, _ := newRegistry(t, path, time.Hour)
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	sink.WaitFor(t, wait, hasAddresses("10.0.0.1"))

	version("..2025_01_01_00_01_00.2", servicesYAML("10.0.0.2"))
	if err := os.RemoveAll(filepath.Join(dir, "..2025_01_01_00_00_00.1")); err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, wait, hasAddresses("10.0.0.2"))
}

func TestSymlinkToAnotherDirectory(t *testing.T) {
	t.Parallel()
	// Edits of the target change nothing in the link's directory; the
	// registry watches the target's directory too.
	target := filepath.Join(t.TempDir(), "real.yaml")
	write(t, target, servicesYAML("10.0.0.1"))
	link := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	reg, _ := newRegistry(t, link, time.Hour)
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	sink.WaitFor(t, wait, hasAddresses("10.0.0.1"))
	write(t, target, servicesYAML("10.0.0.2"))
	sink.WaitFor(t, wait, hasAddresses("10.0.0.2"))
}

// TestInPlaceWriteInTwoChunks: a writer that writes the file in place in
// two chunks 0.4 s apart, the first ending at a line boundary (valid YAML
// on its own, with fewer endpoints), is never read half-way: the only
// update published after the initial one is the complete file.
func TestInPlaceWriteInTwoChunks(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "services.yaml")
	write(t, path, servicesYAML("10.0.0.1"))
	r, _ := newRegistry(t, path, time.Hour)
	r.timing.Settle = DefaultSettle
	sink := registrytest.NewSink()
	registrytest.Start(t, r, sink)
	sink.WaitFor(t, wait, hasAddresses("10.0.0.1"))

	full := servicesYAML("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4")
	cut := strings.Index(full, "      - address: 10.0.0.3")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(full[:cut]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if _, err := f.WriteString(full[cut:]); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	st := sink.WaitFor(t, wait, hasAddresses("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"))
	if st.Replaces != 2 {
		t.Errorf("%d Replaces, want 2 (the initial file, then the complete one): the half-written file was published", st.Replaces)
	}
}

// TestInvalidVersusMissing: a file that does not parse is reported
// Degraded with Invalid (not an outage); a missing file is an outage.
func TestInvalidVersusMissing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "services.yaml")
	write(t, path, servicesYAML("10.0.0.1"))
	r, _ := newRegistry(t, path, time.Hour)
	sink := registrytest.NewSink()
	registrytest.Start(t, r, sink)
	sink.WaitFor(t, wait, hasAddresses("10.0.0.1"))

	replace(t, path, broken)
	st := sink.WaitFor(t, wait, degradedWith(brokenErr))
	if !st.Status.Invalid {
		t.Errorf("broken file reported %+v, want Invalid", st.Status)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	st = sink.WaitFor(t, wait, degradedWith("no such file"))
	if st.Status.Invalid {
		t.Errorf("missing file reported %+v, want an outage (not Invalid)", st.Status)
	}
}
