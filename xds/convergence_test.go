package xds

import (
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

func convergenceSamples(t *testing.T, typ string) (count uint64, sum float64) {
	t.Helper()
	var m dto.Metric
	if err := convergenceSeconds.WithLabelValues(typ).(interface{ Write(*dto.Metric) error }).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// TestConvergenceIsMeasuredFromTheRegistryChange checks that an ACK of an
// update observes the time since Snapshot.Changed, once per proxy and
// type, and that a proxy's first sync is not counted.
func TestConvergenceIsMeasuredFromTheRegistryChange(t *testing.T) {
	// Not parallel: it reads the package's histogram, which only
	// snapshots with Changed set (none in other tests) feed.
	srv := NewServer(Options{})
	var skew atomic.Int64 // added to the tracker's clock
	srv.tracker.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	first, changed, withZZ := fixtureSnapshots()
	first.Changed = time.Now()
	srv.Update(first)
	addr := startServer(t, srv)

	c := dialADS(t, addr, envoyNode("sidecar~10.1.0.9~conv~ns"), false)
	envoySubscribe(c, srv)
	c.until(servedEnvoy(srv), nil)
	n0, _ := convergenceSamples(t, "CDS")
	e0, _ := convergenceSamples(t, "EDS")

	// An update whose ACKs come (by the tracker's clock) 2s after the
	// registry change: each observes at least 2s.
	const age = 2 * time.Second
	changed.Changed = time.Now()
	withZZ.Changed = changed.Changed
	skew.Store(int64(age))
	srv.Update(changed)
	srv.Update(withZZ)
	c.until(all(hasCurrentCLA(srv), holdsCurrent(srv, ClusterType), holdsCurrent(srv, ListenerType)), nil)
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
