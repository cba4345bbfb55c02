package consul

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
	"github.com/meshfed/meshfed/test/servers"
)

// TestRemoteDatacenter: two datacenters joined over the WAN, dc1 and dc2,
// each a Consul agent of its own. Registries talk to dc1's agent and
// watch dc2 (datacenter: dc2), in each way the registry can serve a
// catalog: a blocking query per service, turns with health hints
// (streaming off, maxConcurrentWatches 8), and the servers' event stream
// (maxConcurrentWatches 8, streaming auto), whose subscriptions dc1's
// leader forwards to dc2. Each publishes dc2's services, none of dc1's,
// with dc2 as their endpoints' region, and serves a new address and a
// failing check made in dc2.
func TestRemoteDatacenter(t *testing.T) {
	t.Parallel()
	const services = 40
	dc1 := servers.StartConsul(t, servers.ConsulOptions{Dev: true})
	dc2 := servers.StartConsul(t, servers.ConsulOptions{Dev: true, Datacenter: "dc2", JoinWAN: dc1.SerfWANAddr})
	cl1, cl2 := agentClient(t, dc1), agentClient(t, dc2)
	if dcs, err := cl1.Catalog().Datacenters(); err != nil || !slices.Contains(dcs, "dc2") {
		t.Fatalf("dc1 does not know dc2 once dc2 joined it: %v %v", dcs, err)
	}
	dc2.RegisterBulk(t, services, 1, 4)
	if err := cl1.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "dc1-only", Name: "dc1-only", Port: 80, Address: "192.0.2.1"}); err != nil {
		t.Fatal(err)
	}

	type mode struct {
		name string
		edit func(*Config)
		reg  *Registry
		sink *registrytest.Sink
	}
	modes := []*mode{
		{name: "blocking", edit: func(c *Config) { c.Streaming = StreamingOff }},
		// Turns of waitTime×8/41 (≥ 1s): 2 s, a round over every service
		// in about waitTime, 10 s.
		{name: "turns", edit: func(c *Config) {
			c.Streaming, c.MaxConcurrentWatches, c.WaitTime = StreamingOff, 8, registries.Duration(10*time.Second)
		}},
		{name: "stream", edit: func(c *Config) { c.MaxConcurrentWatches = 8 }},
	}
	for _, m := range modes {
		m.reg = newRegistry(t, dc1, "dc2-"+m.name, func(c *Config) {
			c.Datacenter, c.WaitTime = "dc2", registries.Duration(5*time.Minute)
			m.edit(c)
		})
		m.sink = registrytest.NewSink()
		registrytest.Start(t, m.reg, m.sink)
	}
	var want []model.Service
	for i, m := range modes {
		st := m.sink.WaitFor(t, wait, func(st registrytest.State) bool { return st.Synced() && len(st.Services) == services+1 })
		if _, ok := find(st.Services, "dc1-only.consul"); ok {
			t.Errorf("%s: publishes dc1's service dc1-only", m.name)
		}
		for _, s := range st.Services {
			for _, e := range s.Endpoints {
				if e.Locality.Region != "dc2" {
					t.Errorf("%s: %s %s has region %q, want dc2", m.name, s.Hostname, e.Origin, e.Locality.Region)
				}
			}
		}
		if got := anonymous(st.Services); i == 0 {
			want = got
		} else if d := registrytest.DiffServices(want, got); d != "" {
			t.Errorf("%s: differs from a blocking query per service (-blocking +%s):\n%s", m.name, m.name, d)
		}
	}
	if got := testutil.ToFloat64(modes[2].reg.m.subscriptions); got != services+1 {
		t.Errorf("stream: %v event stream subscriptions, want one per service of dc2 (%d)", got, services+1)
	}

	// Changes made in dc2 (through its own agent): one instance's new
	// address, then another's failing check. Turns serve the address at
	// the service's next turn (within a round, ≈ 10 s); the failing check
	// comes ahead of it, by a health hint.
	const host = "svc-7.consul"
	if _, err := cl2.Catalog().Register(&api.CatalogRegistration{
		Node: "node-0", Address: "198.51.100.1", SkipNodeUpdate: true,
		Service: &api.AgentService{ID: "svc-7-0", Service: "svc-7", Address: "192.0.2.77", Port: 1007},
	}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cl2.Catalog().Register(&api.CatalogRegistration{
		Node: "node-0", Address: "198.51.100.1", SkipNodeUpdate: true,
		Check: &api.AgentCheck{CheckID: "check-9-0", Name: "up", Status: api.HealthCritical, ServiceID: "svc-9-0"},
	}, nil); err != nil {
		t.Fatal(err)
	}
	for _, m := range modes {
		m.sink.WaitFor(t, 2*time.Minute, func(st registrytest.State) bool {
			s, ok := find(st.Services, host)
			h, _ := endpointHealth(st, "svc-9.consul", "node-0/svc-9-0")
			return ok && len(s.Endpoints) == 1 && s.Endpoints[0].Address == "192.0.2.77" && h == model.Unhealthy
		})
		if pr := m.sink.Problems(); len(pr) > 0 {
			t.Errorf("%s: sink problems: %v", m.name, pr)
		}
		if st := m.sink.WaitFor(t, wait, registrytest.State.Synced); len(st.Reports) > 0 {
			t.Errorf("%s: reports %v, want none", m.name, st.Reports)
		}
	}
}
