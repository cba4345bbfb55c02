package xds

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/meshfed/meshfed/xds/translate"
)

// series reads the series of name whose label has value from the
// package's collectors, as /metrics serves it; nil when absent.
func series(t *testing.T, name, label, value string) *dto.Metric {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m
				}
			}
		}
	}
	return nil
}

// metricValue is the value of a counter or gauge series (0 when absent).
func metricValue(t *testing.T, name, label, value string) float64 {
	t.Helper()
	m := series(t, name, label, value)
	return m.GetCounter().GetValue() + m.GetGauge().GetValue()
}

// convergenceSamples reads meshfed_xds_convergence_seconds{type=typ}.
func convergenceSamples(t *testing.T, typ string) (count uint64, sum float64) {
	t.Helper()
	m := series(t, "meshfed_xds_convergence_seconds", "type", typ)
	if m == nil {
		t.Fatalf("no meshfed_xds_convergence_seconds{type=%q}", typ)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// TestConvergenceIsMeasuredFromTheRegistryChange checks that an ACK of an
// update observes the time since Snapshot.Changed, once per proxy and
// type, and that a proxy's first sync is not counted.
func TestConvergenceIsMeasuredFromTheRegistryChange(t *testing.T) {
	// Not parallel: it reads the package's histogram, which only
	// snapshots with Changed set (none in other tests) feed.
	var skew atomic.Int64 // added to the status clock
	srv := NewServer(Options{now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
	first, changed, withZZ := fixtureSnapshots()
	first.Changed = time.Now()
	srv.Update(first)
	addr := startServer(t, srv)

	c := dialADS(t, addr, envoyNode("sidecar~10.1.0.9~conv~ns"), false)
	envoySubscribe(c, srv)
	c.until(servedEnvoy(srv), nil)
	n0, _ := convergenceSamples(t, "CDS")
	e0, _ := convergenceSamples(t, "EDS")

	// An update whose ACKs come (by the status clock) 2s after the
	// registry change: each observes at least 2s.
	const age = 2 * time.Second
	changed.Changed = time.Now()
	withZZ.Changed = changed.Changed
	skew.Store(int64(age))
	srv.Update(changed)
	srv.Update(withZZ)
	c.until(all(hasCurrentCLA(srv), holdsCurrent(srv, translate.ClusterType), holdsCurrent(srv, translate.ListenerType)), nil)
	eventually(t, "CDS and EDS convergence observed", func() bool {
		n, _ := convergenceSamples(t, "CDS")
		e, _ := convergenceSamples(t, "EDS")
		return n > n0 && e > e0
	})
	n1, sum := convergenceSamples(t, "CDS")
	if got := n1 - n0; got != 1 {
		t.Errorf("CDS convergence observed %d times for one proxy and one update, want 1", got)
	}
	if sum < age.Seconds() {
		t.Errorf("CDS convergence sum %.3fs, want at least the update's age %s", sum, age)
	}
}
