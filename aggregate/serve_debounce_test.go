package aggregate

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshfed/meshfed/model"
)

// TestServeDebounces drives the real Serve loop with a burst of Replaces
// spaced closer than Quiet: snapshots still come out during the burst
// (MaxWait), far fewer than the updates, and the last one wins.
func TestServeDebounces(t *testing.T) {
	t.Parallel()
	o := reg("vms", "file", "vm")
	a := New(Options{Registries: []RegistryOptions{o}, Quiet: 40 * time.Millisecond, MaxWait: 100 * time.Millisecond})
	var published atomic.Int64
	a.Subscribe(func(s *model.Snapshot) {
		if n := published.Add(1); s.Version != uint64(n) {
			t.Errorf("subscriber got version %d as snapshot #%d; want them in order, one by one", s.Version, n)
		}
	})
	start(t, a)

	const updates = 150
	burst := time.NewTicker(4 * time.Millisecond)
	defer burst.Stop()
	var duringBurst int64
	for i := range updates {
		<-burst.C
		replace(a, shard(o), []model.Service{svc("a.vm", fmt.Sprintf("10.0.%d.%d", i/250, i%250+1))}, nil)
		if i == updates-1 {
			duringBurst = published.Load()
		}
	}
	eventually(t, "the last update served", func() bool {
		got := addrs(a.Snapshot(), "a.vm")
		return len(got) == 1 && got[0] == fmt.Sprintf("10.0.%d.%d", (updates-1)/250, (updates-1)%250+1)
	})
	if duringBurst < 1 {
		t.Errorf("no snapshot published during a %d-update burst; MaxWait should cap the wait", updates)
	}
	if n := published.Load(); n > updates/3 {
		t.Errorf("%d snapshots for %d updates; want them coalesced", n, updates)
	}
	if v := a.Snapshot().Version; v != uint64(published.Load()) {
		t.Errorf("version %d, want one per published snapshot (%d)", v, published.Load())
	}
}
