package consul

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
	"github.com/meshfed/meshfed/test/servers"
)

func TestWatchBudget(t *testing.T) {
	t.Parallel()
	limit := func(n int) agentLimit { return agentLimit{known: true, limit: n} }
	unknown := agentLimit{err: errors.New("403")}
	for _, c := range []struct {
		name       string
		configured int
		agent      agentLimit
		nofile     uint64
		want       int
		lowered    bool
	}{
		{"agent default", 0, limit(200), 1 << 20, 128, false},
		{"agent raised", 0, limit(20000), 1 << 20, 12800, false},
		{"agent lowered", 0, limit(40), 1 << 20, 25, false},
		{"tiny limit leaves room for the other watches", 0, limit(5), 1 << 20, 2, false},
		{"limit below the other watches", 0, limit(2), 1 << 20, 1, false},
		{"no limit", 0, limit(0), 1 << 20, maxAutoWatches, false},
		{"no limit, 20000 files", 0, limit(0), 20000, 15000, false},
		{"raised, 20000 files", 0, limit(20000), 20000, 12800, false},
		{"raised, 10000 files", 0, limit(20000), 10000, 5904, false},
		{"raised, 1024 files", 0, limit(20000), 1024, 128, false},
		{"default, 1024 files", 0, limit(200), 1024, 128, false},
		{"lowered, 1024 files", 0, limit(40), 1024, 25, false},
		{"unknown limit", 0, unknown, 1 << 20, DefaultMaxConcurrentWatches, false},
		{"configured within the limit", 64, limit(200), 1 << 20, 64, false},
		{"configured past the limit", 300, limit(200), 1 << 20, 128, true},
		{"configured up to the limit", 197, limit(200), 1 << 20, 197, false},
		{"configured just past the limit", 198, limit(200), 1 << 20, 128, true},
		{"configured, limit unknown", 300, unknown, 1 << 20, 300, false},
		{"configured, no limit, files not applied", 30000, limit(0), 1024, 30000, false},
	} {
		got, lowered := watchBudget(c.configured, c.agent, c.nofile)
		if got != c.want || lowered != c.lowered {
			t.Errorf("%s: watchBudget(%d, %+v, %d) = %d, %v; want %d, %v", c.name, c.configured, c.agent, c.nofile, got, lowered, c.want, c.lowered)
		}
	}
}

// TestAgentLimitSizesWatches runs a catalog against an agent whose
// limits.http_max_conns_per_client is 40, where the agent answers 429
// past 40 connections from one address. Over plain HTTP, 41 services: a
// query per service and the catalog's would be 42 connections. Unset,
// maxConcurrentWatches is sized from the agent (25: services take turns,
// with the two health-state watches); set past the limit (64), it is
// lowered the same way. Over HTTPS, 300 services: 301 streams started at
// once would each dial a connection when the others are full, unless the
// transport is bounded to the budget. No query is refused in two rounds.
func TestAgentLimitSizesWatches(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		configured int
		tls        bool
		services   int
	}{{"unset", 0, false, 40}, {"past-the-limit", 64, false, 40}, {"https", 0, true, 300}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			agent := servers.StartConsul(t, servers.ConsulOptions{Dev: true, MaxConnsPerClient: 40, TLS: c.tls})
			agent.RegisterBulk(t, c.services, 1, 2)
			name := "limit-" + c.name
			reg := newRegistry(t, agent, name, func(cfg *Config) {
				cfg.MaxConcurrentWatches, cfg.WaitTime = c.configured, registries.Duration(4*time.Second)
				cfg.Streaming = StreamingOff // the blocking queries' budget is under test
				if c.tls {
					cfg.Address, cfg.TLS.CAFile = agent.HTTPSAddr, agent.CAFile
				}
			})
			sink := registrytest.NewSink()
			registrytest.Start(t, reg, sink)
			st := sink.WaitFor(t, wait, registrytest.State.Synced)
			if len(st.Services) != c.services+1 {
				t.Fatalf("published %d services, want %d", len(st.Services), c.services+1)
			}
			if got := testutil.ToFloat64(reg.m.budget); got != 25 {
				t.Errorf("maxConcurrentWatches = %v, want 25 (64 %% of the agent's 40)", got)
			}
			// Two rounds: over plain HTTP 41 services on 25 workers, turns
			// of 2.4s; over HTTPS every service's query returns each 4s.
			answered := func() float64 { return testutil.ToFloat64(reg.m.healthSame) + testutil.ToFloat64(reg.m.healthChanged) }
			want := float64(3 * (c.services + 1))
			deadline := time.Now().Add(wait)
			for answered() < want && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
			if got := answered(); got < want {
				t.Errorf("%v service answers in %v, want %v: two rounds", got, wait, want)
			}
			if got := testutil.ToFloat64(inFlight.WithLabelValues(name)); !c.tls && got > 25+extraConns {
				t.Errorf("%v queries in flight, want at most 25 + %d", got, extraConns)
			}
			for _, m := range []prometheus.Counter{reg.m.healthErrors, reg.m.catalogErrors, reg.m.checksErrors} {
				if got := testutil.ToFloat64(m); got != 0 {
					t.Errorf("%v queries failed, want none: %v", got, sink.WaitFor(t, wait, registrytest.State.Synced).Status.Err)
				}
			}
			if st := sink.WaitFor(t, wait, registrytest.State.Synced); st.Status.Failing() {
				t.Errorf("status %+v, want healthy", st.Status)
			}
		})
	}
}

// TestRaisedAgentLimitGivesEveryServiceAQuery: an operator raised the
// agent's limits.http_max_conns_per_client to 1000 for a catalog of 300
// services. With streaming off and nothing else set, the registry holds a
// blocking query per service over plain HTTP (64 % of the limit: 640), so
// a change no health hint carries (an instance's new address) is served
// at once, not at its service's turn (up to waitTime, 5m). At the default
// (streaming auto) the 300 services follow the servers' event stream all
// the same (more than streamAbove: it costs a quarter of the memory) and
// hold no blocking query; the change is served at once too.
func TestRaisedAgentLimitGivesEveryServiceAQuery(t *testing.T) {
	t.Parallel()
	const services = 300
	agent := servers.StartConsul(t, servers.ConsulOptions{Dev: true, MaxConnsPerClient: 1000})
	cl := agentClient(t, agent)
	agent.RegisterBulk(t, services, 1, 8)
	for round, streaming := range []string{StreamingOff, StreamingAuto} {
		name := "raised-" + streaming
		reg := newRegistry(t, agent, name, func(c *Config) {
			c.WaitTime, c.Streaming = registries.Duration(5*time.Minute), streaming
		})
		sink := registrytest.NewSink()
		registrytest.Start(t, reg, sink)
		st := sink.WaitFor(t, wait, registrytest.State.Synced)
		if len(st.Services) != services+1 {
			t.Fatalf("%s: published %d services, want %d", streaming, len(st.Services), services+1)
		}
		if got := testutil.ToFloat64(reg.m.budget); got != 640 {
			t.Errorf("%s: maxConcurrentWatches = %v, want 640 (64 %% of the agent's 1000)", streaming, got)
		}
		wantStreams, wantQueries := 0.0, float64(services+1+1) // each service's and the catalog's
		if streaming == StreamingAuto {
			wantStreams, wantQueries = services+1, 1
		}
		streams := func() float64 { return testutil.ToFloat64(reg.m.subscriptions) }
		if got := awaitGauge(wait, streams, func(v float64) bool { return v == wantStreams }); got != wantStreams {
			t.Errorf("%s: %v event stream subscriptions, want %v", streaming, got, wantStreams)
		}
		queries := func() float64 { return testutil.ToFloat64(inFlight.WithLabelValues(name)) }
		if got := awaitGauge(wait, queries, func(v float64) bool { return v == wantQueries }); got != wantQueries {
			t.Errorf("%s: %v blocking queries in flight, want %v", streaming, got, wantQueries)
		}
		addr := fmt.Sprintf("192.0.2.%d", 9+round)
		for _, s := range []int{7, 150, 299} {
			_, err := cl.Catalog().Register(&api.CatalogRegistration{
				Node: "node-0", Address: "198.51.100.1", SkipNodeUpdate: true,
				Service: &api.AgentService{ID: fmt.Sprintf("svc-%d-0", s), Service: fmt.Sprintf("svc-%d", s), Address: addr, Port: 1000 + s},
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		sink.WaitFor(t, wait, func(st registrytest.State) bool {
			for _, s := range []int{7, 150, 299} {
				svc, ok := find(st.Services, fmt.Sprintf("svc-%d.consul", s))
				if !ok || len(svc.Endpoints) != 1 || svc.Endpoints[0].Address != addr {
					return false
				}
			}
			return true
		})
		t.Logf("%s: new addresses served after %v", streaming, time.Since(start).Round(time.Millisecond))
		if got := testutil.ToFloat64(reg.m.hinted); got != 0 {
			t.Errorf("%s: %v services asked ahead of a turn, want none (no turns)", streaming, got)
		}
	}
}

// TestAgentLimitNeedsAgentRead: reading the agent's limit takes
// agent:read. A token without it still watches the catalog, with the
// budget of an agent at Consul's default limit (128); one with it gets
// its share of the agent's limit (100 here: 64).
func TestAgentLimitNeedsAgentRead(t *testing.T) {
	t.Parallel()
	const mgmt = "8c3e4c1e-51b7-4b8e-9f7e-3f0c1d2b6a41"
	agent := servers.StartConsul(t, servers.ConsulOptions{Dev: true, ACLToken: mgmt, MaxConnsPerClient: 100})
	cl := agentClient(t, agent)
	if err := cl.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "acl-1", Name: "acl", Port: 8080, Address: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, rules string
		want        float64
	}{
		{"catalog-only", `service_prefix "" { policy = "read" } node_prefix "" { policy = "read" }`, DefaultMaxConcurrentWatches},
		{"agent-read", `service_prefix "" { policy = "read" } node_prefix "" { policy = "read" } agent_prefix "" { policy = "read" }`, 64},
	} {
		tokenFile := aclTokenFile(t, cl, c.name, c.rules)
		reg := newRegistry(t, agent, "acl-"+c.name, func(cfg *Config) { cfg.TokenFile = tokenFile })
		sink := registrytest.NewSink()
		registrytest.Start(t, reg, sink)
		st := sink.WaitFor(t, wait, registrytest.State.Synced)
		if _, ok := find(st.Services, "acl.consul"); !ok {
			t.Errorf("%s: acl.consul not published: %v", c.name, st)
		}
		if got := testutil.ToFloat64(reg.m.budget); got != c.want {
			t.Errorf("%s: maxConcurrentWatches = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestEnvironmentOverridden: the api package takes CONSUL_HTTP_TOKEN,
// CONSUL_NAMESPACE and CONSUL_PARTITION from the environment; the
// registry sends its configured token, or none, and no namespace or
// partition (which a Consul CE agent refuses: 400).
func TestEnvironmentOverridden(t *testing.T) {
	t.Setenv("CONSUL_HTTP_TOKEN", "from-the-environment")
	t.Setenv("CONSUL_NAMESPACE", "team-a")
	t.Setenv("CONSUL_PARTITION", "part-a")
	type seen struct{ token, query string }
	got := make(chan seen, 16)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- seen{r.Header.Get("X-Consul-Token"), r.URL.RawQuery}:
		default:
		}
		http.Error(w, "no", http.StatusInternalServerError)
	})}
	ln := listen(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	for _, token := range []string{"", "configured"} {
		var file string
		if token != "" {
			file = filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		reg := newRegistry(t, &servers.Consul{HTTPAddr: ln.Addr().String()}, "env", func(c *Config) { c.TokenFile = file })
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = reg.Run(ctx, registrytest.NewSink()) }()
		s := <-got
		cancel()
		<-done
		if s.token != token {
			t.Errorf("configured token %q: the agent got token %q", token, s.token)
		}
		if q, _ := url.ParseQuery(s.query); q.Has("ns") || q.Has("partition") {
			t.Errorf("the agent got query %q, want no ns or partition", s.query)
		}
	}
}

// TestBoundedHTTP2SurvivesAgentRestart: over HTTPS the service queries'
// transport is bounded to the budget (2 connections here, for 300
// services: 301 streams need both). When the agent restarts, every
// HTTP/2 connection dies with streams in flight; the bound must count
// them out, or no query could dial again. After the restart a change is
// served.
func TestBoundedHTTP2SurvivesAgentRestart(t *testing.T) {
	t.Parallel()
	agent := servers.StartConsul(t, servers.ConsulOptions{TLS: true})
	cl := agentClient(t, agent)
	agent.RegisterBulk(t, 300, 1, 4)
	reg := newRegistry(t, agent, "h2restart", func(c *Config) {
		c.Address, c.TLS.CAFile = agent.HTTPSAddr, agent.CAFile
		c.MaxConcurrentWatches = 2
		c.Backoff = BackoffConfig{Initial: registries.Duration(20 * time.Millisecond), Max: registries.Duration(500 * time.Millisecond)}
	})
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	sink.WaitFor(t, wait, registrytest.State.Synced)
	agent.Stop(t)
	sink.WaitFor(t, wait, registrytest.State.Failing)
	agent.Start(t)
	for round, addr := range []string{"192.0.2.21", "192.0.2.22"} {
		if _, err := cl.Catalog().Register(&api.CatalogRegistration{
			Node: "node-0", Address: "198.51.100.1", SkipNodeUpdate: true,
			Service: &api.AgentService{ID: "svc-123-0", Service: "svc-123", Address: addr, Port: 1123},
		}, nil); err != nil {
			t.Fatal(err)
		}
		st := sink.WaitFor(t, wait, func(st registrytest.State) bool {
			svc, ok := find(st.Services, "svc-123.consul")
			return ok && len(svc.Endpoints) == 1 && svc.Endpoints[0].Address == addr && !st.Status.Failing()
		})
		if round == 1 && len(st.Services) != 301 {
			t.Errorf("published %d services after the restart, want 301", len(st.Services))
		}
	}
}

// aclTokenFile creates an ACL policy name with rules (cl holds the
// management token), a token with it, and a token file holding that
// token.
func aclTokenFile(t *testing.T, cl *api.Client, name, rules string) string {
	t.Helper()
	pol, _, err := cl.ACL().PolicyCreate(&api.ACLPolicy{Name: name, Rules: rules}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := cl.ACL().TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{ID: pol.ID}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(tok.SecretID+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return tokenFile
}
