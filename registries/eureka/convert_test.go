package eureka

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hudl/fargo"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

// fixtureWatch returns a watch with no connection, for applying payloads.
func fixtureWatch(t *testing.T, cfg Config) *watch {
	t.Helper()
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r := &Registry{cfg: cfg, common: registries.Common{Name: "legacy", Kind: "eureka", Domain: "eureka"}}
	return newWatch(r, registrytest.NewSink())
}

func readPayload(t *testing.T, name string) *payload {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	p, err := decodePayload(b)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return p
}

func (w *watch) state() ([]model.Service, []model.Rejection) { return w.pub.State() }

func src() model.Source { return model.Source{Registry: "legacy", Cluster: "legacy"} }

// netflixWant is what apps-netflix.{json,xml} hold.
var netflixWant = []model.Service{
	{
		Hostname: "orders.eureka", Resolution: model.ResolutionEDS,
		Ports: []model.Port{{Name: "http", Number: 8080, Protocol: model.ProtocolHTTP}},
		Endpoints: []model.Endpoint{
			{Address: "10.1.1.5", Labels: map[string]string{"management.port": "8081", "version": "1.10"},
				Locality: model.Locality{Region: "us-east-1", Zone: "us-east-1a"}, Health: model.Healthy,
				Weight: 1, Source: src(), Origin: "ip-10-1-1-5.ec2.internal:orders:8080"},
			{Address: "10.1.2.6", Labels: map[string]string{"zone": "dc1-b", "region": "dc1", "version": "1.10"},
				Locality: model.Locality{Region: "dc1", Zone: "dc1-b"}, Health: model.Draining,
				Weight: 1, Source: src(), Origin: "orders-2.dc1.example.com:orders:8080"},
		},
	},
	{
		Hostname: "billing.eureka", Resolution: model.ResolutionEDS,
		Ports: []model.Port{
			{Name: "http", Number: 9090, Protocol: model.ProtocolGRPC},
			{Name: "https", Number: 9443, Protocol: model.ProtocolTCP},
		},
		Endpoints: []model.Endpoint{{Address: "10.1.3.7", Health: model.Unhealthy, Weight: 1, Source: src(), Origin: "billing-1:billing:9090"}},
	},
	{
		Hostname: "legacy.eureka", Resolution: model.ResolutionEDS,
		Ports:     []model.Port{{Name: "http", Number: 7001, Protocol: model.ProtocolHTTP}},
		Endpoints: []model.Endpoint{{Address: "10.1.4.8", Health: model.Healthy, Weight: 1, Source: src(), Origin: "legacy-good"}},
	},
}

var netflixRejected = []model.Rejection{
	{Registry: "legacy", Host: "legacy.eureka", Subject: "legacy-bad-address", Reason: `ipAddr "legacy-bad.dc1.example.com" is not an IP address`},
	{Registry: "legacy", Host: "legacy.eureka", Subject: "legacy-no-port", Reason: "instance has no enabled port (port and securePort are both disabled)"},
}

// TestNetflixFixturesBothFormats: the same registry in Eureka's XML and
// JSON (string @enabled, numeric "$", @class markers, AWS data center
// info) gives the same services; then the same delta in either format
// merges to the state its hashcode names.
func TestNetflixFixturesBothFormats(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		apps, delta string
	}{
		{name: "xml", apps: "apps-netflix.xml", delta: "delta-netflix.xml"},
		{name: "json", apps: "apps-netflix.json", delta: "delta-netflix.json"},
		{name: "json apps, xml delta", apps: "apps-netflix.json", delta: "delta-netflix.xml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := fixtureWatch(t, Config{})
			p := readPayload(t, tc.apps)
			if !w.applyFull(p) {
				t.Error("applyFull on an empty state reported no change")
			}
			if got := hashcode(w.apps); got != p.hashcode || got != "DOWN_1_OUT_OF_SERVICE_1_UP_4_" {
				t.Errorf("hashcode = %q, server's %q", got, p.hashcode)
			}
			services, rejected := w.state()
			registrytest.AssertServices(t, services, netflixWant)
			if d := registrytest.DiffRejections(netflixRejected, rejected); d != "" {
				t.Errorf("rejections (-want +got):\n%s", d)
			}
			for _, err := range registrytest.CheckServices(model.ShardKey{Kind: "eureka", Name: "legacy"}, services) {
				t.Error(err)
			}

			d := readPayload(t, tc.delta)
			touched := w.applyDelta(d)
			if got := hashcode(w.apps); got != d.hashcode || w.hashcode() != got {
				t.Fatalf("hashcode after delta = %q (kept counts: %q), server's %q", got, w.hashcode(), d.hashcode)
			}
			for key := range touched {
				w.reconvert(key)
			}
			services, rejected = w.state()
			orders, _ := registrytest.Find(services, "orders.eureka")
			var got []string
			for _, e := range orders.Endpoints {
				got = append(got, e.Address+"/"+e.Health.String())
			}
			if want := "10.1.1.5/HEALTHY 10.1.2.6/HEALTHY 10.1.2.7/HEALTHY"; strings.Join(got, " ") != want {
				t.Errorf("orders after delta = %v, want %s", got, want)
			}
			if len(rejected) != 0 {
				t.Errorf("rejections after the delta deleted the bad instances: %v", rejected)
			}
		})
	}
}

// TestPolarisFixtureBooleanEnabled: Polaris writes @enabled as a JSON
// boolean (fargo's decoder fails on it).
func TestPolarisFixtureBooleanEnabled(t *testing.T) {
	t.Parallel()
	w := fixtureWatch(t, Config{})
	w.applyFull(readPayload(t, "apps-polaris.json"))
	services, rejected := w.state()
	want := []model.Service{{
		Hostname: "orders.eureka", Resolution: model.ResolutionEDS,
		Ports: []model.Port{{Name: "http", Number: 8080, Protocol: model.ProtocolHTTP}},
		Endpoints: []model.Endpoint{{Address: "127.0.0.1", Health: model.Healthy, Weight: 1, Source: src(), Origin: "orders-1",
			Labels:   map[string]string{"campus": "", "protocol": "HTTP", "region": "", "version": "1.1", "zone": "zone-a"},
			Locality: model.Locality{Zone: "zone-a"}}},
	}}
	registrytest.AssertServices(t, services, want)
	if len(rejected) != 0 {
		t.Errorf("rejected %v", rejected)
	}
}

// TestSingleElementFixture: Eureka's older JSON codec writes a list of one
// as the element itself, and "$" as a string.
func TestSingleElementFixture(t *testing.T) {
	t.Parallel()
	p := readPayload(t, "apps-single-element.json")
	if len(p.apps) != 1 || len(p.apps[0].instances) != 1 {
		t.Fatalf("decoded %+v, want one app with one instance", p.apps)
	}
	if in := p.apps[0].instances[0]; in.id() != "qa16gs.qa.example.com" || in.Port != 7100 || !in.PortEnabled ||
		in.SecurePort != 7443 || in.SecurePortEnabled || in.rareOf().problem != "" {
		t.Errorf("instance %+v", in)
	}
	w := fixtureWatch(t, Config{})
	w.applyFull(p)
	services, rejected := w.state()
	if len(rejected) != 1 || !strings.Contains(rejected[0].Reason, "not a DNS label") {
		t.Errorf("app TESTENG.LSM should be rejected as a hostname; got services %v rejections %v", services, rejected)
	}
}

func TestDecodeEnabledAndPortVariants(t *testing.T) {
	t.Parallel()
	inst := func(port string) string {
		return `{"applications":{"apps__hashcode":"UP_1_","application":[{"name":"A","instance":[` +
			`{"instanceId":"a-1","app":"A","ipAddr":"10.0.0.1","status":"UP","port":` + port +
			`,"securePort":{"$":443,"@enabled":"false"}}]}]}}`
	}
	for _, tc := range []struct {
		name        string
		body        string
		wantPort    int32
		wantEnabled bool
		wantProblem string
	}{
		{name: "string enabled, number port", body: inst(`{"$":8080,"@enabled":"true"}`), wantPort: 8080, wantEnabled: true},
		{name: "boolean enabled", body: inst(`{"$":8080,"@enabled":true}`), wantPort: 8080, wantEnabled: true},
		{name: "boolean disabled", body: inst(`{"$":8080,"@enabled":false}`), wantPort: 8080},
		{name: "string port", body: inst(`{"$":"8080","@enabled":"true"}`), wantPort: 8080, wantEnabled: true},
		{name: "bad port", body: inst(`{"$":"80a","@enabled":"true"}`), wantEnabled: true, wantProblem: `port: "80a" is not a port number`},
		{name: "bad enabled", body: inst(`{"$":8080,"@enabled":"yes"}`), wantPort: 8080},
		{name: "xml", body: `<applications><apps__hashcode>UP_1_</apps__hashcode><application><name>A</name><instance>` +
			`<instanceId>a-1</instanceId><ipAddr>10.0.0.1</ipAddr><status>UP</status><port enabled="true">8080</port>` +
			`</instance></application></applications>`, wantPort: 8080, wantEnabled: true},
		{name: "xml bad port", body: `<applications><application><name>A</name><instance>` +
			`<instanceId>a-1</instanceId><port enabled="true">x</port></instance></application></applications>`,
			wantEnabled: true, wantProblem: `port: "x" is not a port number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := decodePayload([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			in := p.apps[0].instances[0]
			if in.Port != tc.wantPort || in.PortEnabled != tc.wantEnabled || in.rareOf().problem != tc.wantProblem {
				t.Errorf("port %d enabled %v problem %q, want %d %v %q", in.Port, in.PortEnabled, in.rareOf().problem,
					tc.wantPort, tc.wantEnabled, tc.wantProblem)
			}
		})
	}
}

// TestMalformedInstanceIsolated: an instance that does not decode is
// rejected alone and still counts in the hashcode.
func TestMalformedInstanceIsolated(t *testing.T) {
	t.Parallel()
	body := `{"applications":{"apps__hashcode":"UP_2_","application":[{"name":"A","instance":[
		{"instanceId":"a-1","app":"A","ipAddr":"10.0.0.1","status":"UP","port":{"$":80,"@enabled":"true"}},
		{"instanceId":"a-2","app":"A","ipAddr":"10.0.0.2","status":"UP","countryId":"one","port":{"$":80,"@enabled":"true"}}]}]}}`
	p, err := decodePayload([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	w := fixtureWatch(t, Config{})
	w.applyFull(p)
	if got := hashcode(w.apps); got != "UP_2_" {
		t.Errorf("hashcode %q, want UP_2_", got)
	}
	services, rejected := w.state()
	if len(services) != 1 || len(services[0].Endpoints) != 1 || len(rejected) != 1 || rejected[0].Subject != "a-2" ||
		!strings.Contains(rejected[0].Reason, "does not decode") {
		t.Errorf("services %v rejected %v", services, rejected)
	}
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, body, want string }{
		{name: "empty", body: "", want: "empty answer"},
		{name: "html", body: "Service Unavailable", want: "neither JSON nor XML"},
		{name: "bad json", body: `{"applications":`, want: "decode JSON"},
		{name: "no applications", body: `{"other":{}}`, want: "no \"applications\""},
		{name: "bad xml", body: `<applications><application>`, want: "decode XML"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := decodePayload([]byte(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestHashcode(t *testing.T) {
	t.Parallel()
	mk := func(statuses ...string) map[string]appInstances {
		apps := map[string]appInstances{"A": {}, "B": {}}
		for i, s := range statuses {
			in := &instance{InstanceId: string(rune('a' + i))}
			in.Status = fargoStatus(s)
			key := []string{"A", "B"}[i%2]
			apps[key] = append(apps[key], in)
		}
		return apps
	}
	for _, tc := range []struct {
		statuses []string
		want     string
	}{
		{statuses: nil, want: ""},
		{statuses: []string{"UP"}, want: "UP_1_"},
		{statuses: []string{"UP", "DOWN", "UP", "UP"}, want: "DOWN_1_UP_3_"},
		{statuses: []string{"UP", "OUT_OF_SERVICE", "STARTING"}, want: "OUT_OF_SERVICE_1_STARTING_1_UP_1_"},
	} {
		if got := hashcode(mk(tc.statuses...)); got != tc.want {
			t.Errorf("hashcode(%v) = %q, want %q", tc.statuses, got, tc.want)
		}
	}
}

func TestConvertRules(t *testing.T) {
	t.Parallel()
	mk := func(id, ip, host string, port, secure int, status string, meta string) *instance {
		in := &instance{}
		in.InstanceId, in.IPAddr, in.HostName, in.Status = id, ip, host, fargoStatus(status)
		in.Port, in.PortEnabled = int32(port), port != 0
		in.SecurePort, in.SecurePortEnabled = int32(secure), secure != 0
		in.Metadata = meta
		return in
	}
	common := registries.Common{Name: "legacy", Kind: "eureka", Domain: "eureka", Locality: model.Locality{Region: "def"}}
	for _, tc := range []struct {
		name         string
		cfg          Config
		app          string
		insts        []*instance
		wantPorts    string
		wantEps      string // address[:override]/health per endpoint
		wantRejected string
		wantRes      model.Resolution
	}{
		{
			name:      "status mapping and port majority",
			app:       "SVC",
			insts:     []*instance{mk("a", "10.0.0.1", "", 80, 0, "UP", ""), mk("b", "10.0.0.2", "", 80, 0, "STARTING", ""), mk("c", "10.0.0.3", "", 81, 0, "UNKNOWN", ""), mk("d", "10.0.0.4", "", 80, 0, "OUT_OF_SERVICE", "")},
			wantPorts: "http:80:HTTP",
			wantEps:   "10.0.0.1/HEALTHY 10.0.0.2/UNHEALTHY 10.0.0.3:http=81/UNHEALTHY 10.0.0.4/DRAINING",
		},
		{
			name:      "config protocol, metadata protocol wins by majority",
			cfg:       Config{Protocol: model.ProtocolHTTP2},
			app:       "SVC",
			insts:     []*instance{mk("a", "10.0.0.1", "", 80, 0, "UP", "<meshfed.protocol>grpc</meshfed.protocol>"), mk("b", "10.0.0.2", "", 80, 0, "UP", "")},
			wantPorts: "http:80:GRPC",
			wantEps:   "10.0.0.1/HEALTHY 10.0.0.2/HEALTHY",
		},
		{
			name:      "config protocol",
			cfg:       Config{Protocol: model.ProtocolTCP},
			app:       "SVC",
			insts:     []*instance{mk("a", "10.0.0.1", "", 80, 0, "UP", "")},
			wantPorts: "http:80:TCP",
			wantEps:   "10.0.0.1/HEALTHY",
		},
		{
			name:      "each port is served by the instances that enable it",
			app:       "SVC",
			insts:     []*instance{mk("a", "10.0.0.1", "", 0, 443, "UP", ""), mk("b", "10.0.0.2", "", 0, 443, "UP", ""), mk("c", "10.0.0.3", "", 80, 0, "UP", "")},
			wantPorts: "http:80:HTTP https:443:TCP",
			wantEps:   "10.0.0.1:http=0/HEALTHY 10.0.0.2:http=0/HEALTHY 10.0.0.3:https=0/HEALTHY",
		},
		{
			name:      "securePort on the app's port number: the next most given number",
			app:       "SVC",
			insts:     []*instance{mk("a", "10.0.0.1", "", 80, 80, "UP", ""), mk("b", "10.0.0.2", "", 80, 8443, "UP", "")},
			wantPorts: "http:80:HTTP https:8443:TCP",
			wantEps:   "10.0.0.1:https=80/HEALTHY 10.0.0.2/HEALTHY",
		},
		{
			name:         "only a securePort, on the app's port number: rejected",
			app:          "SVC",
			insts:        []*instance{mk("a", "10.0.0.1", "", 80, 0, "UP", ""), mk("c", "10.0.0.3", "", 0, 80, "UP", "")},
			wantPorts:    "http:80:HTTP",
			wantEps:      "10.0.0.1/HEALTHY",
			wantRejected: "c: instance enables only securePort 80, the number of the app's port",
		},

		{
			name:      "same number for port and securePort keeps one port",
			app:       "SVC",
			insts:     []*instance{mk("a", "10.0.0.1", "", 7100, 7100, "UP", "")},
			wantPorts: "http:7100:HTTP",
			wantEps:   "10.0.0.1/HEALTHY",
		},
		{
			name:         "bad port number",
			app:          "SVC",
			insts:        []*instance{mk("a", "10.0.0.1", "", 70000, 0, "UP", ""), mk("b", "10.0.0.2", "", 80, 0, "UP", "")},
			wantPorts:    "http:80:HTTP",
			wantEps:      "10.0.0.2/HEALTHY",
			wantRejected: "a: port 70000 is out of range 1-65535",
		},
		{
			name:         "useHostName: DNS resolution, bad names rejected",
			cfg:          Config{UseHostName: true},
			app:          "SVC",
			insts:        []*instance{mk("a", "10.0.0.1", "a.example.com", 80, 0, "UP", ""), mk("b", "10.0.0.2", "b_bad!", 80, 0, "UP", "")},
			wantPorts:    "http:80:HTTP",
			wantEps:      "a.example.com/HEALTHY",
			wantRejected: `b: hostName "b_bad!" is neither an IP address nor a DNS name`,
			wantRes:      model.ResolutionDNS,
		},
		{
			name:         "bad metadata",
			app:          "SVC",
			insts:        []*instance{mk("a", "10.0.0.1", "", 80, 0, "UP", "<x>"), mk("b", "10.0.0.2", "", 80, 0, "UP", "<k>v</k>")},
			wantPorts:    "http:80:HTTP",
			wantEps:      "10.0.0.2/HEALTHY",
			wantRejected: "a: metadata is not XML: XML syntax error on line 1: element <x> closed by </m>",
		},
		{
			name:         "app name not a DNS label",
			app:          "MY_APP",
			insts:        []*instance{mk("a", "10.0.0.1", "", 80, 0, "UP", "")},
			wantRejected: "app MY_APP: app name is not a DNS label once lowercased, so it cannot be a hostname",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := tc.cfg
			cfg.ApplyDefaults()
			c := convertApp(common, &cfg, tc.app, tc.insts, nil)
			var ports, eps, rej []string
			for _, p := range c.Service().Ports {
				ports = append(ports, p.Name+":"+itoa(p.Number)+":"+string(p.Protocol))
			}
			for _, e := range c.Service().Endpoints {
				s := e.Address
				for _, k := range slices.Sorted(maps.Keys(e.Ports)) {
					s += ":" + k + "=" + itoa(e.Ports[k])
				}
				eps = append(eps, s+"/"+e.Health.String())
			}
			for _, r := range c.Rejected {
				rej = append(rej, r.Subject+": "+r.Reason)
			}
			if got := strings.Join(ports, " "); got != tc.wantPorts {
				t.Errorf("ports %q, want %q", got, tc.wantPorts)
			}
			if got := strings.Join(eps, " "); got != tc.wantEps {
				t.Errorf("endpoints %q, want %q", got, tc.wantEps)
			}
			if got := strings.Join(rej, "; "); got != tc.wantRejected {
				t.Errorf("rejected %q, want %q", got, tc.wantRejected)
			}
			if c.OK() && c.Service().Resolution != tc.wantRes {
				t.Errorf("resolution %v, want %v", c.Service().Resolution, tc.wantRes)
			}
			if c.OK() {
				for _, e := range c.Service().Endpoints {
					if e.Locality.Region != "def" {
						t.Errorf("endpoint %s locality %v, want the registry default", e.Address, e.Locality)
					}
				}
			}
		})
	}
}

func TestParseMetadata(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, raw, want string }{
		{name: "xml keeps strings", raw: "<version>1.10</version><flag>true</flag><empty/>", want: "empty= flag=true version=1.10"},
		{name: "json scalars", raw: `{"@class":"java.util.HashMap","version":"1.10","n":1.50,"b":true,"nil":null,"obj":{}}`, want: "b=true n=1.50 version=1.10"},
		{name: "jackson empty map", raw: `{"@class":"java.util.Collections$EmptyMap"}`, want: ""},
		{name: "none", raw: "", want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := parseMetadata([]byte(tc.raw))
			if err != nil {
				t.Fatal(err)
			}
			var kv []string
			for k, v := range m {
				kv = append(kv, k+"="+v)
			}
			sortStrings(kv)
			if got := strings.Join(kv, " "); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func fargoStatus(s string) fargo.StatusType { return fargo.StatusType(s) }

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

func sortStrings(s []string) { slices.Sort(s) }
