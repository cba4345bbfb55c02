package zookeeper

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/validate"
)

// fakeAddress serves IP literals and resolves *.example.test names listed
// in hosts.
func fakeAddress(hosts map[string]string) addressFunc {
	return func(h string) (string, error) {
		if ip, ok := parseIP(h); ok {
			return ip, nil
		}
		if !validate.Resolvable(h) {
			return "", fmt.Errorf("address %q is neither an IP address nor a hostname", h)
		}
		if ip, ok := hosts[h]; ok {
			return ip, nil
		}
		return "", fmt.Errorf("address %q does not resolve: no such host", h)
	}
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseCurator(t *testing.T) {
	t.Parallel()
	addr := fakeAddress(map[string]string{"orders-1.example.test": "192.0.2.99"})
	tests := []struct {
		file      string
		wantEP    model.Endpoint
		wantPorts []model.Port
		wantBad   string
	}{
		{
			file: "curator-spring-instance.json",
			wantEP: model.Endpoint{Address: "192.0.2.10", Ports: map[string]uint32{"http": 8080},
				Labels: map[string]string{"instance_status": "UP", "version": "v1", "zone": "us-east-1a"}},
			wantPorts: []model.Port{{Name: "http", Number: 8080, Protocol: model.ProtocolHTTP}},
		},
		{
			file: "curator-dubbo3-instance.json",
			wantEP: model.Endpoint{Address: "192.0.2.20", Ports: map[string]uint32{"http": 20880},
				Labels: map[string]string{
					"dubbo.endpoints":             `[{"port":20880,"protocol":"dubbo"}]`,
					"dubbo.metadata.revision":     "a662fd2213a8a49dc6ff43a4c2ae7b34",
					"dubbo.metadata.storage-type": "local",
					"timestamp":                   "1732233600000",
				}},
			wantPorts: []model.Port{{Name: "http", Number: 20880, Protocol: model.ProtocolHTTP}},
		},
		{
			file:   "curator-both-ports.json",
			wantEP: model.Endpoint{Address: "192.0.2.30", Ports: map[string]uint32{"http": 8080, "https": 8443}},
			wantPorts: []model.Port{
				{Name: "http", Number: 8080, Protocol: model.ProtocolHTTP},
				{Name: "https", Number: 8443, Protocol: model.ProtocolTCP},
			},
		},
		{
			file:      "curator-ssl-only.json",
			wantEP:    model.Endpoint{Address: "192.0.2.31", Ports: map[string]uint32{"https": 8443}},
			wantPorts: []model.Port{{Name: "https", Number: 8443, Protocol: model.ProtocolTCP}},
		},
		{
			file: "curator-out-of-service.json",
			wantEP: model.Endpoint{Address: "192.0.2.11", Ports: map[string]uint32{"http": 8080},
				Labels: map[string]string{"instance_status": "OUT_OF_SERVICE"}, Health: model.Draining},
			wantPorts: []model.Port{{Name: "http", Number: 8080, Protocol: model.ProtocolHTTP}},
		},
		{
			file:      "curator-disabled.json",
			wantEP:    model.Endpoint{Address: "192.0.2.12", Ports: map[string]uint32{"http": 8080}, Health: model.Unhealthy},
			wantPorts: []model.Port{{Name: "http", Number: 8080, Protocol: model.ProtocolHTTP}},
		},
		{
			file:      "curator-hostname.json",
			wantEP:    model.Endpoint{Address: "192.0.2.99", Ports: map[string]uint32{"http": 8080}},
			wantPorts: []model.Port{{Name: "http", Number: 8080, Protocol: model.ProtocolHTTP}},
		},
		{file: "bad-malformed.json", wantBad: "malformed Curator instance JSON: unexpected end of JSON input (at byte 62)"},
		{file: "bad-no-port.json", wantBad: "instance has neither port nor sslPort"},
		{file: "bad-port-type.json", wantBad: `malformed Curator instance JSON: field "port": string is not a int64`},
		{file: "bad-port-range.json", wantBad: "port 70000 is not a port number"},
		{file: "bad-no-address.json", wantBad: "instance has no address"},
		{file: "bad-address.json", wantBad: `address "not a host!" is neither an IP address nor a hostname`},
		{file: "bad-unresolvable.json", wantBad: `address "gone.example.test" does not resolve: no such host`},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			path := "/services/orders/" + tt.file
			got := parseCurator(path, readTestdata(t, tt.file), addr)
			if got.bad != tt.wantBad {
				t.Fatalf("quarantine reason %q, want %q", got.bad, tt.wantBad)
			}
			if tt.wantBad != "" {
				return
			}
			tt.wantEP.Origin = path
			got.ep.Ports = portNumbers(got.ports)
			if d := cmp.Diff(tt.wantEP, got.ep); d != "" {
				t.Errorf("endpoint (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.wantPorts, got.ports); d != "" {
				t.Errorf("ports (-want +got):\n%s", d)
			}
		})
	}
}

// javaURLEncode encodes like java.net.URLEncoder.encode(s, "UTF-8"), which
// Dubbo's URL.encode uses for provider node names.
func javaURLEncode(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '-', c == '*', c == '_':
			b.WriteByte(c)
		case c == ' ':
			b.WriteByte('+')
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func TestParseDubbo(t *testing.T) {
	t.Parallel()
	addr := fakeAddress(map[string]string{"provider.example.test": "192.0.2.77"})
	tests := []struct {
		name    string
		url     string // the provider URL; the node name is its Java URL encoding
		node    string // a raw node name instead of url
		wantEP  model.Endpoint
		wantPt  model.Port
		wantBad string
	}{
		{
			name: "dubbo protocol, version and group",
			url:  "dubbo://192.0.2.5:20880/com.foo.DemoService?anyhost=true&application=demo-provider&deprecated=false&dubbo=2.0.2&dynamic=true&generic=false&group=g1&interface=com.foo.DemoService&methods=sayHello,sayHelloAsync&pid=4242&release=3.2.0&side=provider&timestamp=1732233600000&version=1.0.0",
			wantEP: model.Endpoint{Address: "192.0.2.5", Ports: map[string]uint32{"dubbo": 20880}, Labels: map[string]string{
				"anyhost": "true", "application": "demo-provider", "deprecated": "false", "dubbo": "2.0.2", "dynamic": "true",
				"generic": "false", "group": "g1", "interface": "com.foo.DemoService", "methods": "sayHello,sayHelloAsync",
				"release": "3.2.0", "side": "provider", "version": "1.0.0",
			}},
			wantPt: model.Port{Name: "dubbo", Number: 20880, Protocol: model.ProtocolTCP},
		},
		{
			name:   "triple is gRPC, weight kept",
			url:    "tri://192.0.2.6:50051/com.foo.DemoService?interface=com.foo.DemoService&weight=50&side=provider",
			wantEP: model.Endpoint{Address: "192.0.2.6", Ports: map[string]uint32{"tri": 50051}, Weight: 50, Labels: map[string]string{"interface": "com.foo.DemoService", "weight": "50", "side": "provider"}},
			wantPt: model.Port{Name: "tri", Number: 50051, Protocol: model.ProtocolGRPC},
		},
		{
			name:   "disabled provider",
			url:    "dubbo://192.0.2.7:20880/com.foo.DemoService?enabled=false",
			wantEP: model.Endpoint{Address: "192.0.2.7", Ports: map[string]uint32{"dubbo": 20880}, Health: model.Unhealthy, Labels: map[string]string{"enabled": "false"}},
			wantPt: model.Port{Name: "dubbo", Number: 20880, Protocol: model.ProtocolTCP},
		},
		{
			name:   "IPv6 and hostname resolution",
			url:    "rest://provider.example.test:8080/com.foo.DemoService",
			wantEP: model.Endpoint{Address: "192.0.2.77", Ports: map[string]uint32{"rest": 8080}},
			wantPt: model.Port{Name: "rest", Number: 8080, Protocol: model.ProtocolHTTP},
		},
		{
			name:   "IPv6 literal",
			url:    "dubbo://[2001:db8::1]:20880/com.foo.DemoService",
			wantEP: model.Endpoint{Address: "2001:db8::1", Ports: map[string]uint32{"dubbo": 20880}},
			wantPt: model.Port{Name: "dubbo", Number: 20880, Protocol: model.ProtocolTCP},
		},
		{name: "missing port", url: "dubbo://192.0.2.8/com.foo.DemoService?version=1", wantBad: `provider URL "dubbo://192.0.2.8/com.foo.DemoService?version=1" has no port`},
		{name: "bad port", url: "dubbo://192.0.2.8:0/com.foo.DemoService", wantBad: `provider URL "dubbo://192.0.2.8:0/com.foo.DemoService": "0" is not a port number`},
		{name: "does not parse", url: "dubbo://[192.0.2.8:20880/x", wantBad: `provider URL does not parse: missing ']' in host`},
		{name: "two ports", url: "dubbo://192.0.2.8:20880:99/x", wantBad: `address "192.0.2.8:20880" is neither an IP address nor a hostname`},
		{name: "not a URL", url: "just-a-name", wantBad: `provider URL "just-a-name" has no protocol://host`},
		{name: "bad encoding", node: "dubbo%3A%2F%2F192.0.2.8%3A2088%ZZ", wantBad: `provider node name is not URL-encoded: invalid URL escape "%ZZ"`},
		{name: "unresolvable host", url: "dubbo://gone.example.test:20880/x", wantBad: `address "gone.example.test" does not resolve: no such host`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			node := tt.node
			if node == "" {
				node = javaURLEncode(tt.url)
			}
			path := "/dubbo/com.foo.DemoService/providers/" + node
			got := parseDubbo(path, node, addr)
			if got.bad != tt.wantBad {
				t.Fatalf("quarantine reason %q, want %q", got.bad, tt.wantBad)
			}
			if tt.wantBad != "" {
				return
			}
			tt.wantEP.Origin = path
			got.ep.Ports = portNumbers(got.ports)
			if d := cmp.Diff(tt.wantEP, got.ep); d != "" {
				t.Errorf("endpoint (-want +got):\n%s", d)
			}
			if d := cmp.Diff([]model.Port{tt.wantPt}, got.ports); d != "" {
				t.Errorf("ports (-want +got):\n%s", d)
			}
		})
	}
}

func TestJavaURLEncodeRoundTrip(t *testing.T) {
	t.Parallel()
	in := "dubbo://192.0.2.5:20880/com.foo.DemoService?methods=a,b&x=hello world~*"
	got, err := url.QueryUnescape(javaURLEncode(in))
	if err != nil || got != in {
		t.Errorf("round trip: %q, %v", got, err)
	}
}

func TestHostnames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		layout  Layout
		key     string
		want    string
		wantErr string
	}{
		{name: "curator lowercased", layout: LayoutCurator, key: "Orders-API", want: "orders-api.zk"},
		{name: "curator underscore", layout: LayoutCurator, key: "orders_api", wantErr: `service name "orders_api" is not a DNS label`},
		{name: "curator dot", layout: LayoutCurator, key: "com.orders", wantErr: "not a DNS label"},
		{name: "curator too long", layout: LayoutCurator, key: strings.Repeat("a", 64), wantErr: "not a DNS label"},
		{name: "dubbo reversed", layout: LayoutDubbo, key: "com.foo.DemoService", want: "demoservice.foo.com.zk"},
		{name: "dubbo inner class and underscore", layout: LayoutDubbo, key: "org.acme_corp.Outer$Inner", want: "outer-inner.acme-corp.org.zk"},
		{name: "dubbo single part", layout: LayoutDubbo, key: "Greeter", want: "greeter.zk"},
		{name: "dubbo empty part", layout: LayoutDubbo, key: "com..Foo", wantErr: `part "" does not make a DNS label`},
		{name: "dubbo only symbols", layout: LayoutDubbo, key: "com.$$.Foo", wantErr: `part "$$" does not make a DNS label`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got string
			var err error
			if tt.layout == LayoutDubbo {
				got, err = dubboHostname(tt.key, "zk")
			} else {
				got, err = curatorHostname(tt.key, "zk")
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %q, %v; want error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// portNumbers is an instance's ports as an endpoint names them.
func portNumbers(ports []model.Port) map[string]uint32 {
	m := map[string]uint32{}
	for _, p := range ports {
		m[p.Name] = p.Number
	}
	return m
}

func good(path, addr string, ports map[string]uint32, protos map[string]model.Protocol) *instance {
	in := &instance{path: path, ep: model.Endpoint{Address: addr, Ports: ports, Origin: path}}
	for n, p := range ports {
		in.ports = append(in.ports, model.Port{Name: n, Number: p, Protocol: protos[n]})
	}
	return in
}

func TestBuild(t *testing.T) {
	t.Parallel()
	common := registries.Common{Name: "zk", Kind: "zookeeper", Domain: "zk", Locality: model.Locality{Region: "r1"}}
	src := model.Source{Registry: "zk", Cluster: "zk"}
	http := map[string]model.Protocol{"http": model.ProtocolHTTP, "https": model.ProtocolTCP}
	tree := map[string]*serviceNode{
		"billing": {key: "billing", path: "/services/billing", instances: map[string]*instance{
			"a":   good("/services/billing/a", "192.0.2.1", map[string]uint32{"http": 8080}, http),
			"b":   good("/services/billing/b", "192.0.2.2", map[string]uint32{"http": 9090}, http),
			"c":   good("/services/billing/c", "192.0.2.3", map[string]uint32{"http": 9090, "https": 9090}, http),
			"bad": {path: "/services/billing/bad", bad: "instance has neither port nor sslPort"},
		}},
		// Both map to orders.zk: the first by znode path wins.
		"Orders": {key: "Orders", path: "/services/Orders", instances: map[string]*instance{
			"x": good("/services/Orders/x", "192.0.2.9", map[string]uint32{"http": 80}, http),
		}},
		"orders": {key: "orders", path: "/services/orders", instances: map[string]*instance{
			"z": good("/services/orders/z", "192.0.2.10", map[string]uint32{"http": 80}, http),
		}},
		"bad_name": {key: "bad_name", path: "/services/bad_name", instances: map[string]*instance{
			"y": good("/services/bad_name/y", "192.0.2.8", map[string]uint32{"http": 80}, http),
		}},
		"denied": {key: "denied", path: "/services/denied", bad: "not allowed to read the service (ACL)"},
		"empty":  {key: "empty", path: "/services/empty", instances: map[string]*instance{}},
	}
	services, rejected, quarantined := build(common, LayoutCurator, tree)
	wantServices := []model.Service{{
		Hostname: "billing.zk",
		// http: 9090 is the most common; https wants 9090 too, which is
		// taken, and has no other number: it is dropped.
		Ports: []model.Port{{Name: "http", Number: 9090, Protocol: model.ProtocolHTTP}},
		Endpoints: []model.Endpoint{
			{Address: "192.0.2.1", Ports: map[string]uint32{"http": 8080}, Origin: "/services/billing/a", Source: src, Locality: common.Locality},
			// On the service port: no Ports of their own.
			{Address: "192.0.2.2", Origin: "/services/billing/b", Source: src, Locality: common.Locality},
			{Address: "192.0.2.3", Origin: "/services/billing/c", Source: src, Locality: common.Locality},
		},
	}, {
		Hostname: "orders.zk",
		Ports:    []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}},
		Endpoints: []model.Endpoint{
			{Address: "192.0.2.9", Origin: "/services/Orders/x", Source: src, Locality: common.Locality},
		},
	}}
	// Services rejected whole first (by path), then by hostname.
	wantRejected := []model.Rejection{
		{Registry: "zk", Subject: "/services/bad_name", Reason: `service name "bad_name" is not a DNS label (letters, digits and '-', at most 63)`},
		{Registry: "zk", Subject: "/services/denied", Reason: "not allowed to read the service (ACL)"},
		{Registry: "zk", Host: "billing.zk", Subject: "/services/billing/bad", Reason: "instance has neither port nor sslPort"},
		{Registry: "zk", Host: "billing.zk", Subject: "port https", Reason: "every number its instances use is the service port of another port name"},
		{Registry: "zk", Subject: "/services/orders", Reason: `maps to orders.zk like "Orders", which has it`},
	}
	if d := cmp.Diff(wantServices, services); d != "" {
		t.Errorf("services (-want +got):\n%s", d)
	}
	if d := cmp.Diff(wantRejected, rejected); d != "" {
		t.Errorf("rejected (-want +got):\n%s", d)
	}
	// billing/bad, bad_name/y, orders/z
	if quarantined != 3 {
		t.Errorf("quarantined = %d, want 3", quarantined)
	}
	if services == nil {
		t.Error("services is nil; want an empty slice for none")
	}
}

func TestBuildEmpty(t *testing.T) {
	t.Parallel()
	services, rejected, q := build(registries.Common{Name: "zk", Domain: "zk"}, LayoutDubbo, map[string]*serviceNode{})
	if services == nil || len(services) != 0 || rejected != nil || q != 0 {
		t.Errorf("got %v %v %d; want an empty non-nil list", services, rejected, q)
	}
}

func TestLookupErr(t *testing.T) {
	t.Parallel()
	if got := lookupErr(errors.New("boom")); got != "boom" {
		t.Errorf("got %q", got)
	}
}

// TestConvert: Convert reads services as a Run reads them from the tree
// (paths under the root, Dubbo interfaces URL-decoded), serves IP literals
// as they are, looks hostnames up with resolve, and quarantines (and
// counts) an instance whose hostname does not resolve.
func TestConvert(t *testing.T) {
	t.Parallel()
	c := registries.Common{Name: "zk", Kind: "zookeeper", Domain: "zk"}
	resolve := func(h string) (string, error) {
		if h == "billing-2.example.test" {
			return "::ffff:192.0.2.31", nil
		}
		return "", errors.New("no such host")
	}
	curator := Config{}
	curator.ApplyDefaults()
	services, rejected, quarantined := Convert(c, curator, []ServiceZnodes{{Child: "billing", Instances: map[string][]byte{
		"b1": []byte(`{"name":"billing","address":"192.0.2.30","port":8080}`),
		"b2": []byte(`{"name":"billing","address":"billing-2.example.test","port":8080}`),
		"b3": []byte(`{"name":"billing","address":"gone.example.test","port":8080}`),
	}}}, resolve)
	var addrs []string
	for _, s := range services {
		for _, e := range s.Endpoints {
			addrs = append(addrs, s.Hostname+" "+e.Address+" "+e.Origin)
		}
	}
	if d := cmp.Diff([]string{"billing.zk 192.0.2.30 /services/billing/b1", "billing.zk 192.0.2.31 /services/billing/b2"}, addrs); d != "" {
		t.Errorf("curator endpoints (-want +got):\n%s", d)
	}
	if quarantined != 1 || len(rejected) != 1 || rejected[0].Subject != "/services/billing/b3" ||
		!strings.Contains(rejected[0].Reason, `address "gone.example.test" does not resolve: no such host`) {
		t.Errorf("curator: quarantined %d, rejected %v; want b3, not resolved", quarantined, rejected)
	}

	if _, rejected, quarantined := Convert(c, curator, []ServiceZnodes{{Child: "billing", Instances: map[string][]byte{
		"b2": []byte(`{"name":"billing","address":"billing-2.example.test","port":8080}`),
	}}}, nil); quarantined != 1 || len(rejected) != 1 {
		t.Errorf("nil resolve: quarantined %d, rejected %v; want the hostname instance quarantined", quarantined, rejected)
	}

	dubbo := Config{Layout: LayoutDubbo}
	dubbo.ApplyDefaults()
	node := url.QueryEscape("dubbo://192.0.2.40:20880/com.foo.DemoService?side=provider")
	services, rejected, quarantined = Convert(c, dubbo, []ServiceZnodes{{Child: url.QueryEscape("com.foo.DemoService"), Instances: map[string][]byte{node: nil}}}, nil)
	if len(services) != 1 || len(services[0].Endpoints) != 1 || len(rejected) != 0 || quarantined != 0 {
		t.Fatalf("dubbo: services %v, rejected %v, quarantined %d", services, rejected, quarantined)
	}
	if e := services[0].Endpoints[0]; e.Address != "192.0.2.40" || e.Origin != "/dubbo/com.foo.DemoService/providers/"+node {
		t.Errorf("dubbo endpoint %+v", e)
	}
}

// TestClaimsOneByOne changes a tree one service at a time, as a Run's
// watch events do, and checks after each change that the claims hand the
// Publisher the state build makes of the whole tree, touching only the
// services of the hostnames the change concerns.
func TestClaimsOneByOne(t *testing.T) {
	t.Parallel()
	common := registries.Common{Name: "zk", Kind: "zookeeper", Domain: "zk"}
	http := map[string]model.Protocol{"http": model.ProtocolHTTP}
	node := func(child string, addrs ...string) *serviceNode {
		sn := &serviceNode{key: child, path: "/services/" + child, instances: map[string]*instance{}}
		for i, a := range addrs {
			id := fmt.Sprint(i)
			sn.instances[id] = good(sn.path+"/"+id, a, map[string]uint32{"http": 80}, http)
		}
		return sn
	}
	held := map[svcKey]registries.Converted{}
	sets := 0
	s := newClaims(common, func(k svcKey, c registries.Converted) {
		sets++
		if c.Empty() {
			delete(held, k)
		} else {
			held[k] = c
		}
	}, func(k svcKey) { delete(held, k) })
	tree := map[string]*serviceNode{}
	for i := range 50 {
		child := fmt.Sprintf("svc%02d", i)
		tree[child] = node(child, "192.0.2.1")
		s.put(child, convertNode(common, LayoutCurator, child, tree[child]))
	}
	steps := []struct {
		name     string
		child    string
		node     *serviceNode // nil: the service goes
		maxSets  int          // set calls the change may make
		collided int          // instances not served for a collision after it
	}{
		{name: "orders comes", child: "orders", node: node("orders", "192.0.2.10"), maxSets: 1},
		{name: "Orders comes first by path: orders loses", child: "Orders", node: node("Orders", "192.0.2.9", "192.0.2.8"), maxSets: 2, collided: 1},
		{name: "ORDERS comes first, empty: claims nothing", child: "ORDERS", node: node("ORDERS"), maxSets: 1, collided: 1},
		{name: "ORDERS gets an instance: both others lose", child: "ORDERS", node: node("ORDERS", "192.0.2.7"), maxSets: 3, collided: 3},
		{name: "ORDERS goes: Orders has it again", child: "ORDERS", maxSets: 2, collided: 1},
		{name: "Orders goes: orders has it", child: "Orders", maxSets: 1},
		{name: "orders loses its instances", child: "orders", node: node("orders"), maxSets: 1},
		{name: "one instance of svc07 changes", child: "svc07", node: node("svc07", "192.0.2.2"), maxSets: 1},
		{name: "svc07 is renamed to orders' hostname", child: "svc07", node: &serviceNode{key: "orders", path: "/services/svc07", instances: node("svc07", "192.0.2.3").instances}, maxSets: 1},
		{name: "orders comes back, first by path: svc07 loses", child: "orders", node: node("orders", "192.0.2.10"), maxSets: 2, collided: 1},
		{name: "orders takes another name: svc07 has orders.zk", child: "orders", node: &serviceNode{key: "svc50", path: "/services/orders", instances: node("orders", "192.0.2.10").instances}, maxSets: 2},
		{name: "svc07 takes its own name again", child: "svc07", node: node("svc07", "192.0.2.2"), maxSets: 1},
	}
	for _, st := range steps {
		sets = 0
		if st.node == nil {
			delete(tree, st.child)
			s.remove(st.child)
		} else {
			tree[st.child] = st.node
			s.put(st.child, convertNode(common, LayoutCurator, st.child, st.node))
		}
		entries := make([]registries.Entry[svcKey], 0, len(held))
		for k, c := range held {
			entries = append(entries, registries.Entry[svcKey]{Key: k, Converted: c})
		}
		slices.SortFunc(entries, func(a, b registries.Entry[svcKey]) int { return compareKeys(a.Key, b.Key) })
		services, rejected := registries.Concat(entries)
		wantServices, wantRejected, wantQuarantined := build(common, LayoutCurator, tree)
		if d := cmp.Diff(wantServices, services); d != "" {
			t.Errorf("%s: services (-build +claims):\n%s", st.name, d)
		}
		if d := cmp.Diff(wantRejected, rejected); d != "" {
			t.Errorf("%s: rejected (-build +claims):\n%s", st.name, d)
		}
		if sets > st.maxSets {
			t.Errorf("%s: %d services handed to the Publisher, want at most %d", st.name, sets, st.maxSets)
		}
		if s.collided != st.collided || s.quarantined+s.collided != wantQuarantined {
			t.Errorf("%s: collided %d, quarantined %d; want collided %d, %d in all", st.name, s.collided, s.quarantined, st.collided, wantQuarantined)
		}
	}
}
