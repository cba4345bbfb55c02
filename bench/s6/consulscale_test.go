package s6

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/consul"
	"github.com/meshfed/meshfed/test/servers"
)

var (
	scaleOut      = flag.String("s6.scale.out", "", "run TestConsulScale at -s6.scale.services and write its results (JSON) here")
	scaleServices = flag.Int("s6.scale.services", 10000, "services in Consul (with -s6.scale.out)")
)

// scaleSink records the consul registry's Replace calls: when the first
// one held every service, and when each awaited address first appeared.
type scaleSink struct {
	want int

	mu     sync.Mutex
	synced time.Time
	addrs  map[string]string // awaited address → service
	seen   map[string]time.Time
	wake   chan struct{}
}

// Publish implements registries.Sink: it notes every state.
func (s *scaleSink) Publish(_ model.ShardKey, u registries.Update) {
	if !u.HasState {
		return
	}
	services := u.Services
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.synced.IsZero() && len(services) >= s.want {
		s.synced = now
	}
	for i := range services {
		for _, e := range services[i].Endpoints {
			if host, ok := s.addrs[e.Address]; ok && host == services[i].Hostname {
				if _, done := s.seen[e.Address]; !done {
					s.seen[e.Address] = now
				}
			}
		}
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// await waits until cond holds (checked after every Replace) or timeout.
func (s *scaleSink) await(timeout time.Duration, cond func() bool) bool {
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		ok := cond()
		s.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-s.wake:
		case <-deadline:
			return false
		}
	}
}

// TestConsulScale measures the consul registry against a real Consul agent
// holding many services (one instance each): the initial sync, and how
// long a new instance takes to reach Sink.Publish, in two watch-budget
// modes. With the default budget (maxConcurrentWatches 128, fewer than the
// services) the service queries take turns (registries/consul/consul.go),
// so a change waits for its service's turn; with a query per service it is
// seen at once. Without -s6.scale.out it runs at a tiny size (checks only
// that both modes sync and see every change).
func TestConsulScale(t *testing.T) {
	full := *scaleOut != ""
	services, budget, wait := 40, 8, 10*time.Second
	if full {
		services, budget, wait = *scaleServices, consul.DefaultMaxConcurrentWatches, time.Minute
	}
	agent := servers.StartConsul(t, servers.ConsulOptions{Dev: true, MaxConnsPerClient: services + 1000})
	t0 := time.Now()
	agent.RegisterBulk(t, services, 1, 32)
	register := time.Since(t0)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cl, err := api.NewClient(&api.Config{Address: agent.HTTPAddr, HttpClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	var results []bench.ConsulScaleResult
	for mi, m := range []struct {
		name       string
		budget     int
		wait       time.Duration
		changes    int
		concurrent bool
		timeout    time.Duration
	}{
		// A turn blocks wait×budget/services (≥ 1 s), so one round over
		// every service takes about max(wait, services/budget × 1 s).
		{name: "round-robin (budget below services)", budget: budget, wait: wait, changes: 5, concurrent: true,
			timeout: max(wait, time.Duration(services/budget)*time.Second) + time.Minute},
		{name: "a query per service", budget: services + 100, changes: 10, timeout: 30 * time.Second},
	} {
		c := registries.Common{Name: "dc1", Kind: "consul", Domain: "consul"}
		cfg := &consul.Config{Address: agent.HTTPAddr, MaxConcurrentWatches: m.budget, WaitTime: registries.Duration(m.wait)}
		reg := newRegistry(t, cfg, c)
		sink := &scaleSink{want: services, addrs: map[string]string{}, seen: map[string]time.Time{}, wake: make(chan struct{}, 1)}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		start := time.Now()
		go func() { defer close(done); _ = reg.Run(ctx, sink) }()
		stop := func() { cancel(); <-done }
		if !sink.await(5*time.Minute, func() bool { return !sink.synced.IsZero() }) {
			stop()
			t.Fatalf("%s: no Replace with all %d services in 5m", m.name, services)
		}
		res := bench.ConsulScaleResult{Mode: m.name, Services: services, Budget: cfg.MaxConcurrentWatches,
			WaitTime: int64(cfg.WaitTime), Register: float64(register) / 1e6, Sync: float64(sink.synced.Sub(start)) / 1e6, Concurrent: m.concurrent}
		type change struct {
			addr  string
			stamp time.Time
		}
		var changes []change
		write := func(k int) change {
			svc := (k*7919 + 1) % services
			addr := fmt.Sprintf("10.9.%d.%d", mi, k+1)
			sink.mu.Lock()
			sink.addrs[addr] = fmt.Sprintf("svc-%d.consul", svc)
			sink.mu.Unlock()
			ch := change{addr: addr, stamp: time.Now()}
			if err := cl.Agent().ServiceRegister(&api.AgentServiceRegistration{
				ID: fmt.Sprintf("scale-%d-%d", mi, k), Name: fmt.Sprintf("svc-%d", svc), Address: addr, Port: 1000 + svc,
			}); err != nil {
				t.Errorf("register: %v", err)
			}
			return ch
		}
		seen := func(ch change) func() bool {
			return func() bool { _, ok := sink.seen[ch.addr]; return ok }
		}
		if m.concurrent {
			for k := range m.changes {
				changes = append(changes, write(k))
			}
			sink.await(m.timeout, func() bool {
				for _, ch := range changes {
					if !seen(ch)() {
						return false
					}
				}
				return true
			})
		} else {
			for k := range m.changes {
				ch := write(k)
				changes = append(changes, ch)
				sink.await(m.timeout, seen(ch))
			}
		}
		var lat []float64
		sink.mu.Lock()
		for _, ch := range changes {
			if at, ok := sink.seen[ch.addr]; ok {
				lat = append(lat, float64(at.Sub(ch.stamp))/1e6)
			} else {
				res.Lost++
			}
		}
		sink.mu.Unlock()
		stop()
		res.Change = bench.Summarize(lat)
		if res.Lost > 0 {
			t.Errorf("%s: %d of %d changes not seen within %s", m.name, res.Lost, m.changes, m.timeout)
		}
		t.Logf("%s: %d services, budget %d, wait %s: sync %.0f ms, change %+v", m.name, services, res.Budget, time.Duration(cfg.WaitTime), res.Sync, res.Change)
		results = append(results, res)
	}
	if full {
		b, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*scaleOut, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
