package zookeeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
	"github.com/meshfed/meshfed/test/servers"
)

const waitTimeout = 30 * time.Second

var registryCount atomic.Int64

// testRegistry returns a registry over the server at addr. Hostnames
// ending in .example.test resolve through hosts; others fail.
func testRegistry(t *testing.T, addr string, layout Layout, root string, hosts map[string]string, edit ...func(*Config)) *Registry {
	t.Helper()
	cfg := Config{Servers: []string{addr}, Layout: layout, Root: root, SessionTimeout: registries.Duration(4 * time.Second)}
	for _, e := range edit {
		e(&cfg)
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("zk%d", registryCount.Add(1))
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	r := newRegistry(registries.Common{Name: name, Kind: "zookeeper", Domain: "zk"}, cfg, log.With("registry", name))
	r.lookup = func(_ context.Context, host string) ([]string, error) {
		if ip, ok := hosts[host]; ok {
			return []string{ip}, nil
		}
		return nil, &netDNSError{host}
	}
	return r
}

type netDNSError struct{ host string }

func (e *netDNSError) Error() string { return "lookup " + e.host + ": no such host" }

type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}

// client opens a ZooKeeper session of its own (as a provider would) and
// waits until it has one. It is closed in t.Cleanup unless closed before.
func client(t *testing.T, addr string, timeout time.Duration, auth ...string) *zk.Conn {
	t.Helper()
	conn, events, err := zk.Connect([]string{addr}, timeout, zk.WithLogger(discardLogger{}), zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		for range events {
		}
	})
	deadline := time.After(waitTimeout)
	for {
		select {
		case ev := <-events:
			if ev.State != zk.StateHasSession {
				continue
			}
			for _, a := range auth {
				if err := conn.AddAuth("digest", []byte(a)); err != nil {
					t.Fatal(err)
				}
			}
			// Keep draining so that the client never blocks on it.
			go func() {
				for range events {
				}
			}()
			return conn
		case <-deadline:
			t.Fatalf("no ZooKeeper session with %s within %v", addr, waitTimeout)
		}
	}
}

// ensure creates path and its missing parents as persistent nodes (or
// containers, as Curator creates them).
func ensure(t *testing.T, c *zk.Conn, p string, flags int32, acl []zk.ACL) {
	t.Helper()
	if acl == nil {
		acl = zk.WorldACL(zk.PermAll)
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i := range parts {
		sub := "/" + strings.Join(parts[:i+1], "/")
		var err error
		if flags == zk.FlagContainer && i == len(parts)-1 {
			_, err = c.CreateContainer(sub, nil, zk.FlagContainer, acl)
		} else {
			_, err = c.Create(sub, nil, zk.FlagPersistent, acl)
		}
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("create %s: %v", sub, err)
		}
	}
}

// curatorJSON is a ServiceInstance as Curator's JsonInstanceSerializer
// writes it for Spring Cloud Zookeeper (same fields, same order).
type curatorJSON struct {
	Name                string         `json:"name"`
	ID                  string         `json:"id"`
	Address             string         `json:"address"`
	Port                *int           `json:"port"`
	SSLPort             *int           `json:"sslPort"`
	Payload             springInstance `json:"payload"`
	RegistrationTimeUTC int64          `json:"registrationTimeUTC"`
	ServiceType         string         `json:"serviceType"`
	URISpec             uriSpec        `json:"uriSpec"`
	Enabled             bool           `json:"enabled"`
}

type springInstance struct {
	Class    string            `json:"@class"`
	ID       string            `json:"id"`
	Name     string            `json:"name"`
	Metadata map[string]string `json:"metadata"`
}

type uriSpec struct {
	Parts []uriPart `json:"parts"`
}

type uriPart struct {
	Value    string `json:"value"`
	Variable bool   `json:"variable"`
}

func curatorData(t *testing.T, service, id, address string, port, sslPort int, meta map[string]string) []byte {
	t.Helper()
	ci := curatorJSON{
		Name: service, ID: id, Address: address,
		Payload: springInstance{Class: "org.springframework.cloud.zookeeper.discovery.ZookeeperInstance",
			ID: service + "-" + id, Name: service, Metadata: meta},
		RegistrationTimeUTC: time.Now().UnixMilli(), ServiceType: "DYNAMIC",
		URISpec: uriSpec{Parts: []uriPart{{"scheme", true}, {"://", false}, {"address", true}, {":", false}, {"port", true}}},
		Enabled: true,
	}
	if port != 0 {
		ci.Port = &port
	}
	if sslPort != 0 {
		ci.SSLPort = &sslPort
	}
	b, err := json.Marshal(ci)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// registerCurator registers an instance as Curator's ServiceDiscovery
// does for a DYNAMIC instance: parent containers, then an ephemeral node
// <root>/<service>/<id> owned by c's session.
func registerCurator(t *testing.T, c *zk.Conn, root, service, id string, data []byte) string {
	t.Helper()
	ensure(t, c, root, zk.FlagPersistent, nil)
	ensure(t, c, path.Join(root, service), zk.FlagContainer, nil)
	p := path.Join(root, service, id)
	if _, err := c.Create(p, data, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("register %s: %v", p, err)
	}
	return p
}

// registerDubbo registers a provider as Dubbo's ZookeeperRegistry does:
// persistent <root>/<interface>/providers, then an ephemeral node named
// by the URL-encoded provider URL, holding the provider's IP (Curator's
// default node data).
func registerDubbo(t *testing.T, c *zk.Conn, root, iface, providerURL, ip string) string {
	t.Helper()
	dir := path.Join(root, javaURLEncode(iface), "providers")
	ensure(t, c, dir, zk.FlagPersistent, nil)
	p := dir + "/" + javaURLEncode(providerURL)
	if _, err := c.Create(p, []byte(ip), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("register %s: %v", p, err)
	}
	return p
}

// start runs reg until the test ends.
func start(t *testing.T, reg registries.Registry) *registrytest.Sink {
	t.Helper()
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	return sink
}

// endpointsByHost summarizes services as host → sorted "address:port label=value".
func endpointsByHost(services []model.Service) map[string][]string {
	out := map[string][]string{}
	for _, s := range services {
		eps := []string{}
		for _, e := range s.Endpoints {
			desc := e.Address
			for _, p := range s.Ports {
				if n, ok := e.PortFor(p); ok {
					desc += fmt.Sprintf(" %s=%d", p.Name, n)
				}
			}
			if v, ok := e.Labels["version"]; ok {
				desc += " version=" + v
			}
			if e.Health != model.Healthy {
				desc += " " + e.Health.String()
			}
			eps = append(eps, desc)
		}
		slices.Sort(eps)
		out[s.Hostname] = eps
	}
	return out
}

func hasEndpoints(want map[string][]string) func(registrytest.State) bool {
	return func(s registrytest.State) bool {
		return s.Synced() && fmt.Sprint(endpointsByHost(s.Services)) == fmt.Sprint(want)
	}
}

func subjects(rs []model.Rejection) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.Subject)
	}
	slices.Sort(out)
	return out
}

// TestAgainstZooKeeper runs the tests that can share one server, each
// under a root of its own.
func TestAgainstZooKeeper(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real ZooKeeper")
	}
	t.Parallel()
	z := servers.StartZooKeeper(t)
	t.Run("group", func(t *testing.T) {
		t.Run("Curator", func(t *testing.T) { t.Parallel(); testCurator(t, z.Addr()) })
		t.Run("Dubbo", func(t *testing.T) { t.Parallel(); testDubbo(t, z.Addr()) })
		t.Run("Quarantine", func(t *testing.T) { t.Parallel(); testQuarantine(t, z.Addr()) })
		t.Run("DubboQuarantine", func(t *testing.T) { t.Parallel(); testDubboQuarantine(t, z.Addr()) })
		t.Run("Scale", func(t *testing.T) { t.Parallel(); testScale(t, z.Addr()) })
		t.Run("OneChangeCurator", func(t *testing.T) { t.Parallel(); testOneChange(t, z.Addr(), LayoutCurator) })
		t.Run("OneChangeDubbo", func(t *testing.T) { t.Parallel(); testOneChange(t, z.Addr(), LayoutDubbo) })
		t.Run("Auth", func(t *testing.T) { t.Parallel(); testAuth(t, z.Addr()) })
		t.Run("Conformance", func(t *testing.T) { t.Parallel(); testConformance(t, z.Addr()) })
	})
}

func testCurator(t *testing.T, addr string) {
	const root = "/curator/services"
	provider := client(t, addr, 10*time.Second)
	registerCurator(t, provider, root, "orders", "a", curatorData(t, "orders", "a", "192.0.2.1", 8080, 0, map[string]string{"instance_status": "UP", "version": "v1"}))
	registerCurator(t, provider, root, "orders", "b", curatorData(t, "orders", "b", "192.0.2.2", 8080, 0, map[string]string{"version": "v2"}))
	registerCurator(t, provider, root, "payments", "p", curatorData(t, "payments", "p", "192.0.2.3", 9090, 9443, nil))

	reg := testRegistry(t, addr, LayoutCurator, root, nil)
	sink := start(t, reg)
	st := sink.WaitFor(t, waitTimeout, registrytest.State.Synced)
	src := model.Source{Registry: reg.common.Name, Cluster: reg.common.Name}
	want := []model.Service{
		{Hostname: "orders.zk", Ports: []model.Port{{Name: "http", Number: 8080, Protocol: model.ProtocolHTTP}}, Endpoints: []model.Endpoint{
			{Address: "192.0.2.1", Labels: map[string]string{"instance_status": "UP", "version": "v1"}, Weight: 1, Source: src, Origin: root + "/orders/a"},
			{Address: "192.0.2.2", Labels: map[string]string{"version": "v2"}, Weight: 1, Source: src, Origin: root + "/orders/b"},
		}},
		{Hostname: "payments.zk", Ports: []model.Port{
			{Name: "http", Number: 9090, Protocol: model.ProtocolHTTP}, {Name: "https", Number: 9443, Protocol: model.ProtocolTCP},
		}, Endpoints: []model.Endpoint{
			{Address: "192.0.2.3", Weight: 1, Source: src, Origin: root + "/payments/p"},
		}},
	}
	if d := registrytest.DiffServices(want, st.Services); d != "" {
		t.Fatalf("first state (-want +got):\n%s", d)
	}
	if len(st.Rejected) != 0 {
		t.Errorf("rejected %v, want none", st.Rejected)
	}

	// Curator's updateService rewrites the instance's data.
	if _, err := provider.Set(root+"/orders/a", curatorData(t, "orders", "a", "192.0.2.1", 8080, 0, map[string]string{"instance_status": "OUT_OF_SERVICE", "version": "v1"}), -1); err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, waitTimeout, hasEndpoints(map[string][]string{
		"orders.zk":   {"192.0.2.1 http=8080 version=v1 DRAINING", "192.0.2.2 http=8080 version=v2"},
		"payments.zk": {"192.0.2.3 http=9090 https=9443"},
	}))

	// A second provider registers; then the first one's session closes
	// and takes its ephemeral instances with it.
	other := client(t, addr, 10*time.Second)
	registerCurator(t, other, root, "orders", "c", curatorData(t, "orders", "c", "192.0.2.4", 8081, 0, map[string]string{"version": "v3"}))
	sink.WaitFor(t, waitTimeout, hasEndpoints(map[string][]string{
		"orders.zk":   {"192.0.2.1 http=8080 version=v1 DRAINING", "192.0.2.2 http=8080 version=v2", "192.0.2.4 http=8081 version=v3"},
		"payments.zk": {"192.0.2.3 http=9090 https=9443"},
	}))
	provider.Close()
	st = sink.WaitFor(t, waitTimeout, hasEndpoints(map[string][]string{
		"orders.zk": {"192.0.2.4 http=8081 version=v3"},
	}))
	if got := st.Services[0].Ports; !slices.Equal(got, []model.Port{{Name: "http", Number: 8081, Protocol: model.ProtocolHTTP}}) {
		t.Errorf("ports after the session closed: %v, want http 8081", got)
	}
	if p := sink.Problems(); len(p) > 0 {
		t.Errorf("sink problems: %v", p)
	}
	if got := testutil.ToFloat64(reg.m.events["children_changed"]); got < 2 {
		t.Errorf("children_changed events = %v, want at least 2", got)
	}
	if got := testutil.ToFloat64(reg.m.events["data_changed"]); got < 1 {
		t.Errorf("data_changed events = %v, want at least 1", got)
	}
	if n := testutil.CollectAndCount(registries.Collectors()[0]); n == 0 {
		t.Error("no ingest latency observed")
	}
}

func testDubbo(t *testing.T, addr string) {
	const root = "/dubbo-e2e"
	provider1 := client(t, addr, 10*time.Second)
	provider2 := client(t, addr, 10*time.Second)
	registerDubbo(t, provider1, root, "com.foo.DemoService",
		"dubbo://192.0.2.5:20880/com.foo.DemoService?anyhost=true&application=demo-provider&deprecated=false&dubbo=2.0.2&dynamic=true&generic=false&interface=com.foo.DemoService&methods=sayHello,sayHelloAsync&pid=4242&release=3.2.0&side=provider&timestamp=1732233600000&version=1.0.0", "192.0.2.5")
	registerDubbo(t, provider2, root, "com.foo.DemoService",
		"dubbo://192.0.2.6:20880/com.foo.DemoService?anyhost=true&application=demo-provider&dubbo=2.0.2&interface=com.foo.DemoService&methods=sayHello,sayHelloAsync&pid=77&side=provider&timestamp=1732233600001&version=2.0.0", "192.0.2.6")
	registerDubbo(t, provider2, root, "org.acme.Greeter",
		"tri://192.0.2.6:50051/org.acme.Greeter?application=greeter&interface=org.acme.Greeter&methods=greet&side=provider&group=blue", "192.0.2.6")
	// A consumer's node and the configurators directory are no providers.
	consumer := client(t, addr, 10*time.Second)
	ensure(t, consumer, root+"/com.foo.DemoService/consumers", zk.FlagPersistent, nil)
	if _, err := consumer.Create(root+"/com.foo.DemoService/consumers/"+javaURLEncode("consumer://192.0.2.100/com.foo.DemoService?category=consumers&side=consumer"), nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	ensure(t, consumer, root+"/com.foo.DemoService/configurators", zk.FlagPersistent, nil)

	reg := testRegistry(t, addr, LayoutDubbo, root, nil)
	sink := start(t, reg)
	st := sink.WaitFor(t, waitTimeout, hasEndpoints(map[string][]string{
		"demoservice.foo.com.zk": {"192.0.2.5 dubbo=20880 version=1.0.0", "192.0.2.6 dubbo=20880 version=2.0.0"},
		"greeter.acme.org.zk":    {"192.0.2.6 tri=50051"},
	}))
	for _, s := range st.Services {
		switch s.Hostname {
		case "demoservice.foo.com.zk":
			if !slices.Equal(s.Ports, []model.Port{{Name: "dubbo", Number: 20880, Protocol: model.ProtocolTCP}}) {
				t.Errorf("%s ports %v", s.Hostname, s.Ports)
			}
			for _, e := range s.Endpoints {
				if e.Labels["application"] != "demo-provider" || e.Labels["interface"] != "com.foo.DemoService" || e.Labels["pid"] != "" {
					t.Errorf("%s endpoint %s labels %v", s.Hostname, e.Address, e.Labels)
				}
			}
		case "greeter.acme.org.zk":
			if !slices.Equal(s.Ports, []model.Port{{Name: "tri", Number: 50051, Protocol: model.ProtocolGRPC}}) {
				t.Errorf("%s ports %v", s.Hostname, s.Ports)
			}
			if g := s.Endpoints[0].Labels["group"]; g != "blue" {
				t.Errorf("%s group label %q, want blue", s.Hostname, g)
			}
		}
	}

	// provider2 goes away: its providers of both interfaces go with it.
	provider2.Close()
	sink.WaitFor(t, waitTimeout, hasEndpoints(map[string][]string{
		"demoservice.foo.com.zk": {"192.0.2.5 dubbo=20880 version=1.0.0"},
	}))
	provider1.Close()
	sink.WaitFor(t, waitTimeout, hasEndpoints(map[string][]string{}))
}

func testQuarantine(t *testing.T, addr string) {
	const root = "/quarantine"
	p := client(t, addr, 10*time.Second)
	hosts := map[string]string{"orders-9.example.test": "192.0.2.59"}
	registerCurator(t, p, root, "orders", "good1", curatorData(t, "orders", "good1", "192.0.2.51", 8080, 0, nil))
	registerCurator(t, p, root, "orders", "good2", curatorData(t, "orders", "good2", "192.0.2.52", 8080, 0, nil))
	registerCurator(t, p, root, "orders", "byname", curatorData(t, "orders", "byname", "orders-9.example.test", 8080, 0, nil))
	bad := registerCurator(t, p, root, "orders", "bad", []byte(`{"name":"orders","id":"bad","address":"192.0.2.53","port":8080,`))
	noPort := registerCurator(t, p, root, "orders", "noport", curatorData(t, "orders", "noport", "192.0.2.54", 0, 0, nil))
	unresolvable := registerCurator(t, p, root, "orders", "gone", curatorData(t, "orders", "gone", "gone.example.test", 8080, 0, nil))
	badName := registerCurator(t, p, root, "Orders_v2", "x", curatorData(t, "Orders_v2", "x", "192.0.2.55", 8080, 0, nil))

	reg := testRegistry(t, addr, LayoutCurator, root, hosts)
	sink := start(t, reg)
	st := sink.WaitFor(t, waitTimeout, hasEndpoints(map[string][]string{
		"orders.zk": {"192.0.2.51 http=8080", "192.0.2.52 http=8080", "192.0.2.59 http=8080"},
	}))
	wantSubjects := []string{bad, unresolvable, noPort, path.Dir(badName)}
	slices.Sort(wantSubjects)
	if got := subjects(st.Rejected); !slices.Equal(got, wantSubjects) {
		t.Errorf("rejected subjects %v, want %v", got, wantSubjects)
	}
	for _, r := range st.Rejected {
		if r.Registry != reg.common.Name || r.Reason == "" {
			t.Errorf("rejection %+v: want registry %s and a reason", r, reg.common.Name)
		}
		if r.Subject == bad && !strings.Contains(r.Reason, "malformed Curator instance JSON") {
			t.Errorf("rejection of the malformed instance says %q", r.Reason)
		}
	}
	if got := testutil.ToFloat64(reg.m.quarantined); got != 4 {
		t.Errorf("quarantined gauge = %v, want 4", got)
	}

	// The owner fixes the bad instance: it is served, the rest unchanged.
	if _, err := p.Set(bad, curatorData(t, "orders", "bad", "192.0.2.53", 8080, 0, nil), -1); err != nil {
		t.Fatal(err)
	}
	st = sink.WaitFor(t, waitTimeout, hasEndpoints(map[string][]string{
		"orders.zk": {"192.0.2.51 http=8080", "192.0.2.52 http=8080", "192.0.2.53 http=8080", "192.0.2.59 http=8080"},
	}))
	if got := subjects(st.Rejected); slices.Contains(got, bad) || len(got) != 3 {
		t.Errorf("rejected after the fix: %v", got)
	}
}

func testDubboQuarantine(t *testing.T, addr string) {
	const root = "/dubbo-quarantine"
	p := client(t, addr, 10*time.Second)
	registerDubbo(t, p, root, "com.foo.DemoService", "dubbo://192.0.2.61:20880/com.foo.DemoService?version=1", "192.0.2.61")
	noPort := registerDubbo(t, p, root, "com.foo.DemoService", "dubbo://192.0.2.62/com.foo.DemoService?version=1", "192.0.2.62")
	unparsable := registerDubbo(t, p, root, "com.foo.DemoService", "dubbo://[192.0.2.63:20880/com.foo.DemoService", "192.0.2.63")
	badHost := registerDubbo(t, p, root, "com.foo.DemoService", "dubbo://gone.example.test:20880/com.foo.DemoService", "")

	reg := testRegistry(t, addr, LayoutDubbo, root, nil)
	sink := start(t, reg)
	st := sink.WaitFor(t, waitTimeout, hasEndpoints(map[string][]string{
		"demoservice.foo.com.zk": {"192.0.2.61 dubbo=20880 version=1"},
	}))
	want := []string{noPort, unparsable, badHost}
	slices.Sort(want)
	if got := subjects(st.Rejected); !slices.Equal(got, want) {
		t.Errorf("rejected subjects %v, want %v", got, want)
	}
	for _, r := range st.Rejected {
		if r.Host != "demoservice.foo.com.zk" {
			t.Errorf("rejection %+v: want host demoservice.foo.com.zk", r)
		}
	}
}

// testScale: 1,000 instances across 100 services, registered while the
// registry watches (ingested event by event) and then read by a fresh
// registry (ingested by one resync).
func testScale(t *testing.T, addr string) {
	const root = "/scale"
	const services, perService = 100, 10
	reg := testRegistry(t, addr, LayoutCurator, root, nil)
	sink := start(t, reg)
	// The root does not exist yet: that is no service, not an error.
	st := sink.WaitFor(t, waitTimeout, registrytest.State.Synced)
	if len(st.Services) != 0 {
		t.Fatalf("services before the root exists: %v", st.Services)
	}

	p := client(t, addr, 10*time.Second)
	ensure(t, p, root, zk.FlagPersistent, nil)
	for s := range services {
		ensure(t, p, fmt.Sprintf("%s/svc-%03d", root, s), zk.FlagContainer, nil)
	}
	startReg := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, services*perService)
	for s := range services {
		wg.Go(func() {
			for i := range perService {
				name := fmt.Sprintf("svc-%03d", s)
				id := fmt.Sprintf("i-%d", i)
				ip := fmt.Sprintf("10.%d.%d.%d", s/200, s%200, i+1)
				_, err := p.Create(path.Join(root, name, id), curatorData(t, name, id, ip, 8000+i%2, 0, nil), zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("register: %v", err)
	}
	complete := func(s registrytest.State) bool {
		if !s.Synced() || len(s.Services) != services {
			return false
		}
		for _, svc := range s.Services {
			if len(svc.Endpoints) != perService {
				return false
			}
		}
		return true
	}
	st = sink.WaitFor(t, waitTimeout, complete)
	t.Logf("1000 instances registered and ingested by watches in %v (%d publishes)", time.Since(startReg), st.Replaces)
	for _, svc := range st.Services {
		// 5 instances on 8000, 5 on 8001: the tie goes to the lower port.
		if len(svc.Ports) != 1 || svc.Ports[0].Number != 8000 {
			t.Fatalf("%s ports %v, want http 8000", svc.Hostname, svc.Ports)
		}
	}

	startResync := time.Now()
	fresh := start(t, testRegistry(t, addr, LayoutCurator, root, nil))
	st2 := fresh.WaitFor(t, waitTimeout, registrytest.State.Synced)
	t.Logf("1000 instances read by a fresh registry in %v", time.Since(startResync))
	if st2.Replaces != 1 {
		t.Errorf("fresh registry published %d times, want 1 (never a partial list)", st2.Replaces)
	}
	if !complete(st2) {
		t.Fatalf("fresh registry: %s", st2)
	}
	// Endpoints differ only in their Source.
	for i := range st.Services {
		a, b := st.Services[i], st2.Services[i]
		if a.Hostname != b.Hostname || len(a.Endpoints) != len(b.Endpoints) || a.Endpoints[3].Address != b.Endpoints[3].Address {
			t.Fatalf("watch-ingested and resync-ingested states differ at %s / %s", a.Hostname, b.Hostname)
		}
	}
	// Everything goes when the provider's session closes.
	p.Close()
	sink.WaitFor(t, waitTimeout, func(s registrytest.State) bool { return len(s.Services) == 0 })
}

// testOneChange: among many services, each change of one instance (a
// create, a data change, a delete) and the arrival of one whole service
// convert and compare that one service (counted, not timed); the first
// sync converts each service once.
func testOneChange(t *testing.T, addr string, layout Layout) {
	const services = 300
	root := "/onechange/" + string(layout)
	p := client(t, addr, 10*time.Second)
	ensure(t, p, root, zk.FlagPersistent, nil)
	acl := zk.WorldACL(zk.PermAll)
	// instance returns instance i of service s and the operations that
	// create it with the service's znodes (Dubbo: and providers), its own
	// last.
	type created struct{ path, host, addr string }
	instance := func(s, i int) (created, []any) {
		name := fmt.Sprintf("svc-%03d", s)
		ip := fmt.Sprintf("10.%d.%d.%d", s/200, s%200, i+1)
		if layout == LayoutDubbo {
			iface := "com.example.Svc" + strconv.Itoa(s)
			dir := root + "/" + javaURLEncode(iface)
			node := dir + "/providers/" + javaURLEncode(fmt.Sprintf("tri://%s:50051/%s?side=provider&pid=%d", ip, iface, i))
			return created{node, "svc" + strconv.Itoa(s) + ".example.com.zk", ip}, []any{
				&zk.CreateRequest{Path: dir, Acl: acl}, &zk.CreateRequest{Path: dir + "/providers", Acl: acl},
				&zk.CreateRequest{Path: node, Data: []byte(ip), Acl: acl, Flags: zk.FlagEphemeral}}
		}
		node := root + "/" + name + "/i-" + strconv.Itoa(i)
		return created{node, name + ".zk", ip}, []any{
			// Persistent: a transaction cannot create a container.
			&zk.CreateRequest{Path: root + "/" + name, Acl: acl},
			&zk.CreateRequest{Path: node, Data: curatorData(t, name, "i-"+strconv.Itoa(i), ip, 8080, 0, nil), Acl: acl, Flags: zk.FlagEphemeral}}
	}
	var wg sync.WaitGroup
	errs := make(chan error, services)
	for s := range services {
		wg.Go(func() {
			_, ops := instance(s, 0)
			if _, err := p.Multi(ops...); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("register: %v", err)
	}

	reg := testRegistry(t, addr, layout, root, nil)
	sink := start(t, reg)
	sink.WaitFor(t, waitTimeout, func(s registrytest.State) bool { return s.Synced() && len(s.Services) == services })
	if got := reg.conversions.Load(); got != services {
		t.Errorf("first sync of %d services: %d conversions, want %d", services, got, services)
	}
	has := func(host, addr string, want bool) func(registrytest.State) bool {
		return func(s registrytest.State) bool {
			svc, _ := registrytest.Find(s.Services, host)
			return slices.ContainsFunc(svc.Endpoints, func(e model.Endpoint) bool { return e.Address == addr }) == want
		}
	}
	step := func(what string, do func() error, host, addr string, want bool) {
		t.Helper()
		before := reg.conversions.Load()
		if err := do(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		sink.WaitFor(t, waitTimeout, has(host, addr, want))
		if got := reg.conversions.Load() - before; got != 1 {
			t.Errorf("%s among %d services: %d services converted, want 1", what, services, got)
		}
	}
	in, ops := instance(137, 1)
	step("one instance created", func() error { _, err := p.Multi(ops[len(ops)-1]); return err }, in.host, in.addr, true)
	if layout == LayoutCurator {
		moved := "10.9.9.9"
		step("one instance's data changed", func() error {
			_, err := p.Set(in.path, curatorData(t, "svc-137", "i-1", moved, 8080, 0, nil), -1)
			return err
		}, in.host, moved, true)
		in.addr = moved
	}
	step("one instance deleted", func() error { return p.Delete(in.path, -1) }, in.host, in.addr, false)
	in, ops = instance(services, 0)
	step("one service created", func() error { _, err := p.Multi(ops...); return err }, in.host, in.addr, true)
}

func testAuth(t *testing.T, addr string) {
	const root = "/secure/services"
	admin := client(t, addr, 10*time.Second, "meshfed:s3cret")
	acl := zk.DigestACL(zk.PermAll, "meshfed", "s3cret")
	ensure(t, admin, "/secure", zk.FlagPersistent, acl)
	ensure(t, admin, root, zk.FlagPersistent, acl)
	ensure(t, admin, root+"/orders", zk.FlagPersistent, acl)
	if _, err := admin.Create(root+"/orders/a", curatorData(t, "orders", "a", "192.0.2.71", 8080, 0, nil), zk.FlagEphemeral, acl); err != nil {
		t.Fatal(err)
	}

	authFile := t.TempDir() + "/zk-auth"
	if err := writeFile(authFile, "meshfed:s3cret\n"); err != nil {
		t.Fatal(err)
	}
	sink := start(t, testRegistry(t, addr, LayoutCurator, root, nil, func(c *Config) { c.AuthFile = authFile }))
	sink.WaitFor(t, waitTimeout, hasEndpoints(map[string][]string{"orders.zk": {"192.0.2.71 http=8080"}}))

	// Without credentials the root cannot be read: Run fails for good.
	reg := testRegistry(t, addr, LayoutCurator, root, nil)
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	err := reg.Run(ctx, registrytest.NewSink())
	if !registries.IsPermanent(err) || !strings.Contains(err.Error(), "not allowed to read the root") {
		t.Errorf("Run without credentials returned %v, want a permanent 'not allowed' error", err)
	}
	if strings.Contains(fmt.Sprint(err), "s3cret") {
		t.Errorf("error shows the secret: %v", err)
	}
}

func testConformance(t *testing.T, addr string) {
	const root = "/conformance"
	p := client(t, addr, 10*time.Second)
	registerCurator(t, p, root, "orders", "a", curatorData(t, "orders", "a", "192.0.2.81", 8080, 0, nil))
	registerCurator(t, p, root, "orders", "b", curatorData(t, "orders", "b", "192.0.2.82", 8080, 0, nil))
	registrytest.Conformance(t, func(t *testing.T) registries.Registry {
		return testRegistry(t, addr, LayoutCurator, root, nil)
	}, registrytest.Mutation{
		Name: "register an instance",
		Apply: func(t *testing.T) {
			registerCurator(t, p, root, "payments", "x", curatorData(t, "payments", "x", "192.0.2.83", 9090, 0, nil))
		},
		Want: func(s []model.Service) bool {
			return len(endpointsByHost(s)["payments.zk"]) == 1
		},
	}, registrytest.Mutation{
		Name: "deregister an instance",
		Apply: func(t *testing.T) {
			if err := p.Delete(root+"/orders/a", -1); err != nil {
				t.Fatal(err)
			}
		},
		Want: func(s []model.Service) bool {
			return fmt.Sprint(endpointsByHost(s)["orders.zk"]) == "[192.0.2.82 http=8080]"
		},
	})
}

// TestOutage: ZooKeeper stops (Degraded at once, last state kept, nothing
// published), changes are made while the registry cannot see them (its
// session and a provider's expire, an instance is added, one changes),
// and when ZooKeeper is back at its address the registry is Synced and
// current.
func TestOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real ZooKeeper")
	}
	t.Parallel()
	z := servers.StartZooKeeper(t)
	const root = "/services"
	const session = 2 * time.Second
	provider := client(t, z.Addr(), session)
	registerCurator(t, provider, root, "orders", "a", curatorData(t, "orders", "a", "192.0.2.1", 8080, 0, nil))
	registerCurator(t, provider, root, "orders", "b", curatorData(t, "orders", "b", "192.0.2.2", 8080, 0, nil))
	setup := client(t, z.Addr(), 10*time.Second)
	ensure(t, setup, root+"/payments", zk.FlagPersistent, nil)
	if _, err := setup.Create(root+"/payments/p1", curatorData(t, "payments", "p1", "192.0.2.3", 9090, 0, nil), zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	setup.Close()

	reg := testRegistry(t, z.Addr(), LayoutCurator, root, nil, func(c *Config) { c.SessionTimeout = registries.Duration(session) })
	sink := start(t, reg)
	before := map[string][]string{
		"orders.zk":   {"192.0.2.1 http=8080", "192.0.2.2 http=8080"},
		"payments.zk": {"192.0.2.3 http=9090"},
	}
	st := sink.WaitFor(t, waitTimeout, hasEndpoints(before))
	replaces := st.Replaces

	z.Stop()
	stopped := time.Now()
	st = sink.WaitFor(t, waitTimeout, func(s registrytest.State) bool { return s.Failing() })
	t.Logf("Degraded %v after the server stopped: %q", time.Since(stopped), st.Status.Err)
	provider.Close() // cannot reach the server: its session will expire

	// Changes while the registry is away: a second run of the server on
	// another port, same data. The registry's and the provider's sessions
	// expire there (taking orders/a and orders/b), p1 changes, p2 appears.
	aside := z.StartAside()
	c := client(t, aside, 10*time.Second)
	if _, err := c.Set(root+"/payments/p1", curatorData(t, "payments", "p1", "192.0.2.3", 9091, 0, nil), -1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(root+"/payments/p2", curatorData(t, "payments", "p2", "192.0.2.4", 9091, 0, nil), zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		kids, _, err := c.Children(root + "/orders")
		if err != nil {
			t.Fatal(err)
		}
		if len(kids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ephemeral instances %v did not expire", kids)
		}
		time.Sleep(100 * time.Millisecond) // polling the server, bounded by deadline
	}
	c.Close()
	z.Stop()

	st = sink.State(reg.common.Shard())
	if st.Replaces != replaces {
		t.Errorf("%d publishes while ZooKeeper was away; want none", st.Replaces-replaces)
	}
	if !st.Failing() {
		t.Errorf("status while away: %v, want Degraded", st.Status)
	}
	if d := fmt.Sprint(endpointsByHost(st.Services)); d != fmt.Sprint(before) {
		t.Errorf("state while away %s, want the last good one %v", d, before)
	}

	z.Start()
	restarted := time.Now()
	sink.WaitFor(t, waitTimeout, hasEndpoints(map[string][]string{
		"payments.zk": {"192.0.2.3 http=9091", "192.0.2.4 http=9091"},
	}))
	t.Logf("Synced and current %v after the restart", time.Since(restarted))
	if got := testutil.ToFloat64(reg.m.expirations); got < 1 {
		t.Errorf("session expirations = %v, want at least 1", got)
	}
	if got := testutil.ToFloat64(reg.m.resyncs); got < 2 {
		t.Errorf("resyncs = %v, want at least 2", got)
	}
	// Watches were re-armed on the new session: a change is seen.
	c2 := client(t, z.Addr(), 10*time.Second)
	if err := c2.Delete(root+"/payments/p2", -1); err != nil {
		t.Fatal(err)
	}
	st = sink.WaitFor(t, waitTimeout, hasEndpoints(map[string][]string{
		"payments.zk": {"192.0.2.3 http=9091"},
	}))
	c2.Close()

	// A short outage (the session may survive it): Degraded, then Synced
	// again with the same state.
	// The resync finds every service as it was: none is converted again.
	replaces = st.Replaces
	conversions := reg.conversions.Load()
	z.Stop()
	sink.WaitFor(t, waitTimeout, func(s registrytest.State) bool { return s.Failing() })
	z.Start()
	st = sink.WaitFor(t, waitTimeout, func(s registrytest.State) bool { return s.Replaces > replaces })
	if !st.Healthy() || fmt.Sprint(endpointsByHost(st.Services)) != "map[payments.zk:[192.0.2.3 http=9091]]" {
		t.Errorf("after a short outage: %s %v", st, endpointsByHost(st.Services))
	}
	if got := reg.conversions.Load() - conversions; got != 0 {
		t.Errorf("resync of an unchanged tree converted %d services, want 0", got)
	}
	if p := sink.Problems(); len(p) > 0 {
		t.Errorf("sink problems: %v", p)
	}
}

// TestUnreachable: with no server the registry reports Degraded with the
// reason, and stops promptly when asked.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	addr := fmt.Sprintf("127.0.0.1:%d", servers.FreePort(t))
	reg := testRegistry(t, addr, LayoutCurator, "/services", nil)
	sink := start(t, reg)
	st := sink.WaitFor(t, waitTimeout, func(s registrytest.State) bool { return s.Failing() })
	if !strings.Contains(st.Status.Err, "cannot reach ZooKeeper") || st.Synced() {
		t.Errorf("state %s, want Degraded 'cannot reach ZooKeeper' and no publish", st)
	}
}

func writeFile(p, content string) error { return os.WriteFile(p, []byte(content), 0o600) }
