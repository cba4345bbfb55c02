package gateway

import (
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
