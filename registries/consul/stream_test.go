package consul

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
	"github.com/meshfed/meshfed/test/logbuf"
	"github.com/meshfed/meshfed/test/servers"
)

// anonymous returns services with the registry's name taken out of each
// endpoint, so that two registries' answers compare.
func anonymous(services []model.Service) []model.Service {
	out := registrytest.CloneServices(services)
	for i := range out {
		for j := range out[i].Endpoints {
			out[i].Endpoints[j].Source = model.Source{}
		}
	}
	return registrytest.Sorted(out)
}

// TestEventStreamServesServicesBeyondTheBudget: 300 services over plain
// HTTP with maxConcurrentWatches 8 and waitTime 5m. Blocking queries would
// take turns of 8s and serve a change within a round of 5 minutes; the
// registry follows the servers' event stream instead, so every kind of
// change is served within 30s: a new instance without checks, a new
// address, a check and a node check turning critical, a deregistration, a
// new service and a removed one. At every step its state equals that of
// a registry holding a blocking query per service (the agent's limit
// raised for it), with and without the tag and passing-only filters.
func TestEventStreamServesServicesBeyondTheBudget(t *testing.T) {
	t.Parallel()
	const services = 300
	agent := servers.StartConsul(t, servers.ConsulOptions{Dev: true, MaxConnsPerClient: 2000})
	cl := agentClient(t, agent)
	agent.RegisterSpread(t, services, 1, 100, 4)
	type pair struct {
		name                     string
		stream, blocking         *Registry
		streamSink, blockingSink *registrytest.Sink
	}
	var pairs []*pair
	for _, filter := range []struct {
		name    string
		tags    []string
		passing bool
	}{{"all", nil, false}, {"filtered", []string{"canary"}, true}} {
		p := &pair{name: filter.name, streamSink: registrytest.NewSink(), blockingSink: registrytest.NewSink()}
		p.stream = newRegistry(t, agent, "stream-"+filter.name, func(c *Config) {
			c.MaxConcurrentWatches, c.WaitTime = 8, registries.Duration(5*time.Minute)
			c.Tags, c.PassingOnly = filter.tags, filter.passing
		})
		p.blocking = newRegistry(t, agent, "blocking-"+filter.name, func(c *Config) {
			c.WaitTime, c.Streaming = registries.Duration(5*time.Minute), StreamingOff
			c.Tags, c.PassingOnly = filter.tags, filter.passing
		})
		registrytest.Start(t, p.stream, p.streamSink)
		registrytest.Start(t, p.blocking, p.blockingSink)
		pairs = append(pairs, p)
	}
	all := pairs[0]
	st := all.streamSink.WaitFor(t, wait, registrytest.State.Synced)
	if len(st.Services) != services+1 { // + consul itself
		t.Fatalf("published %d services, want %d", len(st.Services), services+1)
	}
	if got := testutil.ToFloat64(all.stream.m.subscriptions); got != services+1 {
		t.Errorf("%v event streams open, want one per service (%d)", got, services+1)
	}
	if got := testutil.ToFloat64(inFlight.WithLabelValues("stream-all")); got > 1 {
		t.Errorf("%v blocking queries in flight, want only the catalog's", got)
	}

	register := func(node, id, service, addr string, tags []string, status string) {
		t.Helper()
		reg := &api.CatalogRegistration{Node: node, Address: "10.0.0.0", SkipNodeUpdate: true,
			Service: &api.AgentService{ID: id, Service: service, Address: addr, Port: 9000, Tags: tags}}
		if status != "" {
			reg.Check = &api.AgentCheck{Node: node, CheckID: "check-" + id, Name: "up", Status: status, ServiceID: id}
		}
		if _, err := cl.Catalog().Register(reg, nil); err != nil {
			t.Fatal(err)
		}
	}
	setCheck := func(node, checkID, serviceID, status string) {
		t.Helper()
		_, err := cl.Catalog().Register(&api.CatalogRegistration{Node: node, Address: "10.0.0.0", SkipNodeUpdate: true,
			Check: &api.AgentCheck{Node: node, CheckID: checkID, Name: "up", Status: status, ServiceID: serviceID}}, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	deregister := func(node, id string) {
		t.Helper()
		if _, err := cl.Catalog().Deregister(&api.CatalogDeregistration{Node: node, ServiceID: id}, nil); err != nil {
			t.Fatal(err)
		}
	}
	addrOf := func(st registrytest.State, host, origin string) string {
		s, _ := find(st.Services, host)
		for _, e := range s.Endpoints {
			if e.Origin == origin {
				return e.Address
			}
		}
		return ""
	}
	// step makes a change, waits until the unfiltered streaming registry
	// shows it, then until each streaming registry's state equals its
	// blocking twin's.
	step := func(name string, change func(), seen func(registrytest.State) bool) {
		t.Helper()
		start := time.Now()
		change()
		all.streamSink.WaitFor(t, wait, seen)
		t.Logf("%s: served after %v", name, time.Since(start).Round(time.Millisecond))
		for _, p := range pairs {
			var got, want []model.Service
			deadline := time.Now().Add(wait)
			for {
				got = anonymous(p.streamSink.WaitFor(t, wait, registrytest.State.Synced).Services)
				want = anonymous(p.blockingSink.WaitFor(t, wait, registrytest.State.Synced).Services)
				if registrytest.EqualServices(got, want) || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if d := registrytest.DiffServices(want, got); d != "" {
				t.Errorf("%s, %s: the event stream's state differs from the blocking queries' (-blocking +stream):\n%s", name, p.name, d)
			}
		}
	}
	const host, origin = "svc-150.consul", "node-1/extra-150"
	step("a new instance without checks", func() { register("node-1", "extra-150", "svc-150", "10.9.0.1", []string{"canary"}, "") },
		func(st registrytest.State) bool { return addrOf(st, host, origin) == "10.9.0.1" })
	step("its new address", func() { register("node-1", "extra-150", "svc-150", "10.9.0.2", []string{"canary"}, "") },
		func(st registrytest.State) bool { return addrOf(st, host, origin) == "10.9.0.2" })
	step("a failing check", func() { register("node-1", "extra-150", "svc-150", "10.9.0.2", []string{"canary"}, api.HealthCritical) },
		func(st registrytest.State) bool {
			h, _ := endpointHealth(st, host, origin)
			return h == model.Unhealthy
		})
	step("node-2's node check fails", func() { setCheck("node-2", "node-down", "", api.HealthCritical) },
		func(st registrytest.State) bool {
			for s := 200; s < 300; s++ {
				if h, _ := endpointHealth(st, fmt.Sprintf("svc-%d.consul", s), fmt.Sprintf("node-2/svc-%d-0", s)); h != model.Unhealthy {
					return false
				}
			}
			return true
		})
	step("the instance deregistered", func() { deregister("node-1", "extra-150") },
		func(st registrytest.State) bool { return addrOf(st, host, origin) == "" })
	step("a new service", func() { register("node-0", "fresh-0", "fresh", "10.9.1.1", []string{"canary"}, api.HealthPassing) },
		func(st registrytest.State) bool { _, ok := find(st.Services, "fresh.consul"); return ok })
	step("a service removed", func() { deregister("node-0", "svc-7-0") },
		func(st registrytest.State) bool { _, ok := find(st.Services, "svc-7.consul"); return !ok })

	if got := testutil.ToFloat64(all.stream.m.hinted); got != 0 {
		t.Errorf("%v services hinted, want none (no service takes turns)", got)
	}
	for _, p := range pairs {
		if pr := p.streamSink.Problems(); len(pr) > 0 {
			t.Errorf("%s: sink problems: %v", p.name, pr)
		}
		if st := p.streamSink.WaitFor(t, wait, registrytest.State.Synced); len(st.Reports) > 0 {
			t.Errorf("%s: reports %v, want none", p.name, st.Reports)
		}
	}
}

// TestEventStreamRefusedFallsBackToTurns: servers that require TLS on
// their RPC port (tls.internal_rpc.verify_incoming) refuse the event
// stream; the registry says so and serves the services in turns on
// blocking queries, health hints included.
func TestEventStreamRefusedFallsBackToTurns(t *testing.T) {
	t.Parallel()
	const services = 40
	agent := servers.StartConsul(t, servers.ConsulOptions{Dev: true, TLS: true, RPCVerifyIncoming: true})
	agent.RegisterBulk(t, services, 1, 2)
	var logs logbuf.Buffer
	cfg := &Config{Address: agent.HTTPAddr, MaxConcurrentWatches: 8, WaitTime: registries.Duration(time.Minute)}
	reg := registrytest.NewRegistry[*Registry](t, cfg, registries.Common{Name: "refused", Kind: "consul", Domain: "consul"}, slog.New(slog.NewTextHandler(&logs, nil)))
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	st := sink.WaitFor(t, wait, registrytest.State.Synced)
	if len(st.Services) != services+1 {
		t.Fatalf("published %d services, want %d", len(st.Services), services+1)
	}
	if got := testutil.ToFloat64(reg.m.subscriptions); got != 0 {
		t.Errorf("%v event streams open, want none", got)
	}
	if !strings.Contains(logs.String(), "event stream not usable") {
		t.Errorf("no warning that the event stream is not usable; logs:\n%s", logs.String())
	}
	// Turns: 8 service queries, the catalog's, and the two on checks.
	if got := awaitInFlight("refused", 11); got != 11 {
		t.Errorf("%v blocking queries in flight, want 11 (8 taking turns, the catalog, critical and warning checks)", got)
	}
	if st.Status.Failing() {
		t.Errorf("status %+v, want healthy", st.Status)
	}
}

// TestEventStreamSendsTheToken: with ACLs (default deny) the event
// stream carries the registry's token: a token that reads services svc-*
// and every node gets those services with all their instances from the
// stream (none of the consul service, which it cannot read), and an
// instance added later is served.
func TestEventStreamSendsTheToken(t *testing.T) {
	t.Parallel()
	const mgmt, services = "5a0f6f0e-7f43-4c55-a3a3-6d1d0c1a9b27", 20
	agent := servers.StartConsul(t, servers.ConsulOptions{Dev: true, ACLToken: mgmt})
	cl := agentClient(t, agent)
	for s := range services {
		for i := range 2 {
			_, err := cl.Catalog().Register(&api.CatalogRegistration{Node: fmt.Sprintf("node-%d", i), Address: fmt.Sprintf("10.0.0.%d", i),
				Service: &api.AgentService{ID: fmt.Sprintf("svc-%d-%d", s, i), Service: fmt.Sprintf("svc-%d", s), Port: 80}}, nil)
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	tokenFile := aclTokenFile(t, cl, "svc-read", `service_prefix "svc-" { policy = "read" } node_prefix "" { policy = "read" }`)
	reg := newRegistry(t, agent, "stream-acl", func(c *Config) {
		c.TokenFile, c.MaxConcurrentWatches, c.WaitTime = tokenFile, 4, registries.Duration(5*time.Minute)
	})
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	st := sink.WaitFor(t, wait, registrytest.State.Synced)
	if len(st.Services) != services || endpoints(st.Services) != 2*services {
		t.Fatalf("published %d services with %d endpoints, want %d with %d: %v", len(st.Services), endpoints(st.Services), services, 2*services, st)
	}
	if got := testutil.ToFloat64(reg.m.subscriptions); got != services {
		t.Errorf("%v event streams open, want %d", got, services)
	}
	_, err := cl.Catalog().Register(&api.CatalogRegistration{Node: "late", Address: "10.1.2.3",
		Service: &api.AgentService{ID: "svc-3-late", Service: "svc-3", Port: 80}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, wait, func(st registrytest.State) bool {
		s, _ := find(st.Services, "svc-3.consul")
		return len(s.Endpoints) == 3
	})
}

// TestEventStreamProbedAgain: servers that refused the event stream at
// start (tls.internal_rpc.verify_incoming) and accept it after a restart
// get it: the refused probe is tried again (reprobeAfter, 1s here), and
// the services that took turns move to the stream, the checks' watches
// end, and a change is served.
func TestEventStreamProbedAgain(t *testing.T) {
	t.Parallel()
	const services = 20
	agent := servers.StartConsul(t, servers.ConsulOptions{TLS: true, RPCVerifyIncoming: true})
	cl := agentClient(t, agent)
	agent.RegisterBulk(t, services, 1, 2)
	reg := newRegistry(t, agent, "reprobe", func(c *Config) {
		c.MaxConcurrentWatches, c.WaitTime = 4, registries.Duration(5*time.Minute)
		c.Backoff = BackoffConfig{Initial: registries.Duration(50 * time.Millisecond), Max: registries.Duration(500 * time.Millisecond)}
	})
	reg.reprobe = time.Second
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	if st := sink.WaitFor(t, wait, registrytest.State.Synced); len(st.Services) != services+1 {
		t.Fatalf("published %d services, want %d", len(st.Services), services+1)
	}
	if got := testutil.ToFloat64(reg.m.subscriptions); got != 0 {
		t.Fatalf("%v event streams open on servers that refuse them", got)
	}
	if got := awaitInFlight("reprobe", 4+3); got != 4+3 {
		t.Errorf("%v blocking queries in flight, want 7 (4 taking turns, the catalog, critical and warning checks)", got)
	}

	agent.SetRPCVerifyIncoming(t, false)
	agent.Stop(t)
	agent.Start(t)
	streams := func() float64 { return testutil.ToFloat64(reg.m.subscriptions) }
	if got := awaitGauge(2*wait, streams, func(v float64) bool { return v >= services+1 }); got != services+1 {
		t.Fatalf("%v event streams open after the servers accept them, want %d", got, services+1)
	}
	// Only the catalog's blocking query is left: no turns, no checks' watches.
	reprobeQueries := func() float64 { return testutil.ToFloat64(inFlight.WithLabelValues("reprobe")) }
	if got := awaitGauge(wait, reprobeQueries, func(v float64) bool { return v <= 1 }); got > 1 {
		t.Errorf("%v blocking queries in flight after the move, want only the catalog's (none between its rounds)", got)
	}
	_, err := cl.Catalog().Register(&api.CatalogRegistration{Node: "late", Address: "10.7.7.7",
		Service: &api.AgentService{ID: "svc-5-late", Service: "svc-5", Port: 80}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, wait, func(st registrytest.State) bool {
		s, _ := find(st.Services, "svc-5.consul")
		return st.Healthy() && len(s.Endpoints) == 2
	})
}

// TestCatalogGrowingPastTheBudget: a catalog within the budget has a
// blocking query per service; when it grows past it, every service moves
// to the event stream, those that had a query included, and the new ones
// are served.
func TestCatalogGrowingPastTheBudget(t *testing.T) {
	t.Parallel()
	agent := servers.StartConsul(t, servers.ConsulOptions{Dev: true})
	agent.RegisterBulk(t, 3, 1, 2)
	reg := newRegistry(t, agent, "growing", func(c *Config) {
		c.MaxConcurrentWatches, c.WaitTime = 8, registries.Duration(5*time.Minute)
	})
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	if st := sink.WaitFor(t, wait, registrytest.State.Synced); len(st.Services) != 4 {
		t.Fatalf("published %d services, want 4", len(st.Services))
	}
	if got := awaitInFlight("growing", 5); got != 5 || testutil.ToFloat64(reg.m.subscriptions) != 0 {
		t.Fatalf("%v blocking queries, %v event streams; want 5 (one per service and the catalog's) and none",
			got, testutil.ToFloat64(reg.m.subscriptions))
	}
	agent.RegisterBulk(t, 20, 1, 2) // svc-0 … svc-19: 17 more services
	sink.WaitFor(t, wait, func(st registrytest.State) bool { return st.Healthy() && len(st.Services) == 21 })
	streams := func() float64 { return testutil.ToFloat64(reg.m.subscriptions) }
	if got := awaitGauge(wait, streams, func(v float64) bool { return v >= 21 }); got != 21 {
		t.Errorf("%v event streams open, want 21 (every service)", got)
	}
	queries := func() float64 { return testutil.ToFloat64(inFlight.WithLabelValues("growing")) }
	if got := awaitGauge(wait, queries, func(v float64) bool { return v <= 1 }); got > 1 {
		t.Errorf("%v blocking queries in flight, want only the catalog's (none between its rounds)", got)
	}
}
