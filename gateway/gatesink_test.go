package gateway

import (
	"context"
	"time"

	"testing"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

func gateClosed(g *gateSink) bool {
	select {
	case <-g.first:
		return true
	default:
		return false
	}
}

// TestGateSinkServing: a new instance's gate asks the aggregator whether
// it would hold a state (aggregate.Aggregator.HoldsFirst), so the instance
// counts as published by a partial first state only when no state of its
// shard is served (a fresh start), not while one is (restored, or the
// running instance's); a complete state always counts. At open everything
// is handed over as the registry's new Run: the held partial state stays
// held.
func TestGateSinkServing(t *testing.T) {
	t.Parallel()
	c := registries.Common{Name: "vms", Kind: "file", Domain: "vm.internal"}
	o := aggregate.RegistryOptions{Common: c}
	svc := model.Service{Hostname: "a.vm.internal", Ports: []model.Port{{Number: 80, Protocol: "HTTP", Name: "http"}},
		Resolution: model.ResolutionEDS, Endpoints: []model.Endpoint{{Address: "10.0.0.1"}}}
	partial := registries.Update{HasState: true, Services: []model.Service{svc}, Condition: registries.Condition{Err: "b.yaml: bad", Invalid: true}}

	a := aggregate.New(aggregate.Options{})
	a.AddRegistry(o)
	fresh := &gateSink{agg: a, shard: c.Shard(), first: make(chan struct{})}
	var _ registries.Sink = fresh
	fresh.Publish(c.Shard(), partial)
	if !gateClosed(fresh) {
		t.Fatal("a partial first state on a fresh shard does not count as published through the gate")
	}

	b := aggregate.New(aggregate.Options{})
	b.AddRegistry(o)
	if !b.Restore(c.Shard(), []model.Service{svc}, nil) {
		t.Fatal("Restore refused")
	}
	gate := &gateSink{agg: b, shard: c.Shard(), first: make(chan struct{})}
	gate.Publish(c.Shard(), partial)
	if gateClosed(gate) {
		t.Fatal("a partial first state of a restored shard counts as published through the gate")
	}
	gate.open(o)
	if st, _ := b.Registry(c.Name); st.State != aggregate.Degraded || st.LastError != aggregate.HeldPrefix+"b.yaml: bad" || !st.LastSync.IsZero() {
		t.Errorf("after open: %+v, want the partial first state held", st)
	}
	gate.Publish(c.Shard(), registries.FullState([]model.Service{svc}, nil))
	if st, _ := b.Registry(c.Name); st.State != aggregate.Synced || st.LastSync.IsZero() {
		t.Errorf("a complete state after open: %+v, want Synced", st)
	}

	g2 := &gateSink{agg: b, shard: c.Shard(), first: make(chan struct{})}
	g2.Publish(c.Shard(), registries.FullState([]model.Service{svc}, nil))
	if !gateClosed(g2) {
		t.Error("a complete first state does not count as published through the gate")
	}
}

// TestGateSinkSwapKeepsOldInstancesHold: a reload while the backend
// restarts (chaos seed 25, reload-backend-down). The old instance reads
// the restarting backend's empty catalog: held down by maxDeleteRatio. The
// new instance, staged behind its gate, reads the same empty catalog as
// its first state; the swap must not take that for a second sighting that
// confirms the hold: the old endpoints stay served until the new
// instance's next state.
func TestGateSinkSwapKeepsOldInstancesHold(t *testing.T) {
	t.Parallel()
	c := registries.Common{Name: "consul", Kind: "consul", Domain: "consul"}
	o := aggregate.RegistryOptions{Common: c, MaxDeleteRatio: 0.5}
	svc := model.Service{Hostname: "c0.consul", Ports: []model.Port{{Number: 80, Protocol: "HTTP", Name: "http"}},
		Resolution: model.ResolutionEDS, Endpoints: []model.Endpoint{{Address: "10.0.0.1"}, {Address: "10.0.0.2"}}}
	a := aggregate.New(aggregate.Options{Registries: []aggregate.RegistryOptions{o}, HoldDown: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	served := func() int {
		s, ok := a.Snapshot().Service("c0.consul")
		if !ok {
			return 0
		}
		return len(s.Endpoints)
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	a.Publish(c.Shard(), registries.FullState([]model.Service{svc}, nil))
	until("the state served", func() bool { return served() == 2 })

	down := registries.Update{Condition: registries.Condition{Err: "connection refused"}}
	a.Publish(c.Shard(), down)
	gate := &gateSink{agg: a, shard: c.Shard(), first: make(chan struct{})}
	gate.Publish(c.Shard(), down)
	// The agent is back, its catalog not yet restored: both instances read it.
	a.Publish(c.Shard(), registries.FullState(nil, nil))
	until("the old instance's empty state held", func() bool {
		st, _ := a.Registry(c.Name)
		return st.Hold != nil
	})
	gate.Publish(c.Shard(), registries.FullState(nil, nil))
	if !gateClosed(gate) {
		t.Fatal("a complete first state does not count as published through the gate")
	}
	edited := o
	edited.Locality = model.Locality{Region: "edited"} // the reload's edit
	gate.open(edited)
	until("the swap built", func() bool {
		s, ok := a.Snapshot().Service("c0.consul")
		return !ok || s.Endpoints[0].Locality.Region == "edited"
	})
	if n := served(); n != 2 {
		t.Fatalf("after the swap %d endpoints served, want the held-back 2", n)
	}
	gate.Publish(c.Shard(), registries.FullState([]model.Service{svc}, nil))
	until("the hold cleared", func() bool {
		st, _ := a.Registry(c.Name)
		return st.Hold == nil && served() == 2
	})
}
