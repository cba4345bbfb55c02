package consul

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
	"github.com/meshfed/meshfed/test/servers"
)

// endpoints counts the published endpoints of the registered services
// (svc-*, not the agent's own consul service).
func endpoints(svcs []model.Service) int {
	n := 0
	for _, s := range svcs {
		if strings.HasPrefix(s.Hostname, "svc-") {
			n += len(s.Endpoints)
		}
	}
	return n
}

// A Consul server restarted on its data dir answers default reads from its
// state store while it replays its raft log: for a while it serves an
// older catalog (instances registered before the restart missing), with
// X-Consul-KnownLeader true. Neither a registry that watched through the
// restart nor one started while the server replays (meshfed restarted at
// the same time) may ever publish such a state: every Replace holds every
// instance registered before the kill.
func TestRestartedServerNeverPublishesAnOlderCatalog(t *testing.T) {
	if testing.Short() {
		t.Skip("registers 3,000 instances one by one")
	}
	t.Parallel()
	agent := servers.StartConsul(t, servers.ConsulOptions{MaxConnsPerClient: 200})
	// One raft log entry per instance, so that replaying them takes a
	// while after the restart.
	const services, instances = 300, 10
	agent.RegisterBulk(t, services, instances, 32)
	full := func(st registrytest.State) bool {
		return st.Healthy() && endpoints(st.Services) == services*instances
	}
	// Both ways of serving more services than maxConcurrentWatches: the
	// servers' event stream (the default) and blocking queries in turns.
	modes := []string{StreamingAuto, StreamingOff}
	fast := func(mode string) func(c *Config) {
		return func(c *Config) {
			c.MaxConcurrentWatches, c.Streaming = 32, mode
			c.Backoff = BackoffConfig{Initial: registries.Duration(20 * time.Millisecond), Max: registries.Duration(200 * time.Millisecond)}
		}
	}
	running := map[string]*registrytest.Sink{}
	before := map[string]registrytest.State{}
	for _, mode := range modes {
		running[mode] = registrytest.NewSink()
		reg := newRegistry(t, agent, "running-"+mode, fast(mode))
		registrytest.Start(t, reg, running[mode])
		before[mode] = running[mode].WaitFor(t, 2*time.Minute, full)
		if streams := testutil.ToFloat64(reg.m.subscriptions); (streams > 0) != (mode == StreamingAuto) {
			t.Errorf("streaming %s: %v event streams open", mode, streams)
		}
	}

	agent.Process().Kill()
	if err := agent.Process().Start(); err != nil {
		t.Fatal(err)
	}
	// What a fresh client with default consistency is told meanwhile: the
	// answers that lack instances show that the test met the replay.
	var (
		mu            sync.Mutex
		polled, older int
		sample        string
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			resp, err := cl.Get(fmt.Sprintf("http://%s/v1/health/service/svc-%d", agent.HTTPAddr, services-1))
			if err != nil {
				continue
			}
			var got []json.RawMessage
			derr := json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || derr != nil {
				continue
			}
			mu.Lock()
			polled++
			if len(got) < instances {
				older++
				sample = fmt.Sprintf("%d of %d instances, X-Consul-Index %s, X-Consul-KnownLeader %s", len(got), instances,
					resp.Header.Get("X-Consul-Index"), resp.Header.Get("X-Consul-KnownLeader"))
			}
			mu.Unlock()
		}
	})
	fresh := map[string]*registrytest.Sink{}
	for _, mode := range modes {
		fresh[mode] = registrytest.NewSink()
		registrytest.Start(t, newRegistry(t, agent, "fresh-"+mode, fast(mode)), fresh[mode])
	}

	frs := map[string]registrytest.State{}
	for _, mode := range modes {
		running[mode].WaitFor(t, 3*time.Minute, func(st registrytest.State) bool { return full(st) && st.Replaces > before[mode].Replaces })
		frs[mode] = fresh[mode].WaitFor(t, 3*time.Minute, full)
	}
	close(stop)
	wg.Wait()
	t.Logf("default reads during the restart: %d answers, %d lacked instances (last: %s)", polled, older, sample)

	for _, mode := range modes {
		for name, st := range map[string]registrytest.State{"running": running[mode].State(before[mode].Shard), "fresh": frs[mode]} {
			notReady := 0
			for _, r := range st.Reports {
				if strings.Contains(r.Err, "consistent reads") {
					notReady++
				}
			}
			t.Logf("streaming %s, %s registry: %d Replaces, %d reports, %d of them \"not ready to serve consistent reads\"", mode, name, st.Replaces, len(st.Reports), notReady)
		}
		check := func(name string, states [][]model.Service) {
			for i, st := range states {
				if n := endpoints(st); n != services*instances {
					t.Errorf("streaming %s, %s: Replace #%d published %d endpoints; want all %d registered before the restart", mode, name, i+1, n, services*instances)
				}
			}
		}
		check("running registry", running[mode].Replaced(before[mode].Shard)[before[mode].Replaces:])
		check("registry started during the restart", fresh[mode].Replaced(frs[mode].Shard))
	}
}

// A snapshot restore takes the catalog back to an older state with a lower
// index. Consul does not wake blocking queries for it: they return at
// waitTime with the lower index, are asked again from index 0
// (consistently), and the registry publishes the restored catalog.
func TestSnapshotRestorePublishesTheRestoredCatalog(t *testing.T) {
	t.Parallel()
	agent := servers.StartConsul(t, servers.ConsulOptions{})
	cl := agentClient(t, agent)
	register := func(node, id, svc string) {
		t.Helper()
		_, err := cl.Catalog().Register(&api.CatalogRegistration{Node: node, Address: "192.0.2.30",
			Service: &api.AgentService{ID: id, Service: svc, Port: 80}}, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	register("n1", "web-1", "web")
	// One registry with a blocking query per service; one with a budget of
	// 1 for the two services (web and consul), which follows the event
	// stream (the server ends its subscriptions at a restore).
	var sinks []*registrytest.Sink
	for name, budget := range map[string]int{"restore-blocking": 0, "restore-stream": 1} {
		sink := registrytest.NewSink()
		registrytest.Start(t, newRegistry(t, agent, name, func(c *Config) {
			c.WaitTime, c.MaxConcurrentWatches = registries.Duration(2*time.Second), budget
		}), sink)
		sinks = append(sinks, sink)
	}
	waitAll := func(cond func(registrytest.State) bool) {
		t.Helper()
		for _, sink := range sinks {
			sink.WaitFor(t, wait, cond)
		}
	}
	waitAll(func(st registrytest.State) bool {
		s, ok := find(st.Services, "web.consul")
		return ok && len(s.Endpoints) == 1
	})
	if got := testutil.ToFloat64(subscriptions.WithLabelValues("restore-stream")); got != 2 {
		t.Errorf("%v event streams open, want 2", got)
	}
	snap, _, err := cl.Snapshot().Save(nil)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := io.ReadAll(snap)
	snap.Close()
	if err != nil {
		t.Fatal(err)
	}
	register("n2", "web-2", "web")
	register("n2", "api-1", "api")
	waitAll(func(st registrytest.State) bool {
		s, ok := find(st.Services, "web.consul")
		_, api := find(st.Services, "api.consul")
		return ok && len(s.Endpoints) == 2 && api
	})
	if err := cl.Snapshot().Restore(nil, bytes.NewReader(saved)); err != nil {
		t.Fatal(err)
	}
	waitAll(func(st registrytest.State) bool {
		s, ok := find(st.Services, "web.consul")
		_, api := find(st.Services, "api.consul")
		return st.Healthy() && ok && len(s.Endpoints) == 1 && !api
	})
}
