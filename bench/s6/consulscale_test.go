package s6

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/consul"
	"github.com/meshfed/meshfed/test/servers"
)

var (
	scaleOut       = flag.String("s6.scale.out", "", "run TestConsulScale at -s6.scale.services and write its results (JSON) here")
	scaleServices  = flag.Int("s6.scale.services", 10000, "services in Consul (with -s6.scale.out)")
	scaleInstances = flag.Int("s6.scale.instances", 10, "instances per service (with -s6.scale.out)")
	scalePprof     = flag.String("s6.scale.pprof", "", "write a CPU profile of the registry's process during each churn window into this directory")
	scaleModes     = flag.String("s6.scale.modes", "", "run only the modes whose name contains this (for profiling one mode)")
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
	// unhealthy: awaited endpoint (by Origin, node/serviceID) → when it
	// was first published UNHEALTHY (zero until then).
	unhealthy map[string]time.Time
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
			if at, ok := s.unhealthy[e.Origin]; ok && at.IsZero() && e.Health == model.Unhealthy {
				s.unhealthy[e.Origin] = now
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

// cpuOf is the CPU time of a process (utime+stime from /proc).
func cpuOf(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// registryCounters reads the consul registry's request and response-byte
// counters for one registry name.
func registryCounters(t *testing.T, name string) (reqs, bytes float64) {
	t.Helper()
	return registryMetric(t, name, "meshfed_consul_http_requests_total"), registryMetric(t, name, "meshfed_consul_http_response_bytes_total")
}

// registryMetric reads one of the consul package's counters or gauges for
// one registry name.
func registryMetric(t *testing.T, name, metric string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	for _, c := range consul.Collectors() {
		reg.MustRegister(c)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "registry" && l.GetValue() == name {
					return m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// liveMemory is this process's live heap and goroutine stacks after two
// GCs (bytes). Unlike VmRSS it does not keep what an earlier mode's
// registry left to the runtime's free lists.
func liveMemory() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc + ms.StackInuse
}

// settle waits (up to a minute) until no more than base goroutines, and
// a few the runtime may start, are left.
func settle(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for runtime.NumGoroutine() > base+5 {
		if time.Now().After(deadline) {
			t.Logf("%d goroutines left after a minute, %d before the first mode", runtime.NumGoroutine(), base)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// window measures the load while fn runs.
func window(t *testing.T, name string, agentPID int, fn func()) bench.Load {
	t.Helper()
	r0, b0 := registryCounters(t, name)
	e0 := registryMetric(t, name, "meshfed_consul_stream_events_total")
	a0, m0, t0 := cpuOf(agentPID), selfCPU(), time.Now()
	fn()
	r1, b1 := registryCounters(t, name)
	e1 := registryMetric(t, name, "meshfed_consul_stream_events_total")
	a1, m1, d := cpuOf(agentPID), selfCPU(), time.Since(t0).Seconds()
	return bench.Load{Seconds: d, ReqPerSec: (r1 - r0) / d, BytesPerSec: (b1 - b0) / d, EventsPerSec: (e1 - e0) / d,
		AgentCPU: (a1 - a0).Seconds() / d, MeshfedCPU: (m1 - m0).Seconds() / d}
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// TestConsulScale measures the consul registry against a real Consul agent
// holding many services (-s6.scale.instances each, on nodes of 100
// instances), at the agent's defaults (limits.http_max_conns_per_client
// 200) and with nothing set in the registry's config but the address
// (and waitTime 1m where services take turns, to bound the run): the
// initial sync, how long a new instance takes to reach Sink.Publish, and
// the load on the agent idle and under churn. Over HTTPS the agent speaks
// HTTP/2 and every service has its own blocking query on
// maxConcurrentWatches connections; over plain HTTP the services follow
// the servers' event stream, or with streaming off take turns when there
// are more services than watches (registries/consul/consul.go). The last
// two modes raise the agent's limit (reloaded), which leaves a connection
// per service: at the default the services follow the event stream all
// the same (beyond 128 services), with streaming off each has a blocking
// query of its own, as the registry sizes its budget from that limit. Without
// -s6.scale.out it runs at a tiny size (checks only that every mode syncs
// and sees every change).
func TestConsulScale(t *testing.T) {
	full := *scaleOut != ""
	// budget 0: sized from the agent's limit (registries/consul/budget.go).
	services, instances, budget, raised := 40, 2, 8, 100
	idle, churnFor, churnRate, h1wait := 2*time.Second, 2*time.Second, 10.0, 10*time.Second
	healthChanges := 5
	if full {
		services, instances, budget, raised = *scaleServices, *scaleInstances, 0, 16384
		idle, churnFor, churnRate, h1wait = 20*time.Second, 15*time.Second, 20, time.Minute
		healthChanges = 20
	}
	agent := servers.StartConsul(t, servers.ConsulOptions{Dev: true, TLS: true})
	t0 := time.Now()
	agent.RegisterSpread(t, services, instances, 100, 8)
	register := time.Since(t0)
	t.Logf("registered %d × %d instances in %v", services, instances, register.Round(time.Millisecond))
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cl, err := api.NewClient(&api.Config{Address: agent.HTTPAddr, HttpClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	var results []bench.ConsulScaleResult
	// The goroutines before any registry ran: each mode's memory baseline
	// is taken once the last mode's have ended (its connections' readers
	// exit after Run returns), or its growth would be measured against
	// memory the last mode still held.
	base := runtime.NumGoroutine()
	for mi, m := range []struct {
		name       string
		proto      string
		wait       time.Duration
		changes    int
		concurrent bool
		timeout    time.Duration
		churn      bool
		// agentLimit, when set, is the agent's
		// limits.http_max_conns_per_client for this mode (reloaded), and
		// the registry's budget is unset.
		agentLimit int
		// streamingOff: blocking queries only (else the default, auto).
		streamingOff bool
	}{
		{name: "HTTPS, one blocking query per service", proto: "HTTP/2", wait: consul.DefaultWaitTime.Std(), changes: 20, timeout: 30 * time.Second, churn: true},
		{name: "plain HTTP, the servers' event stream (streaming auto)", proto: "HTTP/1.1", wait: consul.DefaultWaitTime.Std(), changes: 20, timeout: 30 * time.Second, churn: true},
		// A turn blocks wait×budget/services (≥ 1 s), so one round over
		// every service takes about max(wait, services/budget × 1 s).
		{name: "plain HTTP, streaming off: round-robin turns", proto: "HTTP/1.1", wait: h1wait, changes: 5, concurrent: true, streamingOff: true,
			timeout: max(h1wait, time.Duration(services/cmp.Or(budget, consul.DefaultMaxConcurrentWatches))*time.Second) + time.Minute},
		// The agent's limit raised: at the default the services follow the
		// event stream all the same (more than 128 services); with
		// streaming off each has a blocking query of its own.
		{name: "plain HTTP, the agent's limit raised (streaming auto)", proto: "HTTP/1.1", wait: consul.DefaultWaitTime.Std(), changes: 20,
			timeout: 30 * time.Second, churn: true, agentLimit: raised},
		{name: "plain HTTP, the agent's limit raised, streaming off: one blocking query per service", proto: "HTTP/1.1", wait: consul.DefaultWaitTime.Std(), changes: 20,
			timeout: 30 * time.Second, churn: true, agentLimit: raised, streamingOff: true},
	} {
		if !strings.Contains(m.name, *scaleModes) {
			continue
		}
		limit, b := 200, budget
		if m.agentLimit > 0 {
			agent.SetMaxConnsPerClient(t, m.agentLimit)
			limit, b = m.agentLimit, 0
		}
		name := fmt.Sprintf("cs-%d-%d", services, mi)
		c := registries.Common{Name: name, Kind: "consul", Domain: "consul"}
		cfg := &consul.Config{Address: agent.HTTPAddr, MaxConcurrentWatches: b, WaitTime: registries.Duration(m.wait)}
		if m.streamingOff {
			cfg.Streaming = consul.StreamingOff
		}
		if m.proto == "HTTP/2" {
			cfg.Address, cfg.TLS.CAFile = agent.HTTPSAddr, agent.CAFile
		}
		reg := newRegistry(t, cfg, c)
		sink := &scaleSink{want: services, addrs: map[string]string{}, seen: map[string]time.Time{}, wake: make(chan struct{}, 1), unhealthy: map[string]time.Time{}}
		res := bench.ConsulScaleResult{Mode: m.name, Proto: m.proto, Services: services, Instances: instances, BudgetSet: b > 0, AgentLimit: limit,
			WaitTime: int64(cfg.WaitTime), Register: float64(register) / 1e6, Concurrent: m.concurrent, LoadAvg: loadavg()}
		settle(t, base)
		mem0 := liveMemory()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		start := time.Now()
		go func() { defer close(done); _ = reg.Run(ctx, sink) }()
		if *scalePprof != "" {
			// The agent's own CPU profile over the first 30 s of the sync
			// (dev agents serve /debug/pprof).
			go agentProfile(agent.HTTPAddr, filepath.Join(*scalePprof, fmt.Sprintf("consul-agent-%d-%d-sync.pprof", services, mi)), 30)
		}
		stop := func() { cancel(); <-done }
		if !sink.await(15*time.Minute, func() bool { return !sink.synced.IsZero() }) {
			stop()
			t.Fatalf("%s: no Replace with all %d services in 15m", m.name, services)
		}
		res.Sync = float64(sink.synced.Sub(start)) / 1e6
		time.Sleep(2 * time.Second) // the first queries of every service settle
		res.Budget = int(registryMetric(t, name, "meshfed_consul_max_concurrent_watches"))
		res.Streams = int(registryMetric(t, name, "meshfed_consul_subscriptions"))
		res.Idle = window(t, name, agent.PID(), func() { time.Sleep(idle) })
		// Every blocking query is in flight by now.
		res.Memory = (float64(liveMemory()) - float64(mem0)) / 1e6
		if full && res.Memory <= 0 {
			t.Errorf("%s: the registry's memory did not grow (%.1f MB): the baseline held memory of the last mode", m.name, res.Memory)
		}
		if *scalePprof != "" {
			bench.HeapProfile(t, filepath.Join(*scalePprof, fmt.Sprintf("consul-%d-%d-heap.pprof", services, mi)))
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			t.Logf("%s: heap %d MB, stacks %d MB, %d goroutines", m.name, ms.HeapAlloc>>20, ms.StackInuse>>20, runtime.NumGoroutine())
			if f, err := os.Create(filepath.Join(*scalePprof, fmt.Sprintf("consul-%d-%d-goroutines.txt", services, mi))); err == nil {
				_ = pprof.Lookup("goroutine").WriteTo(f, 1)
				f.Close()
			}
		}

		type change struct {
			addr  string
			stamp time.Time
		}
		k := 0
		write := func() change {
			k++
			svc := (k*7919 + 1) % services
			addr := fmt.Sprintf("10.%d.%d.%d", 250+mi, k/250, k%250+1) // unique across modes
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
		latencies := func(changes []change) (bench.Summary, int) {
			var lat []float64
			lost := 0
			sink.mu.Lock()
			defer sink.mu.Unlock()
			for _, ch := range changes {
				if at, ok := sink.seen[ch.addr]; ok {
					lat = append(lat, float64(at.Sub(ch.stamp))/1e6)
				} else {
					lost++
				}
			}
			return bench.Summarize(lat), lost
		}
		allSeen := func(changes []change) func() bool {
			return func() bool {
				for _, ch := range changes {
					if !seen(ch)() {
						return false
					}
				}
				return true
			}
		}
		var changes []change
		if m.concurrent {
			for range m.changes {
				changes = append(changes, write())
			}
			sink.await(m.timeout, allSeen(changes))
		} else {
			for range m.changes {
				ch := write()
				changes = append(changes, ch)
				sink.await(m.timeout, seen(ch))
			}
		}
		res.Change, res.Lost = latencies(changes)
		if res.Lost > 0 {
			t.Errorf("%s: %d of %d changes not seen within %s", m.name, res.Lost, m.changes, m.timeout)
		}
		// A check of one instance turns critical, one service at a time
		// (each back to passing before the next).
		var healthLat []float64
		for j := range healthChanges {
			svc := (j*104729 + 3) % services
			node := fmt.Sprintf("node-%d", svc*instances/100)
			check := func(status string) {
				if _, err := cl.Catalog().Register(&api.CatalogRegistration{Node: node, Address: "10.0.0.0", SkipNodeUpdate: true,
					Check: &api.AgentCheck{Node: node, CheckID: fmt.Sprintf("check-%d-0", svc), Name: "up", Status: status, ServiceID: fmt.Sprintf("svc-%d-0", svc)}}, nil); err != nil {
					t.Errorf("check: %v", err)
				}
			}
			origin := fmt.Sprintf("%s/svc-%d-0", node, svc)
			sink.mu.Lock()
			sink.unhealthy[origin] = time.Time{}
			sink.mu.Unlock()
			stamp := time.Now()
			check(api.HealthCritical)
			if sink.await(m.timeout, func() bool { return !sink.unhealthy[origin].IsZero() }) {
				sink.mu.Lock()
				healthLat = append(healthLat, float64(sink.unhealthy[origin].Sub(stamp))/1e6)
				delete(sink.unhealthy, origin)
				sink.mu.Unlock()
			} else {
				res.HealthLost++
			}
			check(api.HealthPassing)
		}
		res.Health = bench.Summarize(healthLat)
		if res.HealthLost > 0 {
			t.Errorf("%s: %d of %d health changes not seen within %s", m.name, res.HealthLost, healthChanges, m.timeout)
		}
		if m.churn {
			var churned []change
			var stopProf func()
			if *scalePprof != "" {
				stopProf = bench.CPUProfile(t, filepath.Join(*scalePprof, fmt.Sprintf("consul-%d-churn.pprof", services)))
			}
			res.Churn = window(t, name, agent.PID(), func() {
				tick := time.NewTicker(time.Duration(float64(time.Second) / churnRate))
				defer tick.Stop()
				begin := time.Now()
				for end := begin.Add(churnFor); time.Now().Before(end); <-tick.C {
					churned = append(churned, write())
				}
				// The agent may take registrations slower than asked.
				res.ChurnRate = float64(len(churned)) / time.Since(begin).Seconds()
				sink.await(m.timeout, allSeen(churned))
			})
			if stopProf != nil {
				stopProf()
			}
			res.Churn.Change, res.Churn.Lost = latencies(churned)
			if res.Churn.Lost > 0 {
				t.Errorf("%s: %d of %d churn changes not seen within %s", m.name, res.Churn.Lost, len(churned), m.timeout)
			}
		}
		stop()
		t.Logf("%s: %d services × %d, budget %d, wait %s: sync %.0f ms, change %+v, a check turns critical %+v, idle %+v, churn %+v",
			m.name, services, instances, res.Budget, time.Duration(cfg.WaitTime), res.Sync, res.Change, res.Health, res.Idle, res.Churn)
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

// agentProfile saves the agent's CPU profile over the next seconds.
func agentProfile(addr, path string, seconds int) {
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, seconds))
	if err != nil {
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = io.Copy(f, resp.Body)
}
