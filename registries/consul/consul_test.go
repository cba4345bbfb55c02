package consul

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
	"github.com/meshfed/meshfed/test/servers"
)

const wait = 30 * time.Second

// agentClient is an API client for the test's own writes; its idle
// connections are closed in t.Cleanup.
func agentClient(t *testing.T, c *servers.Consul) *api.Client {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	cl, err := api.NewClient(&api.Config{Address: c.HTTPAddr, Token: c.Token, HttpClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// newRegistry builds a registry named name over the agent; edit tunes the
// config before defaults.
func newRegistry(t *testing.T, c *servers.Consul, name string, edit func(*Config)) *Registry {
	t.Helper()
	cfg := &Config{Address: c.HTTPAddr, WaitTime: registries.Duration(time.Minute)}
	if edit != nil {
		edit(cfg)
	}
	return registrytest.NewRegistry[*Registry](t, cfg, registries.Common{Name: name, Kind: "consul", Domain: "consul"}, nil)
}

func find(svcs []model.Service, host string) (model.Service, bool) {
	i := slices.IndexFunc(svcs, func(s model.Service) bool { return s.Hostname == host })
	if i < 0 {
		return model.Service{}, false
	}
	return svcs[i], true
}

// endpointHealth returns the health of the endpoint with origin in host,
// and whether it is published.
func endpointHealth(st registrytest.State, host, origin string) (model.Health, bool) {
	s, ok := find(st.Services, host)
	if !ok {
		return 0, false
	}
	for _, e := range s.Endpoints {
		if e.Origin == origin {
			return e.Health, true
		}
	}
	return 0, false
}

func TestAgentRegistrationsHealthAndQuarantine(t *testing.T) {
	t.Parallel()
	agent := servers.StartConsul(t, servers.ConsulOptions{Dev: true})
	cl := agentClient(t, agent)
	register := func(id string, port int) {
		t.Helper()
		err := cl.Agent().ServiceRegister(&api.AgentServiceRegistration{
			ID: id, Name: "orders", Port: port, Address: "192.0.2.10",
			Tags:  []string{"v1", "version=2"},
			Meta:  map[string]string{"protocol": "grpc", "team": "pay"},
			Check: &api.AgentServiceCheck{CheckID: "ttl-" + id, TTL: "10m"},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	register("orders-1", 8080)

	reg := newRegistry(t, agent, "health", nil)
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)

	origin := agent.Node + "/orders-1"
	host := "orders.consul"
	healthIs := func(want model.Health) func(registrytest.State) bool {
		return func(st registrytest.State) bool {
			h, ok := endpointHealth(st, host, origin)
			return ok && h == want
		}
	}
	// A TTL check starts critical.
	st := sink.WaitFor(t, wait, healthIs(model.Unhealthy))
	svc, _ := find(st.Services, host)
	wantPort := model.Port{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}
	if len(svc.Ports) != 1 || svc.Ports[0] != wantPort {
		t.Errorf("ports = %+v, want [%+v]", svc.Ports, wantPort)
	}
	ep := svc.Endpoints[0]
	wantLabels := map[string]string{"v1": "", "version": "2", "team": "pay"}
	if ep.Address != "192.0.2.10" || !mapsEqual(ep.Labels, wantLabels) || ep.Locality.Region != "dc1" {
		t.Errorf("endpoint = %+v, want address 192.0.2.10, labels %v, region dc1", ep, wantLabels)
	}

	for _, step := range []struct {
		name   string
		update func(string, string) error
		want   model.Health
	}{
		{name: "pass", update: cl.Agent().PassTTL, want: model.Healthy},
		{name: "warn", update: cl.Agent().WarnTTL, want: model.Degraded},
		{name: "fail", update: cl.Agent().FailTTL, want: model.Unhealthy},
		{name: "pass again", update: cl.Agent().PassTTL, want: model.Healthy},
	} {
		if err := step.update("ttl-orders-1", step.name); err != nil {
			t.Fatal(err)
		}
		sink.WaitFor(t, wait, healthIs(step.want))
	}

	// A malformed instance of the same service is quarantined alone.
	register("orders-bad", 0)
	register("orders-2", 9090)
	st = sink.WaitFor(t, wait, func(st registrytest.State) bool {
		_, ok := endpointHealth(st, host, agent.Node+"/orders-2")
		return ok
	})
	svc, _ = find(st.Services, host)
	if len(svc.Endpoints) != 2 {
		t.Errorf("endpoints = %+v, want orders-1 and orders-2", svc.Endpoints)
	}
	if len(st.Rejected) != 1 || st.Rejected[0].Subject != agent.Node+"/orders-bad" || st.Rejected[0].Host != host {
		t.Errorf("rejected = %+v, want one for %s/orders-bad", st.Rejected, agent.Node)
	}
	// orders-2 listens on another port than the service's.
	for _, e := range svc.Endpoints {
		if got, _ := e.PortFor(svc.Ports[0]); e.Origin == agent.Node+"/orders-2" && got != 9090 {
			t.Errorf("orders-2 port = %d, want 9090", got)
		}
	}

	// Deregistration removes the endpoint, then the service.
	for _, id := range []string{"orders-bad", "orders-1", "orders-2"} {
		if err := cl.Agent().ServiceDeregister(id); err != nil {
			t.Fatal(err)
		}
	}
	sink.WaitFor(t, wait, func(st registrytest.State) bool {
		_, ok := find(st.Services, host)
		return !ok && len(st.Rejected) == 0
	})
	if p := sink.Problems(); len(p) > 0 {
		t.Errorf("sink problems: %v", p)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestPassingOnlyAndTagFilter(t *testing.T) {
	t.Parallel()
	agent := servers.StartConsul(t, servers.ConsulOptions{Dev: true})
	cl := agentClient(t, agent)
	for _, r := range []*api.AgentServiceRegistration{
		{ID: "a-1", Name: "a", Port: 1, Address: "192.0.2.1", Tags: []string{"mesh"}, Check: &api.AgentServiceCheck{TTL: "10m", Status: api.HealthPassing}},
		{ID: "a-2", Name: "a", Port: 1, Address: "192.0.2.2", Tags: []string{"mesh"}, Check: &api.AgentServiceCheck{TTL: "10m"}},
		{ID: "a-3", Name: "a", Port: 1, Address: "192.0.2.3", Check: &api.AgentServiceCheck{TTL: "10m", Status: api.HealthPassing}},
		{ID: "b-1", Name: "b", Port: 1, Address: "192.0.2.4"},
	} {
		if err := cl.Agent().ServiceRegister(r); err != nil {
			t.Fatal(err)
		}
	}
	reg := newRegistry(t, agent, "filters", func(c *Config) { c.PassingOnly, c.Tags = true, []string{"mesh"} })
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	st := sink.WaitFor(t, wait, registrytest.State.Synced)
	var hosts []string
	for _, s := range st.Services {
		hosts = append(hosts, s.Hostname)
	}
	a, _ := find(st.Services, "a.consul")
	if !slices.Equal(hosts, []string{"a.consul"}) || len(a.Endpoints) != 1 || a.Endpoints[0].Address != "192.0.2.1" {
		t.Errorf("published %v with a = %+v; want only a.consul with the passing, tagged a-1", hosts, a.Endpoints)
	}
}

func TestOutageKeepsStateAndResyncs(t *testing.T) {
	t.Parallel()
	agent := servers.StartConsul(t, servers.ConsulOptions{})
	cl := agentClient(t, agent)
	if err := cl.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "web-1", Name: "web", Port: 80, Address: "192.0.2.20"}); err != nil {
		t.Fatal(err)
	}
	reg := newRegistry(t, agent, "outage", func(c *Config) {
		c.Backoff = BackoffConfig{Initial: registries.Duration(50 * time.Millisecond), Max: registries.Duration(500 * time.Millisecond)}
	})
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	before := sink.WaitFor(t, wait, func(st registrytest.State) bool {
		_, ok := find(st.Services, "web.consul")
		return ok
	})

	agent.Stop(t)
	st := sink.WaitFor(t, wait, func(st registrytest.State) bool { return st.Failing() })
	// While it shuts down the agent may fail a blocking query (its
	// streaming connection closes first: "grpc: the client connection is
	// closing") and still answer the retry and every other query a few ms
	// later; the registry then rightly says Synced again by publishing the
	// same state once more. What must hold: nothing but the last state is
	// ever published (no empty or partial list).
	for i, got := range sink.Replaced(st.Shard)[before.Replaces:] {
		if d := registrytest.DiffServices(before.Services, got); d != "" {
			t.Errorf("Replace #%d after the agent stopped changed the state; want the last state kept (-before +published):\n%s", before.Replaces+i+1, d)
		}
	}
	if st.Status.Err == "" {
		t.Error("Degraded without a reason")
	}

	agent.Start(t)
	sink.WaitFor(t, wait, func(st registrytest.State) bool {
		_, ok := find(st.Services, "web.consul")
		return st.Healthy() && ok
	})
	if err := cl.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "api-1", Name: "api", Port: 81, Address: "192.0.2.21"}); err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, wait, func(st registrytest.State) bool {
		_, ok := find(st.Services, "api.consul")
		return ok
	})
}

func TestThousandServicesIngestAndOneChange(t *testing.T) {
	if testing.Short() {
		t.Skip("registers 10,000 instances")
	}
	t.Parallel()
	const services, instances = 1000, 10
	agent := servers.StartConsul(t, servers.ConsulOptions{Dev: true, MaxConnsPerClient: 4096})
	cl := agentClient(t, agent)
	start := time.Now()
	agent.RegisterBulk(t, services, instances, 32)
	t.Logf("registered %d instances in %v", services*instances, time.Since(start).Round(time.Millisecond))

	reg := newRegistry(t, agent, "thousand", func(c *Config) {
		c.MaxConcurrentWatches, c.Streaming = services+100, StreamingOff // a blocking query per service is under test
	})
	sink := registrytest.NewSink()
	start = time.Now()
	registrytest.Start(t, reg, sink)
	st := sink.WaitFor(t, 2*time.Minute, registrytest.State.Synced)
	t.Logf("first sync of %d services in %v", len(st.Services), time.Since(start).Round(time.Millisecond))
	if len(st.Services) != services+1 { // + consul itself
		t.Fatalf("published %d services, want %d", len(st.Services), services+1)
	}
	for _, s := range st.Services {
		if s.Hostname == "consul.consul" {
			continue
		}
		if len(s.Endpoints) != instances {
			t.Fatalf("%s has %d endpoints, want %d", s.Hostname, len(s.Endpoints), instances)
		}
	}

	// One check turns critical: only that service's query fires, the
	// catalog list is not fetched again.
	catalogBefore := testutil.ToFloat64(reg.m.catalogChanged)
	healthBefore := testutil.ToFloat64(reg.m.healthChanged)
	replacesBefore := st.Replaces
	_, err := cl.Catalog().Register(&api.CatalogRegistration{
		Node: "node-3", Address: "198.51.100.4", SkipNodeUpdate: true,
		Check: &api.AgentCheck{CheckID: "check-500-3", Name: "up", Status: api.HealthCritical, ServiceID: "svc-500-3"},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st = sink.WaitFor(t, wait, func(st registrytest.State) bool {
		h, ok := endpointHealth(st, "svc-500.consul", "node-3/svc-500-3")
		return ok && h == model.Unhealthy
	})
	if got := st.Replaces - replacesBefore; got != 1 {
		t.Errorf("%d Replace calls for one change, want 1", got)
	}
	if got := testutil.ToFloat64(reg.m.healthChanged) - healthBefore; got != 1 {
		t.Errorf("%v service queries returned a change, want 1 (svc-500)", got)
	}
	if got := testutil.ToFloat64(reg.m.catalogChanged) - catalogBefore; got != 0 {
		t.Errorf("catalog list fetched %v times for a check change, want 0", got)
	}
}

func TestMoreServicesThanWatches(t *testing.T) {
	t.Parallel()
	agent := servers.StartConsul(t, servers.ConsulOptions{Dev: true})
	cl := agentClient(t, agent)
	agent.RegisterBulk(t, 12, 2, 4)
	reg := newRegistry(t, agent, "roundrobin", func(c *Config) {
		c.MaxConcurrentWatches, c.WaitTime = 3, registries.Duration(2*time.Second)
		c.Streaming = StreamingOff // turns are under test
	})
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	st := sink.WaitFor(t, wait, registrytest.State.Synced)
	if len(st.Services) != 13 {
		t.Fatalf("published %d services, want 13", len(st.Services))
	}
	// Changes to services spread over the rotation are all seen.
	start := time.Now()
	for _, s := range []int{2, 7, 11} {
		_, err := cl.Catalog().Register(&api.CatalogRegistration{
			Node: "node-1", Address: "198.51.100.2", SkipNodeUpdate: true,
			Check: &api.AgentCheck{CheckID: fmt.Sprintf("check-%d-1", s), Name: "up", Status: api.HealthWarning, ServiceID: fmt.Sprintf("svc-%d-1", s)},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	sink.WaitFor(t, wait, func(st registrytest.State) bool {
		for _, s := range []int{2, 7, 11} {
			h, ok := endpointHealth(st, fmt.Sprintf("svc-%d.consul", s), fmt.Sprintf("node-1/svc-%d-1", s))
			if !ok || h != model.Degraded {
				return false
			}
		}
		return true
	})
	// 13 services on 3 watches turn every ~5 × 1s.
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("changes seen after %v, want within one rotation (~5s)", d)
	}
	t.Logf("changes seen after %v with 13 services on 3 watches", time.Since(start).Round(time.Millisecond))
	if got := testutil.ToFloat64(inFlight.WithLabelValues("roundrobin")); got > 6 {
		t.Errorf("%v blocking queries in flight, want at most 3 + the catalog + the two on non-passing checks", got)
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	agent := servers.StartConsul(t, servers.ConsulOptions{Dev: true})
	cl := agentClient(t, agent)
	if err := cl.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "c-1", Name: "conf", Port: 7000, Address: "192.0.2.30"}); err != nil {
		t.Fatal(err)
	}
	n := 0
	registrytest.Conformance(t, func(t *testing.T) registries.Registry {
		n++
		return newRegistry(t, agent, fmt.Sprintf("conformance-%d", n), nil)
	}, registrytest.Mutation{
		Name: "register",
		Apply: func(t *testing.T) {
			if err := cl.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "c-2", Name: "conf2", Port: 7001, Address: "192.0.2.31"}); err != nil {
				t.Fatal(err)
			}
		},
		Want: func(s []model.Service) bool { _, ok := find(s, "conf2.consul"); return ok },
	}, registrytest.Mutation{
		Name: "deregister",
		Apply: func(t *testing.T) {
			if err := cl.Agent().ServiceDeregister("c-2"); err != nil {
				t.Fatal(err)
			}
		},
		Want: func(s []model.Service) bool { _, ok := find(s, "conf2.consul"); return !ok },
	})
}

func TestBadTokenFileFails(t *testing.T) {
	t.Parallel()
	reg := newRegistry(t, &servers.Consul{HTTPAddr: "127.0.0.1:1"}, "badtoken", func(c *Config) {
		c.TokenFile = t.TempDir() + "/missing"
	})
	err := reg.Run(context.Background(), registrytest.NewSink())
	if !registries.IsPermanent(err) {
		t.Errorf("Run = %v, want a permanent error", err)
	}
}

func TestTokenNeverInErrors(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-token-4711"
	// An HTTP server that refuses every token, like an agent with ACLs.
	var sawToken atomic.Bool
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawToken.Store(r.Header.Get("X-Consul-Token") == secret)
		http.Error(w, "ACL not found", http.StatusForbidden)
	})}
	ln := listen(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	tokenFile := t.TempDir() + "/token"
	if err := os.WriteFile(tokenFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := newRegistry(t, &servers.Consul{HTTPAddr: ln.Addr().String()}, "token", func(c *Config) { c.TokenFile = tokenFile })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err := reg.Run(ctx, registrytest.NewSink())
	if !registries.IsPermanent(err) {
		t.Errorf("Run = %v, want a permanent error for a refused token", err)
	}
	if !sawToken.Load() {
		t.Error("the agent did not receive the token")
	}
	if err != nil && contains(err.Error(), secret) {
		t.Errorf("error %q holds the token", err)
	}
	if s := fmt.Sprintf("%+v %#v", reg.cfg, reg.cfg); contains(s, secret) {
		t.Errorf("config dump %q holds the token", s)
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	return servers.LowListener(t)
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestRotatedTokenRecoversFromFailed runs a real Consul with ACLs (default
// deny): a registry whose tokenFile holds an unknown token gets 403 before
// its first sync and is Failed; once the operator writes a valid token to
// the file, the slow Failed retry re-reads it and the registry syncs,
// without a restart.
func TestRotatedTokenRecoversFromFailed(t *testing.T) {
	t.Parallel()
	const mgmt = "5b0e8d0b-8a4a-4f0e-9d51-2c9e1c5a7d31"
	agent := servers.StartConsul(t, servers.ConsulOptions{Dev: true, ACLToken: mgmt})
	cl := agentClient(t, agent)
	if err := cl.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "acl-1", Name: "acl", Port: 8080, Address: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("00000000-0000-4000-8000-000000000000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := newRegistry(t, agent, "acl-rotate", func(c *Config) { c.TokenFile = tokenFile })
	c := registries.Common{Name: "acl-rotate", Kind: "consul", Domain: "consul"}
	sink := registrytest.NewSink()
	r := registries.NewRunner(c, reg, sink, nil).WithFailedRetry(200 * time.Millisecond)
	sup := registries.NewSupervisor(r.String(), nil)
	sup.Add(r)
	ctx, cancel := context.WithCancel(context.Background())
	done := sup.ServeBackground(ctx)
	defer func() { cancel(); <-done }()

	st := sink.WaitFor(t, wait, func(s registrytest.State) bool { return s.Failed() })
	if !contains(st.Status.Err, "403") {
		t.Errorf("Failed with %q, want the agent's 403", st.Status.Err)
	}
	if err := os.WriteFile(tokenFile, []byte(mgmt+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, wait, func(s registrytest.State) bool {
		_, ok := find(s.Services, "acl.consul")
		return s.Synced() && ok
	})
}

// TestMoreServicesThanWatchesOverHTTP2 watches a catalog larger than the
// watch budget (300 services, maxConcurrentWatches 8) over HTTPS: the
// agent speaks HTTP/2 there, so every service gets a blocking query of
// its own on the 8 connections, and a change is served at once, not after
// a turn of up to waitTime (5m). One change wakes one service's query and
// converts that service alone; no other service's query returns (but the
// agent's own, which changes by itself).
func TestMoreServicesThanWatchesOverHTTP2(t *testing.T) {
	t.Parallel()
	const services = 300
	agent := servers.StartConsul(t, servers.ConsulOptions{Dev: true, TLS: true})
	cl := agentClient(t, agent)
	agent.RegisterSpread(t, services, 1, 100, 4)
	reg := newRegistry(t, agent, "http2", func(c *Config) {
		c.Address, c.TLS.CAFile = agent.HTTPSAddr, agent.CAFile
		c.MaxConcurrentWatches, c.WaitTime = 8, registries.Duration(5*time.Minute)
	})
	var mu sync.Mutex
	var converted []string
	reg.converted = func(s string) { mu.Lock(); converted = append(converted, s); mu.Unlock() }
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	st := sink.WaitFor(t, wait, registrytest.State.Synced)
	if len(st.Services) != services+1 { // + consul itself
		t.Fatalf("published %d services, want %d", len(st.Services), services+1)
	}
	// Every service's query is in flight (+ the catalog's), far above the
	// 8 connections.
	if got := awaitInFlight("http2", services+2); got != services+2 {
		t.Fatalf("%v blocking queries in flight, want one per service and the catalog's (%d)", got, services+2)
	}

	for _, step := range []struct {
		name, service string
		change        func() error
		seen          func(registrytest.State) bool
	}{{
		name: "a check turns critical", service: "svc-7",
		change: func() error {
			_, err := cl.Catalog().Register(&api.CatalogRegistration{
				Node: "node-0", Address: "10.0.0.0", SkipNodeUpdate: true,
				Check: &api.AgentCheck{CheckID: "check-7-0", Name: "up", Status: api.HealthCritical, ServiceID: "svc-7-0"},
			}, nil)
			return err
		},
		seen: func(st registrytest.State) bool {
			h, ok := endpointHealth(st, "svc-7.consul", "node-0/svc-7-0")
			return ok && h == model.Unhealthy
		},
	}, {
		name: "a new instance", service: "svc-250",
		change: func() error {
			return cl.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "extra", Name: "svc-250", Port: 1250, Address: "192.0.2.99"})
		},
		seen: func(st registrytest.State) bool {
			_, ok := endpointHealth(st, "svc-250.consul", agent.Node+"/extra")
			return ok
		},
	}} {
		mu.Lock()
		converted = nil
		mu.Unlock()
		same := testutil.ToFloat64(reg.m.healthSame)
		if err := step.change(); err != nil {
			t.Fatal(err)
		}
		// wait (30s) is a tenth of waitTime: only the service's own
		// blocking query can see the change this soon.
		sink.WaitFor(t, wait, step.seen)
		mu.Lock()
		// The agent's own service "consul" moves its index now and then
		// by itself.
		got := slices.DeleteFunc(slices.Clone(converted), func(s string) bool { return s == "consul" })
		mu.Unlock()
		if !slices.Equal(got, []string{step.service}) {
			t.Errorf("%s: converted %v, want only %s", step.name, got, step.service)
		}
		if got := testutil.ToFloat64(reg.m.healthSame) - same; got != 0 {
			t.Errorf("%s: %v unchanged services were fetched again, want 0", step.name, got)
		}
	}
	if p := sink.Problems(); len(p) > 0 {
		t.Errorf("sink problems: %v", p)
	}
}

// TestHealthHintsAheadOfTurns watches a catalog larger than the watch
// budget (300 services, maxConcurrentWatches 8) over plain HTTP, where
// the services take turns of 8s (a round is waitTime, 5m): a check that
// turns critical and back, and a node check that fails every service of
// its node (100 services), are served within 30s, a tenth of a round,
// because the checks that are not passing are watched apart and the
// services whose checks moved are asked ahead of their turn.
func TestHealthHintsAheadOfTurns(t *testing.T) {
	t.Parallel()
	const services = 300
	agent := servers.StartConsul(t, servers.ConsulOptions{Dev: true})
	cl := agentClient(t, agent)
	agent.RegisterSpread(t, services, 1, 100, 4)
	reg := newRegistry(t, agent, "hints", func(c *Config) {
		c.MaxConcurrentWatches, c.WaitTime = 8, registries.Duration(5*time.Minute)
		c.Streaming = StreamingOff // turns are under test
	})
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	st := sink.WaitFor(t, wait, registrytest.State.Synced)
	if len(st.Services) != services+1 { // + consul itself
		t.Fatalf("published %d services, want %d", len(st.Services), services+1)
	}
	setCheck := func(node, checkID, serviceID, status string) {
		t.Helper()
		_, err := cl.Catalog().Register(&api.CatalogRegistration{
			Node: node, Address: "10.0.0.0", SkipNodeUpdate: true,
			Check: &api.AgentCheck{Node: node, CheckID: checkID, Name: "up", Status: status, ServiceID: serviceID},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	// The health of svc-S's instance, on node-(S/100).
	healthOf := func(st registrytest.State, s int) model.Health {
		h, _ := endpointHealth(st, fmt.Sprintf("svc-%d.consul", s), fmt.Sprintf("node-%d/svc-%d-0", s/100, s))
		return h
	}
	hinted := func() float64 { return testutil.ToFloat64(reg.m.hinted) }
	// 30s is a tenth of a round of turns: only a hint serves every step in time.
	step := func(name string, change func(), seen func(registrytest.State) bool) {
		t.Helper()
		before, start := hinted(), time.Now()
		change()
		sink.WaitFor(t, wait, seen)
		t.Logf("%s: served after %v, %v services hinted", name, time.Since(start).Round(time.Millisecond), hinted()-before)
		if hinted() == before {
			t.Errorf("%s: served without a hint (at its turn)", name)
		}
	}
	step("a check turns critical", func() { setCheck("node-0", "check-7-0", "svc-7-0", api.HealthCritical) },
		func(st registrytest.State) bool { return healthOf(st, 7) == model.Unhealthy })
	step("and passing again", func() { setCheck("node-0", "check-7-0", "svc-7-0", api.HealthPassing) },
		func(st registrytest.State) bool { return healthOf(st, 7) == model.Healthy })
	step("node-2's node check fails", func() { setCheck("node-2", "node-down", "", api.HealthCritical) },
		func(st registrytest.State) bool {
			for s := 200; s < 300; s++ {
				if healthOf(st, s) != model.Unhealthy {
					return false
				}
			}
			return healthOf(st, 199) == model.Healthy
		})
	step("and recovers", func() { setCheck("node-2", "node-down", "", api.HealthPassing) },
		func(st registrytest.State) bool {
			for s := 200; s < 300; s++ {
				if healthOf(st, s) != model.Healthy {
					return false
				}
			}
			return true
		})
	if p := sink.Problems(); len(p) > 0 {
		t.Errorf("sink problems: %v", p)
	}
}

// firstStateSink is a registrytest.Sink that notes the agent requests the
// registry had sent when it published its first state.
type firstStateSink struct {
	*registrytest.Sink
	requests func() float64
	mu       sync.Mutex
	at       float64 // -1 until the first state
}

func (s *firstStateSink) Publish(shard model.ShardKey, u registries.Update) {
	s.mu.Lock()
	if s.at < 0 && u.HasState {
		s.at = s.requests()
	}
	s.mu.Unlock()
	s.Sink.Publish(shard, u)
}

// TestBlockingQueriesAfterFirstState: over HTTPS, where every service has
// a blocking query of its own, none is sent before the first full state
// (a blocking query makes the agent build the service's answer once more
// while it still builds the others' first answers): when the registry
// publishes its first state it has sent the catalog's queries and one
// query per service, nothing else; the blocking queries follow.
func TestBlockingQueriesAfterFirstState(t *testing.T) {
	t.Parallel()
	const services = 300
	agent := servers.StartConsul(t, servers.ConsulOptions{Dev: true, TLS: true})
	agent.RegisterSpread(t, services, 1, 100, 4)
	reg := newRegistry(t, agent, "firststate", func(c *Config) {
		c.Address, c.TLS.CAFile = agent.HTTPSAddr, agent.CAFile
		c.MaxConcurrentWatches = 8
	})
	sink := &firstStateSink{Sink: registrytest.NewSink(), requests: func() float64 { return testutil.ToFloat64(reg.m.requests) }, at: -1}
	registrytest.Start(t, reg, sink)
	st := sink.WaitFor(t, wait, registrytest.State.Synced)
	if len(st.Services) != services+1 {
		t.Fatalf("published %d services, want %d", len(st.Services), services+1)
	}
	sink.mu.Lock()
	at := sink.at
	sink.mu.Unlock()
	// services+1 first queries (with consul itself), at most two of the
	// catalog (its first and its blocking one, which a loaded machine
	// sends before the first state) and /v1/agent/self (the budget).
	if want := float64(services + 1 + 3); at > want {
		t.Errorf("%v requests sent before the first state, want at most %v (no blocking service query)", at, want)
	}
	// Then every service's blocking query is in flight.
	if got := awaitInFlight("firststate", services+2); got != services+2 {
		t.Errorf("%v blocking queries in flight after the first state, want one per service and the catalog's (%d)", got, services+2)
	}
}

// awaitInFlight waits (up to wait) until registry has n blocking queries
// in flight, and returns how many it has.
func awaitInFlight(registry string, n int) float64 {
	return awaitGauge(wait, func() float64 { return testutil.ToFloat64(inFlight.WithLabelValues(registry)) },
		func(v float64) bool { return v >= float64(n) })
}

// awaitGauge polls get (up to within) until done says its value is what
// was awaited, and returns the last value.
func awaitGauge(within time.Duration, get func() float64, done func(float64) bool) float64 {
	for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		if v := get(); done(v) || time.Now().After(deadline) {
			return v
		}
	}
}
