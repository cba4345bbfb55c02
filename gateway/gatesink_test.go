package gateway

import (
	"testing"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// TestGateSinkServing: a new instance's gate answers Serving as the
// aggregator does, so the instance holds a partial first state only when
// a state of its shard is served (restored, or the running instance's),
// and publishes the readable part on a fresh start.
func TestGateSinkServing(t *testing.T) {
	t.Parallel()
	c := registries.Common{Name: "vms", Kind: "file", Domain: "vm.internal"}
	a := aggregate.New(aggregate.Options{})
	a.AddRegistry(aggregate.RegistryOptions{Common: c})
	gate := &gateSink{agg: a, shard: c.Shard(), first: make(chan struct{})}
	var _ registries.ServingSink = gate
	if gate.Serving(c.Shard()) {
		t.Fatal("a fresh shard is served through the gate")
	}
	svc := model.Service{Hostname: "a.vm.internal", Ports: []model.Port{{Number: 80, Protocol: "HTTP", Name: "http"}},
		Resolution: model.ResolutionEDS, Endpoints: []model.Endpoint{{Address: "10.0.0.1"}}}
	if !a.Restore(c.Shard(), []model.Service{svc}, nil) {
		t.Fatal("Restore refused")
	}
	if !gate.Serving(c.Shard()) {
		t.Error("a restored shard is not served through the gate")
	}
}
