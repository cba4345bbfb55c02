package aggregate

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshfed/meshfed/model"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	r := prometheus.NewPedanticRegistry()
	for _, c := range Collectors() {
		if err := r.Register(c); err != nil {
			t.Fatalf("register: %v", err)
		}
	}
	o := reg("metrics-test", "file", "vm")
	a := New(Options{Registries: []RegistryOptions{o}})
	start(t, a)
	replace(a, shard(o), []model.Service{svc("a.vm", "10.0.0.1", "10.0.0.2")}, nil)
	eventually(t, "endpoints gauge", func() bool {
		return testutil.ToFloat64(registryEndpoints.WithLabelValues(o.Name)) == 2
	})
	report(a, shard(o), status{State: Degraded, Err: "x"})
	for state, want := range map[string]float64{"Degraded": 1, "Synced": 0, "Starting": 0} {
		if got := testutil.ToFloat64(registryState.WithLabelValues(o.Name, state)); got != want {
			t.Errorf("meshfed_registry_state{state=%q} = %v, want %v", state, got, want)
		}
	}
	if n := seriesOf(t, r, o.Name); n < 7 {
		t.Errorf("%d series for the registry, want 5 states, services and endpoints", n)
	}
	if problems, err := testutil.GatherAndLint(r); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
	a.RemoveRegistry(o.Name)
	if n := seriesOf(t, r, o.Name); n != 0 {
		t.Errorf("%d series of a removed registry remain", n)
	}
}

// seriesOf counts the gathered series labelled registry=name.
func seriesOf(t *testing.T, g prometheus.Gatherer, name string) int {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "registry" && l.GetValue() == name {
					n++
				}
			}
		}
	}
	return n
}
