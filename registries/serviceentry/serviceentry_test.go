package serviceentry

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/filewatch"
	"github.com/meshfed/meshfed/registries/registrytest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// klog's flush daemon is process-wide, started by client-go's init.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}

const wait = 5 * time.Second

func write(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// newDirRegistry returns a registry over dir with fast timings.
func newDirRegistry(t *testing.T, dir string) (*Registry, registries.Common) {
	t.Helper()
	c := registries.Common{Name: strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), Kind: "serviceentry", Domain: "ext.example"}
	cfg := &Config{Options: filewatch.Options{Path: dir}}
	cfg.ApplyDefaults()
	reg, err := cfg.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := reg.(*Registry)
	r.timing = filewatch.Timing{Quiet: 5 * time.Millisecond, MaxWait: 50 * time.Millisecond, Settle: 20 * time.Millisecond, Interval: time.Hour}
	return r, c
}

func endpointsOf(svcs []model.Service, host string) []string {
	for _, s := range svcs {
		if s.Hostname == host {
			var out []string
			for _, e := range s.Endpoints {
				out = append(out, e.Address)
			}
			return out
		}
	}
	return nil
}

func TestConformance(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "se.yaml"), seSelector)
	write(t, filepath.Join(dir, "workloads.yaml"), workloads)
	newReg := func(t *testing.T) registries.Registry {
		r, _ := newDirRegistry(t, dir)
		return r
	}
	registrytest.Conformance(t, newReg, registrytest.Mutation{
		Name: "a WorkloadEntry edited in its own file moves the selected endpoints",
		Apply: func(t *testing.T) {
			write(t, filepath.Join(dir, "workloads.yaml"), strings.Replace(workloads, "10.1.0.2", "10.1.0.22", 1))
		},
		Want: func(s []model.Service) bool {
			return slices.Equal(endpointsOf(s, "pay.ext.example"), []string{"10.1.0.1", "10.1.0.22"})
		},
	})
}

// TestBrokenFileKeepsLastGood: a file that is not YAML any more keeps its
// objects served and makes the registry Degraded (invalid data, not an
// outage) with the file named; fixing it recovers.
func TestBrokenFileKeepsLastGood(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	se, we := filepath.Join(dir, "se.yaml"), filepath.Join(dir, "workloads.yaml")
	write(t, se, seSelector)
	write(t, we, workloads)
	r, c := newDirRegistry(t, dir)
	sink := registrytest.NewSink()
	stop := registrytest.Start(t, r, sink)
	defer stop()
	sink.WaitFor(t, wait, func(s registrytest.State) bool { return len(endpointsOf(s.Services, "pay.ext.example")) == 2 })

	write(t, we, workloads+"---\nkind: [\n")
	st := sink.WaitFor(t, wait, func(s registrytest.State) bool { return s.Failing() })
	if !st.Status.Invalid || !strings.Contains(st.Status.Err, "workloads.yaml: YAML syntax error") {
		t.Errorf("status = %+v, want Degraded, invalid, naming workloads.yaml", st.Status)
	}
	if got := endpointsOf(st.Services, "pay.ext.example"); len(got) != 2 {
		t.Errorf("served %v, want the last good two endpoints", got)
	}

	// An invalid WorkloadEntry is rejected alone; the other stays selected.
	write(t, we, strings.Replace(workloads, "address: 10.1.0.1", "address: unix:///x.sock", 1))
	st = sink.WaitFor(t, wait, func(s registrytest.State) bool {
		return s.Healthy() && len(s.Rejected) == 1
	})
	if !strings.Contains(st.Rejected[0].String(), "workloads.yaml:5:12 WorkloadEntry shop/vm-1: object rejected: spec.address") ||
		!strings.Contains(st.Rejected[0].Reason, "last good version") {
		t.Errorf("rejected = %v", st.Rejected)
	}
	if got := endpointsOf(st.Services, "pay.ext.example"); len(got) != 2 {
		t.Errorf("served %v, want vm-1's last good version and vm-2", got)
	}
	for _, m := range []struct {
		kind, state string
		want        float64
	}{{"WorkloadEntry", "in_force", 4}, {"WorkloadEntry", "rejected", 1}, {"ServiceEntry", "in_force", 1}, {"ServiceEntry", "rejected", 0}} {
		if got := testutil.ToFloat64(objects.WithLabelValues(c.Name, m.kind, m.state)); got != m.want {
			t.Errorf("meshfed_serviceentry_objects{kind=%q,state=%q} = %v, want %v", m.kind, m.state, got, m.want)
		}
	}
	if got := testutil.ToFloat64(reloads.WithLabelValues(c.Name, "error")); got < 1 {
		t.Errorf("meshfed_serviceentry_reloads_total{result=error} = %v, want the broken read counted", got)
	}
}
