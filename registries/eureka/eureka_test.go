package eureka

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hudl/fargo"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
	"github.com/meshfed/meshfed/test/servers"
)

// visible bounds how long a change takes to reach the sink: Polaris shows
// a registration after ~1-5s, the registry polls every second.
const visible = 30 * time.Second

// newRegistry builds a registry over urls with a 1s poll, named after the
// test so that its metrics are its own.
func newRegistry(t *testing.T, name string, cfg Config) *Registry {
	t.Helper()
	cfg.PollInterval = registries.Duration(time.Second)
	return registrytest.NewRegistry[*Registry](t, &cfg, registries.Common{Name: name, Kind: "eureka", Domain: "eureka"}, registrytest.Logger())
}

func fetchCount(name, typ, result string) int {
	return int(testutil.ToFloat64(fetches.WithLabelValues(name, typ, result)))
}

// endpointsOf returns "address:port/health" of every endpoint of host, for
// its first port, in the registry's order (by instance id).
func endpointsOf(services []model.Service, host string) []string {
	s, ok := registrytest.Find(services, host)
	if !ok {
		return nil
	}
	p := s.Ports[0]
	var out []string
	for _, e := range s.Endpoints {
		n := p.Number
		if v, ok := e.Ports[p.Name]; ok {
			n = v
		}
		out = append(out, fmt.Sprintf("%s:%d/%s", e.Address, n, e.Health))
	}
	return out
}

func hasEndpoints(host string, want ...string) func(registrytest.State) bool {
	return func(st registrytest.State) bool {
		got := endpointsOf(st.Services, host)
		if len(got) != len(want) {
			return false
		}
		for i := range want {
			if got[i] != want[i] {
				return false
			}
		}
		return true
	}
}

// TestPolarisRegistrationsStatusAndDeregistration drives a real Eureka API
// (Polaris) through registration, OUT_OF_SERVICE, DOWN, UP and
// deregistration, in both wire formats, and checks that the changes came
// through deltas after one full fetch.
func TestPolarisRegistrationsStatusAndDeregistration(t *testing.T) {
	t.Parallel()
	for _, format := range []string{FormatJSON, FormatXML} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			p := servers.StartPolaris(t)
			a1 := p.Register(t, servers.EurekaInstance{App: "ORDERS", ID: "orders-1", IP: "10.0.0.1", Port: 8080,
				Metadata: map[string]string{"version": "v1", "zone": "zone-a", metaProtocol: "grpc"}})
			name := "polaris-" + format
			reg := newRegistry(t, name, Config{URLs: []string{p.URL}, Format: format})
			sink := registrytest.NewSink()
			registrytest.Start(t, reg, sink)
			st := sink.WaitFor(t, visible, hasEndpoints("orders.eureka", "10.0.0.1:8080/HEALTHY"))
			svc, _ := registrytest.Find(st.Services, "orders.eureka")
			if want := []model.Port{{Name: "http", Number: 8080, Protocol: model.ProtocolGRPC}}; fmt.Sprint(svc.Ports) != fmt.Sprint(want) {
				t.Errorf("ports = %v, want %v", svc.Ports, want)
			}
			if e := svc.Endpoints[0]; e.Labels["version"] != "v1" || e.Locality.Zone != "zone-a" || e.Labels[metaProtocol] != "" {
				t.Errorf("endpoint labels %v locality %v, want version=v1 (no %s label), zone zone-a", e.Labels, e.Locality, metaProtocol)
			}
			fulls := fetchCount(name, fetchFull, "ok")

			a2 := p.Register(t, servers.EurekaInstance{App: "ORDERS", ID: "orders-2", IP: "10.0.0.2", Port: 8080})
			sink.WaitFor(t, visible, hasEndpoints("orders.eureka", "10.0.0.1:8080/HEALTHY", "10.0.0.2:8080/HEALTHY"))
			p.SetStatus(t, a1, fargo.OUTOFSERVICE)
			sink.WaitFor(t, visible, hasEndpoints("orders.eureka", "10.0.0.1:8080/DRAINING", "10.0.0.2:8080/HEALTHY"))
			p.SetStatus(t, a2, fargo.DOWN)
			sink.WaitFor(t, visible, hasEndpoints("orders.eureka", "10.0.0.1:8080/DRAINING", "10.0.0.2:8080/UNHEALTHY"))
			p.SetStatus(t, a1, fargo.UP)
			sink.WaitFor(t, visible, hasEndpoints("orders.eureka", "10.0.0.1:8080/HEALTHY", "10.0.0.2:8080/UNHEALTHY"))
			p.Deregister(t, a2)
			sink.WaitFor(t, visible, hasEndpoints("orders.eureka", "10.0.0.1:8080/HEALTHY"))
			p.Deregister(t, a1)
			sink.WaitFor(t, visible, func(st registrytest.State) bool { return st.Synced() && len(st.Services) == 0 })

			if got := fetchCount(name, fetchFull, "ok"); got != fulls {
				t.Errorf("full fetches went from %d to %d; the changes should have come through deltas", fulls, got)
			}
			if got := fetchCount(name, fetchDelta, "ok"); got == 0 {
				t.Errorf("no delta fetch counted")
			}
			if got := testutil.ToFloat64(hashMismatches.WithLabelValues(name)); got != 0 {
				t.Errorf("%v hashcode mismatches against a consistent server", got)
			}
			for _, pr := range sink.Problems() {
				t.Error(pr)
			}
		})
	}
}

// TestPolarisOutageKeepsStateAndResyncs: a stopped server makes the
// registry Degraded without dropping anything; restarted, it is Synced.
func TestPolarisOutageKeepsStateAndResyncs(t *testing.T) {
	t.Parallel()
	p := servers.StartPolaris(t)
	p.Register(t, servers.EurekaInstance{App: "BILLING", ID: "billing-1", IP: "10.0.1.1", Port: 9090})
	reg := newRegistry(t, "outage", Config{URLs: []string{p.URL}})
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	st := sink.WaitFor(t, visible, hasEndpoints("billing.eureka", "10.0.1.1:9090/HEALTHY"))
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
	p.Register(t, servers.EurekaInstance{App: "BILLING", ID: "billing-2", IP: "10.0.1.2", Port: 9090})
	sink.WaitFor(t, visible, hasEndpoints("billing.eureka", "10.0.1.1:9090/HEALTHY", "10.0.1.2:9090/HEALTHY"))
	if got := sink.State(reg.common.Shard()); !got.Healthy() {
		t.Errorf("after restart: %v, want Synced", got)
	}
}

// TestFailoverToNextURL: a dead first URL is skipped, and counted.
func TestFailoverToNextURL(t *testing.T) {
	t.Parallel()
	p := servers.StartPolaris(t)
	p.Register(t, servers.EurekaInstance{App: "CART", ID: "cart-1", IP: "10.0.2.1", Port: 8080})
	dead := fmt.Sprintf("http://127.0.0.1:%d/eureka", servers.FreePort(t))
	reg := newRegistry(t, "failover", Config{URLs: []string{dead, p.URL}})
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	sink.WaitFor(t, visible, hasEndpoints("cart.eureka", "10.0.2.1:8080/HEALTHY"))
	if got := testutil.ToFloat64(failovers.WithLabelValues("failover")); got < 1 {
		t.Errorf("failovers = %v, want ≥ 1", got)
	}
	for _, s := range sink.Statuses(reg.common.Shard()) {
		if s.Failing() {
			t.Errorf("reported %v although the second URL answered", s)
		}
	}
}

// TestPolarisQuarantine: an instance without an enabled port is rejected
// alone; its app's other instances and other apps are served.
func TestPolarisQuarantine(t *testing.T) {
	t.Parallel()
	p := servers.StartPolaris(t)
	p.Register(t, servers.EurekaInstance{App: "SHOP", ID: "shop-1", IP: "10.0.3.1", Port: 8080})
	p.Register(t, servers.EurekaInstance{App: "SHOP", ID: "shop-noport", IP: "10.0.3.2"})
	p.Register(t, servers.EurekaInstance{App: "OTHER", ID: "other-1", IP: "10.0.3.3", Port: 8081})
	reg := newRegistry(t, "quarantine", Config{URLs: []string{p.URL}})
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	st := sink.WaitFor(t, visible, func(st registrytest.State) bool {
		return hasEndpoints("shop.eureka", "10.0.3.1:8080/HEALTHY")(st) &&
			hasEndpoints("other.eureka", "10.0.3.3:8081/HEALTHY")(st) && len(st.Rejected) == 1
	})
	if r := st.Rejected[0]; r.Subject != "shop-noport" || !strings.Contains(r.Reason, "no enabled port") || r.Host != "shop.eureka" {
		t.Errorf("rejection = %+v", r)
	}
}

func TestConformance(t *testing.T) {
	p := servers.StartPolaris(t)
	p.Register(t, servers.EurekaInstance{App: "CONF", ID: "conf-1", IP: "10.0.4.1", Port: 8080})
	// Wait until Polaris shows it, so every subtest starts from it.
	probe := registrytest.NewSink()
	stop := registrytest.Start(t, newRegistry(t, "conformance-probe", Config{URLs: []string{p.URL}}), probe)
	probe.WaitFor(t, visible, hasEndpoints("conf.eureka", "10.0.4.1:8080/HEALTHY"))
	stop()

	registrytest.SyncTimeout = visible
	var once sync.Once
	var reg *Registry
	registrytest.Conformance(t, func(t *testing.T) registries.Registry {
		once.Do(func() { reg = newRegistry(t, "conformance", Config{URLs: []string{p.URL}}) })
		return reg
	}, registrytest.Mutation{
		Name: "register a second app",
		Apply: func(t *testing.T) {
			p.Register(t, servers.EurekaInstance{App: "CONF2", ID: "conf2-1", IP: "10.0.4.2", Port: 8080})
		},
		Want: func(s []model.Service) bool {
			_, ok := registrytest.Find(s, "conf2.eureka")
			return ok
		},
	})
}

// fakeEureka serves scripted answers for the paths it is given, in order,
// repeating the last one.
type fakeEureka struct {
	mu      sync.Mutex
	answers map[string][]string
	hits    map[string]int
}

func (f *fakeEureka) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	path := strings.TrimPrefix(r.URL.Path, "/eureka")
	list := f.answers[path]
	if len(list) == 0 {
		http.NotFound(w, r)
		return
	}
	i := min(f.hits[path], len(list)-1)
	f.hits[path]++
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, list[i])
}

func (f *fakeEureka) count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[path]
}

// appsJSON writes a one-app (ECHO) answer in Netflix's JSON shape; each
// instance is "id ip status".
func appsJSON(hash string, action string, insts ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"applications":{"versions__delta":"1","apps__hashcode":%q,"application":[{"name":"ECHO","instance":[`, hash)
	for i, in := range insts {
		if i > 0 {
			b.WriteString(",")
		}
		parts := strings.Fields(in) // "id ip status"
		id, ip, st := parts[0], parts[1], parts[2]
		fmt.Fprintf(&b, `{"instanceId":%q,"app":"ECHO","ipAddr":%q,"status":%q,"port":{"$":8080,"@enabled":"true"},"securePort":{"$":443,"@enabled":false},"dataCenterInfo":{"@class":"com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo","name":"MyOwn"},"metadata":{"@class":"java.util.Collections$EmptyMap"},"actionType":%q}`, id, ip, st, action)
	}
	b.WriteString(`]}]}}`)
	return b.String()
}

// TestHashcodeMismatchTriggersFullFetch: the registry missed e2's
// registration (it fell out of the server's delta window); the next delta
// adds e3 and says the server holds 3 instances, the merged state has 2.
// That state is not published; the full fetch that follows at once is.
func TestHashcodeMismatchTriggersFullFetch(t *testing.T) {
	t.Parallel()
	f := &fakeEureka{hits: map[string]int{}, answers: map[string][]string{
		"/apps": {
			appsJSON("UP_1_", "ADDED", "e1 10.0.5.1 UP"),
			appsJSON("UP_3_", "ADDED", "e1 10.0.5.1 UP", "e2 10.0.5.2 UP", "e3 10.0.5.3 UP"),
		},
		"/apps/delta": {appsJSON("UP_3_", "ADDED", "e3 10.0.5.3 UP"), appsJSON("UP_3_", "ADDED")},
	}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	reg := newRegistry(t, "mismatch", Config{URLs: []string{srv.URL + "/eureka"}})
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	sink.WaitFor(t, visible, hasEndpoints("echo.eureka", "10.0.5.1:8080/HEALTHY"))
	sink.WaitFor(t, visible, hasEndpoints("echo.eureka", "10.0.5.1:8080/HEALTHY", "10.0.5.2:8080/HEALTHY", "10.0.5.3:8080/HEALTHY"))
	if got := testutil.ToFloat64(hashMismatches.WithLabelValues("mismatch")); got != 1 {
		t.Errorf("hashcode mismatches = %v, want 1", got)
	}
	if got := f.count("/apps"); got != 2 {
		t.Errorf("full fetches = %d, want 2 (start, then right after the mismatch)", got)
	}
	// Later deltas are empty and match: no more full fetches, no more
	// Replaces.
	deltas := f.count("/apps/delta")
	deadline := time.Now().Add(visible)
	for f.count("/apps/delta") < deltas+2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := f.count("/apps"); got != 2 {
		t.Errorf("full fetches = %d after matching deltas, want still 2", got)
	}
	if got := sink.Replaces(reg.common.Shard()); got != 2 {
		t.Errorf("%d Replaces, want 2 (first sync, repaired state); the diverged state must not be published", got)
	}
}

// TestPolarisOneChangeConvertsOneApp: among many apps, one new instance
// converts and compares its one app (counted, not timed), and the changes
// Eureka repeats in every delta for minutes (its delta window) convert
// nothing again.
func TestPolarisOneChangeConvertsOneApp(t *testing.T) {
	t.Parallel()
	const apps = 100
	p := servers.StartPolaris(t)
	var wg sync.WaitGroup
	for i := range apps {
		wg.Go(func() {
			p.Register(t, servers.EurekaInstance{App: fmt.Sprintf("APP-%03d", i), ID: fmt.Sprintf("app-%03d-1", i), IP: fmt.Sprintf("10.1.%d.%d", i/200, i%200+1), Port: 8080})
		})
	}
	wg.Wait()
	name := "onechange"
	reg := newRegistry(t, name, Config{URLs: []string{p.URL}})
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	sink.WaitFor(t, visible, func(st registrytest.State) bool { return len(st.Services) == apps })
	// deltas waits until n more delta fetches were answered.
	deltas := func(n int) {
		t.Helper()
		want := fetchCount(name, fetchDelta, "ok") + n
		deadline := time.Now().Add(visible)
		for fetchCount(name, fetchDelta, "ok") < want {
			if time.Now().After(deadline) {
				t.Fatalf("fewer than %d delta fetches within %v", n, visible)
			}
			time.Sleep(100 * time.Millisecond) // polling a counter, bounded by deadline
		}
	}
	deltas(2)
	if got := reg.conversions.Load(); got != apps {
		t.Errorf("first sync of %d apps and two deltas: %d conversions, want %d", apps, got, apps)
	}
	c0 := reg.conversions.Load()
	p.Register(t, servers.EurekaInstance{App: "APP-037", ID: "app-037-2", IP: "10.2.0.1", Port: 8080})
	sink.WaitFor(t, visible, hasEndpoints("app-037.eureka", "10.1.0.38:8080/HEALTHY", "10.2.0.1:8080/HEALTHY"))
	deltas(2)
	if got := reg.conversions.Load() - c0; got != 1 {
		t.Errorf("one instance registered among %d apps: %d apps converted, want 1", apps, got)
	}
}

func TestNextPoll(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ took, want time.Duration }{
		{0, time.Second},
		{300 * time.Millisecond, 700 * time.Millisecond},
		{950 * time.Millisecond, 100 * time.Millisecond}, // at least a tenth
		{3 * time.Second, 100 * time.Millisecond},
	} {
		if got := nextPoll(time.Second, tc.took); got != tc.want {
			t.Errorf("nextPoll(1s, %v) = %v, want %v", tc.took, got, tc.want)
		}
	}
}
