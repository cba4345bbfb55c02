package nacos

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
	"github.com/meshfed/meshfed/test/servers"
)

// visible bounds how long a change takes to reach the sink: Polaris turns
// its store into Nacos data once a second, the http transport polls every
// second.
const visible = 30 * time.Second

// newRegistry builds a registry with 1s intervals, named after the test so
// that its metrics are its own.
func newRegistry(t *testing.T, name string, cfg Config) *Registry {
	t.Helper()
	cfg.ListInterval = registries.Duration(time.Second)
	cfg.PollInterval = registries.Duration(time.Second)
	return registrytest.NewRegistry[*Registry](t, &cfg, registries.Common{Name: name, Kind: "nacos", Domain: "nacos"}, registrytest.Logger())
}

// endpointsOf returns "address:port/health/weight" of every endpoint of
// host on its port named port, in the registry's order.
func endpointsOf(services []model.Service, host, port string) []string {
	s, ok := registrytest.Find(services, host)
	if !ok {
		return nil
	}
	var out []string
	for _, p := range s.Ports {
		if p.Name != port {
			continue
		}
		for _, e := range s.Endpoints {
			if n, ok := e.PortFor(p); ok {
				out = append(out, fmt.Sprintf("%s:%d/%s/%d", e.Address, n, e.Health, e.Weight))
			}
		}
	}
	return out
}

func hasEndpoints(host, port string, want ...string) func(registrytest.State) bool {
	return func(st registrytest.State) bool {
		return st.Synced() && strings.Join(endpointsOf(st.Services, host, port), " ") == strings.Join(want, " ")
	}
}

// TestPolarisRegisterUpdateDeregister registers instances through the Nacos
// SDK (gRPC, ephemeral, as applications do), changes their weight, health
// and enabled flag, and deregisters them, over both transports.
func TestPolarisRegisterUpdateDeregister(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{TransportGRPC, TransportHTTP} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			p := servers.StartPolaris(t, servers.WithNacos())
			c := p.NacosClient(t, "")
			o1 := servers.NacosInstance{Service: "orders", IP: "10.0.0.1", Port: 8080, Cluster: "SH",
				Metadata: map[string]string{"version": "v1", "zone": "zone-a", "gRPC_port": "9090"}}
			c.Register(t, o1)
			name := "polaris-" + transport
			// The metrics are process-wide: count from here (go test -count=N).
			pushes0 := testutil.ToFloat64(pushes.WithLabelValues(name))
			subscribes0 := testutil.ToFloat64(requests.WithLabelValues(name, reqSubscribe, "ok"))
			reg := newRegistry(t, name, Config{Servers: []string{p.NacosAddr}, Transport: transport})
			sink := registrytest.NewSink()
			registrytest.Start(t, reg, sink)
			st := sink.WaitFor(t, visible, hasEndpoints("orders.nacos", "http", "10.0.0.1:8080/HEALTHY/100"))
			svc, _ := registrytest.Find(st.Services, "orders.nacos")
			if want := []model.Port{{Name: "http", Number: 8080, Protocol: model.ProtocolHTTP}, {Name: "grpc", Number: 9090, Protocol: model.ProtocolGRPC}}; fmt.Sprint(svc.Ports) != fmt.Sprint(want) {
				t.Errorf("ports = %v, want %v", svc.Ports, want)
			}
			if e := svc.Endpoints[0]; e.Labels["version"] != "v1" || e.Labels[labelCluster] != "SH" || e.Locality.Zone != "zone-a" || e.Labels["gRPC_port"] != "" {
				t.Errorf("endpoint labels %v locality %v, want version=v1 nacos.cluster=SH (no gRPC_port), zone zone-a", e.Labels, e.Locality)
			}
			for k := range svc.Endpoints[0].Labels {
				if strings.HasPrefix(k, polarisInternal) {
					t.Errorf("label %s is Polaris' own", k)
				}
			}

			o2 := servers.NacosInstance{Service: "orders", IP: "10.0.0.2", Port: 8080}
			c.Register(t, o2)
			sink.WaitFor(t, visible, hasEndpoints("orders.nacos", "http", "10.0.0.1:8080/HEALTHY/100", "10.0.0.2:8080/HEALTHY/100"))
			o1.Weight = 3
			c.Register(t, o1)
			sink.WaitFor(t, visible, hasEndpoints("orders.nacos", "http", "10.0.0.1:8080/HEALTHY/300", "10.0.0.2:8080/HEALTHY/100"))
			o2.Unhealthy = true
			c.Register(t, o2)
			sink.WaitFor(t, visible, hasEndpoints("orders.nacos", "http", "10.0.0.1:8080/HEALTHY/300", "10.0.0.2:8080/UNHEALTHY/100"))
			// A disabled instance is not served by Nacos (subscriptions and
			// lists carry enabled instances only).
			o2.Unhealthy, o2.Disabled = false, true
			c.Register(t, o2)
			sink.WaitFor(t, visible, hasEndpoints("orders.nacos", "http", "10.0.0.1:8080/HEALTHY/300"))
			o2.Disabled = false
			c.Register(t, o2)
			sink.WaitFor(t, visible, hasEndpoints("orders.nacos", "http", "10.0.0.1:8080/HEALTHY/300", "10.0.0.2:8080/HEALTHY/100"))
			c.Deregister(t, o2)
			sink.WaitFor(t, visible, hasEndpoints("orders.nacos", "http", "10.0.0.1:8080/HEALTHY/300"))
			c.Deregister(t, o1)
			sink.WaitFor(t, visible, func(st registrytest.State) bool { return st.Synced() && len(st.Services) == 0 })

			if transport == TransportGRPC {
				if got := testutil.ToFloat64(pushes.WithLabelValues(name)) - pushes0; got == 0 {
					t.Errorf("no push counted: the changes should have been pushed")
				}
				if got := testutil.ToFloat64(requests.WithLabelValues(name, reqSubscribe, "ok")) - subscribes0; got != 1 {
					t.Errorf("%v subscriptions, want 1 (one service, one connection)", got)
				}
			}
			for _, pr := range sink.Problems() {
				t.Error(pr)
			}
		})
	}
}

// TestPolarisNamespacesGroupsAndDiscovery: the registry watches one
// namespace and the groups it is given, finds services registered after
// it started, and drops services whose instances are all gone.
func TestPolarisNamespacesGroupsAndDiscovery(t *testing.T) {
	t.Parallel()
	p := servers.StartPolaris(t, servers.WithNacos())
	pub := p.NacosClient(t, "")
	dev := p.NacosClient(t, "dev")
	dev.Register(t, servers.NacosInstance{Service: "cart", IP: "10.0.1.1", Port: 8080})
	pub.Register(t, servers.NacosInstance{Service: "cart", IP: "10.0.9.9", Port: 8080})
	// Polaris 1.18 pushes changes of services outside DEFAULT_GROUP under
	// DEFAULT_GROUP's name (its push center takes the group from the bare
	// service name): only the resync sees them.
	reg := newRegistry(t, "groups", Config{Servers: []string{p.NacosAddr}, Namespace: "dev", Groups: []string{"DEFAULT_GROUP", "blue"},
		ResyncInterval: registries.Duration(time.Second)})
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	sink.WaitFor(t, visible, hasEndpoints("cart.nacos", "http", "10.0.1.1:8080/HEALTHY/100"))

	// Registered after the start, in another group: found by the next
	// list.
	dev.Register(t, servers.NacosInstance{Service: "cart", Group: "blue", IP: "10.0.1.2", Port: 8080})
	dev.Register(t, servers.NacosInstance{Service: "search", IP: "10.0.1.3", Port: 8080})
	st := sink.WaitFor(t, visible, func(st registrytest.State) bool {
		return hasEndpoints("cart.nacos", "http", "10.0.1.1:8080/HEALTHY/100")(st) &&
			hasEndpoints("cart.blue.nacos", "http", "10.0.1.2:8080/HEALTHY/100")(st) &&
			hasEndpoints("search.nacos", "http", "10.0.1.3:8080/HEALTHY/100")(st)
	})
	if len(st.Services) != 3 {
		t.Errorf("services %v, want cart, cart.blue and search of namespace dev only", hosts(st.Services))
	}
	// Polaris lists a group's services in DEFAULT_GROUP too, as
	// "<group>__<service>"; such a name is no hostname and is quarantined,
	// not mangled.
	for _, r := range st.Rejected {
		if !strings.Contains(r.Subject, "blue__cart") || !strings.Contains(r.Reason, "not a DNS label") {
			t.Errorf("unexpected rejection %v", r)
		}
	}
	// A change in group blue arrives too.
	dev.Register(t, servers.NacosInstance{Service: "cart", Group: "blue", IP: "10.0.1.4", Port: 8080})
	sink.WaitFor(t, visible, hasEndpoints("cart.blue.nacos", "http", "10.0.1.2:8080/HEALTHY/100", "10.0.1.4:8080/HEALTHY/100"))
	dev.Deregister(t, servers.NacosInstance{Service: "search", IP: "10.0.1.3", Port: 8080})
	sink.WaitFor(t, visible, func(st registrytest.State) bool {
		_, ok := registrytest.Find(st.Services, "search.nacos")
		return !ok && len(st.Services) == 2
	})
}

func hosts(services []model.Service) []string {
	var out []string
	for _, s := range services {
		out = append(out, s.Hostname)
	}
	return out
}

// TestPolarisOutageKeepsStateAndResyncs: a stopped server makes the
// registry Degraded without dropping anything; restarted, the SDK
// re-registers its instances and the registry is Synced with the changes
// made meanwhile.
func TestPolarisOutageKeepsStateAndResyncs(t *testing.T) {
	t.Parallel()
	p := servers.StartPolaris(t, servers.WithNacos())
	c := p.NacosClient(t, "")
	c.Register(t, servers.NacosInstance{Service: "billing", IP: "10.0.2.1", Port: 9090})
	reg := newRegistry(t, "outage", Config{Servers: []string{p.NacosAddr}})
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	st := sink.WaitFor(t, visible, hasEndpoints("billing.nacos", "http", "10.0.2.1:9090/HEALTHY/100"))
	replaces := st.Replaces

	p.Stop(t)
	st = sink.WaitFor(t, visible, func(st registrytest.State) bool { return st.Failing() })
	if st.Replaces != replaces {
		t.Errorf("Replace called during the outage: %d → %d", replaces, st.Replaces)
	}
	if !strings.Contains(st.Status.Err, "127.0.0.1") {
		t.Errorf("Degraded error %q does not name the server", st.Status.Err)
	}

	p.Start(t)
	c2 := p.NacosClient(t, "")
	c2.Register(t, servers.NacosInstance{Service: "billing", IP: "10.0.2.2", Port: 9090})
	sink.WaitFor(t, visible, hasEndpoints("billing.nacos", "http", "10.0.2.1:9090/HEALTHY/100", "10.0.2.2:9090/HEALTHY/100"))
	if got := sink.State(reg.common.Shard()); !got.Healthy() {
		t.Errorf("after restart: %v, want Synced", got)
	}
	if got := testutil.ToFloat64(reconnects.WithLabelValues("outage")); got < 1 {
		t.Errorf("reconnects = %v, want ≥ 1", got)
	}
}

// TestPolarisFaultsFollowServer hangs (SIGSTOP/SIGCONT) and kills Polaris
// under the ephemeral instances of three SDK clients. After each fault the
// registry publishes what Polaris itself lists (Polaris 1.18.1 may have
// lost instances: when it handles an old connection's close after a hang
// it deletes the instances the SDK registered again meanwhile on its new
// connection, and the SDK never registers them again); an instance added
// after the fault, and every instance Polaris lacks registered again as a
// client's redo would, are published: the subscriptions lived through the
// fault.
func TestPolarisFaultsFollowServer(t *testing.T) {
	t.Parallel()
	p := servers.StartPolaris(t, servers.WithNacos())
	type homed struct {
		c  *servers.NacosClient
		in servers.NacosInstance
	}
	regd := map[string]homed{} // "ip:port/HEALTHY" → its client and instance
	key := func(in servers.NacosInstance) string { return fmt.Sprintf("%s:%d/%s", in.IP, in.Port, model.Healthy) }
	add := func(c *servers.NacosClient, svc, i int) {
		in := servers.NacosInstance{Service: fmt.Sprintf("f%d", svc), IP: fmt.Sprintf("10.0.9.%d", 10*svc+i+1), Port: 8080}
		c.Register(t, in)
		regd[key(in)] = homed{c, in}
	}
	var clients []*servers.NacosClient
	for i := range 3 {
		clients = append(clients, p.NacosClient(t, ""))
		for svc := range 3 {
			add(clients[i], svc, i)
		}
	}
	reg := newRegistry(t, "faults", Config{Servers: []string{p.NacosAddr}, ResyncInterval: registries.Duration(5 * time.Second)})
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	// published is "ip:port/health" of every endpoint the registry
	// publishes; listed is the same of what Polaris lists.
	published := func(st registrytest.State) []string {
		var out []string
		for svc := range 3 {
			for _, e := range endpointsOf(st.Services, fmt.Sprintf("f%d.nacos", svc), "http") {
				out = append(out, strings.TrimSuffix(e, "/100"))
			}
		}
		slices.Sort(out)
		return out
	}
	listed := func() ([]string, error) {
		var out []string
		for svc := range 3 {
			hosts, err := p.NacosHosts(t.Context(), fmt.Sprintf("f%d", svc), "")
			if err != nil {
				return nil, err
			}
			for _, h := range hosts {
				health := model.Healthy
				if !h.Healthy {
					health = model.Unhealthy
				}
				out = append(out, fmt.Sprintf("%s:%d/%s", h.IP, h.Port, health))
			}
		}
		slices.Sort(out)
		return out, nil
	}
	all := func() []string { return slices.Sorted(maps.Keys(regd)) }
	// eventually polls check every second until it is done. Past visible,
	// it restarts Polaris once if Polaris no longer answers subscriptions
	// (its push deadlock, see servers.Polaris.NacosSubscribes): meshfed
	// cannot follow a server that does not answer, and keeps its last state
	// meanwhile (Degraded).
	restarts := 0
	eventually := func(what string, check func() (bool, string)) {
		t.Helper()
		for deadline := time.Now().Add(visible); ; time.Sleep(time.Second) {
			done, detail := check()
			if done {
				return
			}
			if time.Now().Before(deadline) {
				continue
			}
			if restarts > 0 || p.NacosSubscribes(t) {
				t.Fatalf("%s: %s", what, detail)
			}
			restarts++
			t.Logf("%s: Polaris answers no subscription (its push deadlock): restarting it", what)
			p.Process().Kill()
			p.Start(t)
			deadline = time.Now().Add(visible)
		}
	}
	sink.WaitFor(t, visible, func(st registrytest.State) bool { return st.Synced() && slices.Equal(published(st), all()) })

	lost := 0
	for n, fault := range []string{"hang", "kill", "hang"} {
		if fault == "hang" {
			// Longer than the SDK's health check (every 5s, 3s timeout):
			// the clients give their connections up and reconnect.
			p.Process().Signal(syscall.SIGSTOP)
			time.Sleep(10 * time.Second)
			p.Process().Signal(syscall.SIGCONT)
		} else {
			p.Process().Kill()
			time.Sleep(3 * time.Second)
			p.Start(t)
		}
		// Follow the server: once it answers and the registry has synced,
		// what Polaris lists is published (twice in a row, a second apart:
		// Polaris' list settles after the reconnections).
		var have []string
		agreed := 0
		eventually("after the "+fault, func() (bool, string) {
			l, err := listed()
			st := sink.State(reg.common.Shard())
			got := published(st)
			have = l
			if err == nil && st.Healthy() && slices.Equal(got, l) {
				agreed++
			} else {
				agreed = 0
			}
			return agreed >= 2, fmt.Sprintf("published %v (status %+v), Polaris lists %v (%v)", got, st.Status, l, err)
		})
		l := len(regd) - len(have)
		lost += l
		t.Logf("after the %s Polaris had lost %d of %d instances; published the same", fault, l, len(regd))

		add(clients[n], n, 5)
		// Register again what Polaris lacks (it may still drop some) until
		// everything is published.
		eventually("after the "+fault+" and registering again", func() (bool, string) {
			st := sink.State(reg.common.Shard())
			got := published(st)
			if st.Healthy() && slices.Equal(got, all()) {
				return true, ""
			}
			if l, err := listed(); err == nil {
				for k, h := range regd {
					if !slices.Contains(l, k) {
						h.c.Register(t, h.in)
					}
				}
			}
			return false, fmt.Sprintf("published %v (status %+v), want %v", got, st.Status, all())
		})
	}
	t.Logf("Polaris lost %d instances over the faults", lost)
}

// TestPolarisEphemeralGoneWithClient: a client's ephemeral instances leave
// with its connection, as in Nacos 2.x.
func TestPolarisEphemeralGoneWithClient(t *testing.T) {
	t.Parallel()
	p := servers.StartPolaris(t, servers.WithNacos())
	keep := p.NacosClient(t, "")
	keep.Register(t, servers.NacosInstance{Service: "pay", IP: "10.0.3.1", Port: 8080})
	gone := p.NacosClient(t, "")
	gone.Register(t, servers.NacosInstance{Service: "pay", IP: "10.0.3.2", Port: 8080})
	reg := newRegistry(t, "ephemeral", Config{Servers: []string{p.NacosAddr}})
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	sink.WaitFor(t, visible, hasEndpoints("pay.nacos", "http", "10.0.3.1:8080/HEALTHY/100", "10.0.3.2:8080/HEALTHY/100"))
	gone.Close()
	sink.WaitFor(t, visible, hasEndpoints("pay.nacos", "http", "10.0.3.1:8080/HEALTHY/100"))
}

// TestPolarisQuarantine: an instance with a malformed gRPC port is
// rejected alone; its service's other instances and other services are
// served.
func TestPolarisQuarantine(t *testing.T) {
	t.Parallel()
	p := servers.StartPolaris(t, servers.WithNacos())
	c := p.NacosClient(t, "")
	c.Register(t, servers.NacosInstance{Service: "shop", IP: "10.0.4.1", Port: 8080})
	c.Register(t, servers.NacosInstance{Service: "shop", IP: "10.0.4.2", Port: 8080, Metadata: map[string]string{"gRPC_port": "grpc"}})
	c.Register(t, servers.NacosInstance{Service: "other", IP: "10.0.4.3", Port: 8081})
	reg := newRegistry(t, "quarantine", Config{Servers: []string{p.NacosAddr}})
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	st := sink.WaitFor(t, visible, func(st registrytest.State) bool {
		return hasEndpoints("shop.nacos", "http", "10.0.4.1:8080/HEALTHY/100")(st) &&
			hasEndpoints("other.nacos", "http", "10.0.4.3:8081/HEALTHY/100")(st) && len(st.Rejected) == 1
	})
	if r := st.Rejected[0]; !strings.Contains(r.Subject, "10.0.4.2") || !strings.Contains(r.Reason, "gRPC_port") || r.Host != "shop.nacos" {
		t.Errorf("rejection = %+v", r)
	}
}

// TestFailoverToNextServer: a dead first server is skipped.
func TestFailoverToNextServer(t *testing.T) {
	t.Parallel()
	p := servers.StartPolaris(t, servers.WithNacos())
	c := p.NacosClient(t, "")
	c.Register(t, servers.NacosInstance{Service: "edge", IP: "10.0.5.1", Port: 8080})
	dead := fmt.Sprintf("127.0.0.1:%d", servers.FreePortPair(t, DefaultGRPCPortOffset))
	reg := newRegistry(t, "failover", Config{Servers: []string{dead, p.NacosAddr}})
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	sink.WaitFor(t, visible, hasEndpoints("edge.nacos", "http", "10.0.5.1:8080/HEALTHY/100"))
	for _, s := range sink.Statuses(reg.common.Shard()) {
		if s.Failing() {
			t.Errorf("reported %v although the second server answered", s)
		}
	}
}

func TestConformance(t *testing.T) {
	p := servers.StartPolaris(t, servers.WithNacos())
	c := p.NacosClient(t, "")
	c.Register(t, servers.NacosInstance{Service: "conf", IP: "10.0.6.1", Port: 8080})
	probe := registrytest.NewSink()
	stop := registrytest.Start(t, newRegistry(t, "conformance-probe", Config{Servers: []string{p.NacosAddr}}), probe)
	probe.WaitFor(t, visible, hasEndpoints("conf.nacos", "http", "10.0.6.1:8080/HEALTHY/100"))
	stop()

	registrytest.SyncTimeout = visible
	var once sync.Once
	var reg *Registry
	registrytest.Conformance(t, func(t *testing.T) registries.Registry {
		once.Do(func() { reg = newRegistry(t, "conformance", Config{Servers: []string{p.NacosAddr}}) })
		return reg
	}, registrytest.Mutation{
		Name:  "register a second service",
		Apply: func(t *testing.T) { c.Register(t, servers.NacosInstance{Service: "conf2", IP: "10.0.6.2", Port: 8080}) },
		Want: func(s []model.Service) bool {
			_, ok := registrytest.Find(s, "conf2.nacos")
			return ok
		},
	})
}

// TestPolarisOneChangeConvertsOneService: among many services, one new
// instance converts and compares its one service and is handed to a sink
// that takes deltas (as the aggregator does) as a delta of that one
// service (counted, not timed); resyncs
// that read every service again convert and publish nothing that did not
// change.
func TestPolarisOneChangeConvertsOneService(t *testing.T) {
	t.Parallel()
	const services = 100
	p := servers.StartPolaris(t, servers.WithNacos())
	c := p.NacosClient(t, "")
	for i := range services {
		c.Register(t, servers.NacosInstance{Service: fmt.Sprintf("svc-%03d", i), IP: fmt.Sprintf("10.1.%d.%d", i/200, i%200+1), Port: 8080})
	}
	name := "onechange"
	cfg := Config{Servers: []string{p.NacosAddr}, ResyncInterval: registries.Duration(time.Second)}
	reg := newRegistry(t, name, cfg)
	var mu sync.Mutex
	converted := map[string]int{}
	reg.converted = func(service string) {
		mu.Lock()
		converted[service]++
		mu.Unlock()
	}
	sink := registrytest.NewDeltaSink()
	registrytest.Start(t, reg, sink)
	sink.WaitFor(t, visible, "every service", func(s map[string]model.Service) bool { return len(s) == services })
	subscribes := func() int { return int(testutil.ToFloat64(requests.WithLabelValues(name, reqSubscribe, "ok"))) }
	// resynced waits until every service was read once more.
	resynced := func() {
		t.Helper()
		want := subscribes() + services
		deadline := time.Now().Add(visible)
		for subscribes() < want {
			if time.Now().After(deadline) {
				t.Fatalf("no resync within %v", visible)
			}
			time.Sleep(100 * time.Millisecond) // polling a counter, bounded by deadline
		}
	}
	// Polaris may answer a subscription before its cache holds the
	// latest list and push that afterwards: a service can be converted
	// twice on the way in, a real change. Once settled, a resync reads
	// every service and converts none.
	resynced()
	c0 := reg.conversions.Load()
	t.Logf("first sync of %d services: %d conversions", services, c0)
	if c0 < services || c0 > 2*services {
		t.Errorf("first sync of %d services: %d conversions", services, c0)
	}
	sink.Take()
	resynced()
	if got := reg.conversions.Load() - c0; got != 0 {
		t.Errorf("a resync of %d unchanged services converted %d", services, got)
	}
	if got := sink.Take(); len(got) != 0 {
		t.Errorf("a resync of %d unchanged services published %v", services, got)
	}
	mu.Lock()
	clear(converted)
	mu.Unlock()
	c.Register(t, servers.NacosInstance{Service: "svc-037", IP: "10.2.0.1", Port: 8080})
	sink.WaitFor(t, visible, "the new instance", func(s map[string]model.Service) bool {
		svc, ok := s["svc-037.nacos"]
		return ok && len(svc.Endpoints) == 2 && slices.ContainsFunc(svc.Endpoints, func(e model.Endpoint) bool { return e.Address == "10.2.0.1" })
	})
	resynced()
	// Polaris may push the new instance's list twice (as registered, then
	// with its health); each list that differs is converted, and only
	// the service it belongs to, and handed on alone.
	mu.Lock()
	defer mu.Unlock()
	if len(converted) != 1 || converted["DEFAULT_GROUP@@svc-037"] == 0 {
		t.Errorf("one instance registered among %d services converted %v, want svc-037 only", services, converted)
	}
	got := sink.Take()
	if len(got) == 0 || len(got) > converted["DEFAULT_GROUP@@svc-037"] {
		t.Errorf("one instance registered: %d states published for %d conversions", len(got), converted["DEFAULT_GROUP@@svc-037"])
	}
	for _, u := range got {
		if u != "delta svc-037.nacos" {
			t.Errorf("one instance registered among %d services published %q, want a delta of svc-037.nacos alone", services, u)
		}
	}
}
