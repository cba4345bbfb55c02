package xds

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/model"
)

// fullSvcs: orders (gRPC 8080, HTTP 8081), web (HTTP 80), db (TCP 5432),
// billing (gRPC 9000, another domain), each with v1 and v2 endpoints.
func fullSvcs() []*model.Service {
	eps := func(base string, ports map[string]uint32) []model.Endpoint {
		return []model.Endpoint{
			{Address: base + "1", Ports: ports, Labels: map[string]string{"version": "v1"}, Locality: model.Locality{Region: "us-east", Zone: "a"}, Source: model.Source{Registry: "vms", Cluster: "vms"}},
			{Address: base + "2", Ports: ports, Labels: map[string]string{"version": "v2"}, Locality: model.Locality{Region: "us-east", Zone: "b"}, Source: model.Source{Registry: "vms", Cluster: "vms"}},
		}
	}
	return []*model.Service{
		{Hostname: "orders.vm.internal", Sources: []string{"vms"},
			Ports:     []model.Port{{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}, {Name: "http", Number: 8081, Protocol: model.ProtocolHTTP}},
			Endpoints: eps("10.0.0.", nil)},
		{Hostname: "web.vm.internal", Sources: []string{"vms"},
			Ports: []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}}, Endpoints: eps("10.0.1.", nil)},
		{Hostname: "db.vm.internal", Sources: []string{"vms"},
			Ports: []model.Port{{Name: "tcp", Number: 5432, Protocol: model.ProtocolTCP}}, Endpoints: eps("10.0.2.", nil)},
		{Hostname: "billing.pay.internal", Sources: []string{"vms"},
			Ports: []model.Port{{Name: "grpc", Number: 9000, Protocol: model.ProtocolGRPC}}, Endpoints: eps("10.0.3.", nil)},
	}
}

// fullConfig uses every VirtualService and DestinationRule feature meshfed
// translates.
const fullConfig = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web, namespace: shop}
spec:
  hosts: [web.vm.internal]
  gateways: [mesh]
  http:
  - name: moved
    match: [{uri: {exact: /old}}]
    redirect: {uri: /new, authority: new.vm.internal, redirectCode: 302}
  - name: secure
    match: [{uri: {prefix: /login}}]
    redirect: {scheme: https, port: 443}
  - name: api
    match:
    - name: post
      uri: {prefix: /api}
      method: {exact: POST}
      headers: {x-env: {regex: "stag(e|ing)"}}
      queryParams: {q: {}, lang: {prefix: en}}
    rewrite: {uri: /v2/api, authority: api.vm.internal}
    headers:
      request: {set: {x-via: meshfed}, add: {x-trace: "1"}, remove: [x-debug]}
      response: {set: {cache-control: no-store}, remove: [server]}
    route:
    - destination: {host: web.vm.internal, subset: v2}
      headers: {request: {set: {x-subset: v2}}}
    mirror: {host: orders.vm.internal, port: {number: 8081}}
    mirrorPercentage: {value: 5}
    corsPolicy:
      allowOrigins: [{exact: "https://shop.example"}, {regex: "https://.*\\.shop\\.example"}]
      allowMethods: [GET, POST]
      allowHeaders: [x-user]
      exposeHeaders: [x-request-id]
      maxAge: 24h
      allowCredentials: true
    timeout: 3s
    retries: {attempts: 2, perTryTimeout: 1s, retryOn: "5xx,503,gateway-error"}
  - name: gone
    match: [{uri: {prefix: /direct}}]
    directResponse: {status: 503, body: {string: "down for maintenance"}}
  - name: regex-rewrite
    match: [{uri: {regex: "^/users/([0-9]+)$"}, ignoreUriCase: true}]
    rewrite: {uriRegexRewrite: {match: "^/users/([0-9]+)$", rewrite: "/u/\\1"}}
    route: [{destination: {host: web.vm.internal}}]
  - name: internal
    match: [{withoutHeaders: {x-internal: {}}, authority: {prefix: web}, scheme: {exact: http}}]
    route: [{destination: {host: web.vm.internal, subset: v1}}]
  - name: not-here
    match: [{port: 81}, {sourceLabels: {app: frontend}}, {gateways: [edge-gateway]}]
    route: [{destination: {host: web.vm.internal, subset: v2}}]
  - name: split
    fault: {delay: {fixedDelay: 100ms, percentage: {value: 1}}}
    mirrors: [{destination: {host: orders.vm.internal, port: {number: 8081}}, percentage: {value: 0}}]
    route:
    - {destination: {host: web.vm.internal, subset: v1}, weight: 75, headers: {response: {add: {x-canary: "no"}}}}
    - {destination: {host: web.vm.internal, subset: v2}, weight: 25, headers: {request: {set: {host: canary.vm.internal}}}}
    - {destination: {host: web.vm.internal, subset: v3}, weight: 0}
  - name: after-catch-all
    route: [{destination: {host: web.vm.internal}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db, namespace: shop}
spec:
  hosts: [db.vm.internal]
  tcp:
  - match: [{port: 5433}]
    route: [{destination: {host: db.vm.internal, subset: v2}}]
  - match: [{port: 5432}]
    route:
    - {destination: {host: db.vm.internal, subset: v1}, weight: 80}
    - {destination: {host: db.vm.internal, subset: v2}, weight: 20}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: pay, namespace: shop}
spec:
  hosts: ["*.pay.internal"]
  http:
  - timeout: 1s
    route: [{destination: {host: billing.pay.internal}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders, namespace: shop}
spec:
  host: orders.vm.internal
  trafficPolicy:
    loadBalancer: {consistentHash: {httpCookie: {name: session, path: /, ttl: 60s}}}
    connectionPool:
      tcp: {maxConnections: 100, connectTimeout: 2s, tcpKeepalive: {time: 7200s, interval: 75s, probes: 9}}
      http: {http1MaxPendingRequests: 10, http2MaxRequests: 200, maxRequestsPerConnection: 5, maxRetries: 3, idleTimeout: 30s, maxConcurrentStreams: 50}
    outlierDetection: {consecutive5xxErrors: 3, interval: 5s, baseEjectionTime: 30s, maxEjectionPercent: 50, minHealthPercent: 20}
    tls: {mode: SIMPLE, caCertificates: /etc/meshfed/ca.pem, subjectAltNames: [orders.vm.internal, "spiffe://vm.internal/orders"]}
    portLevelSettings:
    - port: {number: 8081}
      loadBalancer: {simple: RANDOM}
      tls: {mode: MUTUAL, caCertificates: /etc/meshfed/ca.pem, clientCertificate: /etc/meshfed/client.pem, privateKey: /etc/meshfed/client-key.pem, sni: orders.internal}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy: {loadBalancer: {consistentHash: {useSourceIp: true, maglev: {tableSize: 65537}}}}
  - name: v2
    labels: {version: v2}
    trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}, tls: {mode: DISABLE}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web, namespace: shop}
spec:
  host: web.vm.internal
  trafficPolicy:
    loadBalancer:
      consistentHash: {httpQueryParameterName: user, ringHash: {minimumRingSize: 1024}}
      localityLbSetting: {distribute: [{from: "*", to: {"us-east/a": 80, "us-east/b/*": 20}}]}
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: db, namespace: shop}
spec:
  host: db.vm.internal
  trafficPolicy:
    outlierDetection: {consecutiveGatewayErrors: 2, splitExternalLocalOriginErrors: true, consecutiveLocalOriginFailures: 4}
    tls: {mode: SIMPLE, insecureSkipVerify: true}
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: pay, namespace: shop}
spec:
  host: "*.pay.internal"
  trafficPolicy:
    loadBalancer: {consistentHash: {httpHeaderName: x-account}}
    outlierDetection: {consecutive5xxErrors: 7, interval: 10s, baseEjectionTime: 1m}
`

// TestEnvoyTrafficGolden: every VirtualService and DestinationRule
// feature, translated for Envoy and for proxyless gRPC, against golden
// files; every resource passes ValidateAll and no host falls back.
func TestEnvoyTrafficGolden(t *testing.T) {
	t.Parallel()
	tr := NewTranslator()
	snap := model.NewSnapshot(1, fullSvcs())
	snap.Config = configSnap(t, 1, fullConfig)
	tr.Translate(snap)
	assertValid(t, tr)
	if in := tr.Invalid(); len(in) != 0 {
		t.Fatalf("Invalid() = %v, want none", in)
	}
	golden(t, "envoy-traffic-full.golden", dumpClass(t, tr, ClassEnvoy))
	golden(t, "grpc-traffic-full.golden", dumpClass(t, tr, ClassGRPC))
}

// TestEnvoyTrafficSemantics checks, beside the goldens, what a user of
// each feature relies on.
func TestEnvoyTrafficSemantics(t *testing.T) {
	t.Parallel()
	tr := NewTranslator()
	snap := model.NewSnapshot(1, fullSvcs())
	snap.Config = configSnap(t, 1, fullConfig)
	tr.Translate(snap)
	rds := tr.Resources(KindOf(ClassEnvoy, RouteType))
	cds := tr.Resources(KindOf(ClassEnvoy, ClusterType))
	lds := tr.Resources(KindOf(ClassEnvoy, ListenerType))

	web := rds["80"].(*route.RouteConfiguration).GetVirtualHosts()[0]
	var names []string
	for _, r := range web.GetRoutes() {
		names = append(names, r.GetName())
	}
	// not-here's matches are for port 81, for other sources and for a
	// gateway; after-catch-all follows a route that matches everything.
	if want := []string{"moved", "secure", "api.post", "gone", "regex-rewrite", "internal", "split"}; !slices.Equal(names, want) {
		t.Errorf("web routes = %v, want %v", names, want)
	}
	byName := func(n string) *route.Route {
		for _, r := range web.GetRoutes() {
			if r.GetName() == n {
				return r
			}
		}
		t.Fatalf("no route %s", n)
		return nil
	}
	if rd := byName("moved").GetRedirect(); rd.GetPathRedirect() != "/new" || rd.GetHostRedirect() != "new.vm.internal" || rd.GetResponseCode() != route.RedirectAction_FOUND {
		t.Errorf("moved redirect = %v", rd)
	}
	if rd := byName("secure").GetRedirect(); rd.GetSchemeRedirect() != "https" || rd.GetPortRedirect() != 0 {
		t.Errorf("secure redirect = %v (port 443 with https is implied)", rd)
	}
	api := byName("api.post")
	if a := api.GetRoute(); a.GetPrefixRewrite() != "/v2/api" || a.GetHostRewriteLiteral() != "api.vm.internal" ||
		a.GetCluster() != "outbound|80|v2|web.vm.internal" || a.GetTimeout().AsDuration().String() != "3s" {
		t.Errorf("api action = %v", a)
	}
	if rp := api.GetRoute().GetRetryPolicy(); rp.GetRetryOn() != "5xx,gateway-error,retriable-status-codes" || !slices.Equal(rp.GetRetriableStatusCodes(), []uint32{503}) || rp.GetNumRetries().GetValue() != 2 {
		t.Errorf("api retries = %v", rp)
	}
	if m := api.GetRoute().GetRequestMirrorPolicies(); len(m) != 1 || m[0].GetCluster() != "outbound|8081||orders.vm.internal" || m[0].GetRuntimeFraction().GetDefaultValue().GetNumerator() != 50000 {
		t.Errorf("api mirror = %v", m)
	}
	var hdrs []string
	for _, h := range api.GetMatch().GetHeaders() {
		hdrs = append(hdrs, h.GetName())
	}
	if want := []string{"x-env", ":method"}; !slices.Equal(hdrs, want) || len(api.GetMatch().GetQueryParameters()) != 2 {
		t.Errorf("api match = %v", api.GetMatch())
	}
	if len(api.GetRequestHeadersToAdd()) != 3 || api.GetRequestHeadersToRemove()[0] != "x-debug" || api.GetResponseHeadersToRemove()[0] != "server" {
		t.Errorf("api header operations = %v", api)
	}
	if _, ok := api.GetTypedPerFilterConfig()["envoy.filters.http.cors"]; !ok {
		t.Error("api has no CORS policy")
	}
	if dr := byName("gone").GetDirectResponse(); dr.GetStatus() != 503 || dr.GetBody().GetInlineString() != "down for maintenance" {
		t.Errorf("gone = %v", dr)
	}
	in := byName("internal").GetMatch().GetHeaders()
	if len(in) != 3 || in[0].GetName() != "x-internal" || !in[0].GetInvertMatch() || in[1].GetName() != ":authority" || in[2].GetName() != ":scheme" {
		t.Errorf("internal match headers = %v", in)
	}
	split := byName("split").GetRoute()
	wc := split.GetWeightedClusters().GetClusters()
	if len(wc) != 2 || wc[0].GetWeight().GetValue() != 75 || wc[1].GetHostRewriteLiteral() != "canary.vm.internal" {
		t.Errorf("split clusters = %v (the 0-weight v3 left out)", wc)
	}
	if len(split.GetRequestMirrorPolicies()) != 0 {
		t.Error("a 0% mirror is served")
	}
	if hp := split.GetHashPolicy(); len(hp) != 1 || hp[0].GetQueryParameter().GetName() != "user" {
		t.Errorf("split hash policy = %v, want the DestinationRule's query parameter", hp)
	}

	// The port-80 listener carries CORS and fault filters before the router.
	var filters []string
	m := &hcm.HttpConnectionManager{}
	if err := lds["0.0.0.0_80"].(*listener.Listener).GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(m); err != nil {
		t.Fatal(err)
	}
	for _, f := range m.GetHttpFilters() {
		filters = append(filters, f.GetName())
	}
	if want := []string{"envoy.filters.http.cors", "envoy.filters.http.fault", "envoy.filters.http.router"}; !slices.Equal(filters, want) {
		t.Errorf("port 80 filters = %v, want %v", filters, want)
	}

	// TCP: the tcp route for port 5432 splits 80/20 between subsets.
	tp := &tcpproxy.TcpProxy{}
	if err := lds["0.0.0.0_5432"].(*listener.Listener).GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(tp); err != nil {
		t.Fatal(err)
	}
	if c := tp.GetWeightedClusters().GetClusters(); len(c) != 2 || c[0].GetName() != "outbound|5432|v1|db.vm.internal" || c[0].GetWeight() != 80 {
		t.Errorf("db tcp_proxy = %v", tp)
	}

	// Clusters: policy per port and subset, as Istio merges them.
	c := func(n string) *cluster.Cluster {
		cl, ok := cds[n].(*cluster.Cluster)
		if !ok {
			t.Fatalf("no Envoy cluster %s", n)
		}
		return cl
	}
	if o := c("outbound|8080||orders.vm.internal"); o.GetLbPolicy() != cluster.Cluster_RING_HASH || o.GetTransportSocket() == nil ||
		o.GetOutlierDetection().GetConsecutive_5Xx().GetValue() != 3 || o.GetCircuitBreakers().GetThresholds()[0].GetMaxRequests().GetValue() != 200 ||
		o.GetConnectTimeout().AsDuration().String() != "2s" {
		t.Errorf("orders 8080 cluster = %v", o)
	}
	if o := c("outbound|8081||orders.vm.internal"); o.GetLbPolicy() != cluster.Cluster_RANDOM || !strings.Contains(o.GetTransportSocket().String(), "client-key.pem") {
		t.Errorf("orders 8081 cluster (port-level RANDOM, MUTUAL) = %v", o)
	}
	if o := c("outbound|8080|v1|orders.vm.internal"); o.GetLbPolicy() != cluster.Cluster_MAGLEV || o.GetTransportSocket() == nil {
		t.Errorf("orders v1 (maglev, rule's TLS) = %v", o)
	}
	if o := c("outbound|8080|v2|orders.vm.internal"); o.GetLbPolicy() != cluster.Cluster_LEAST_REQUEST || o.GetTransportSocket() != nil || o.GetCircuitBreakers() == nil {
		t.Errorf("orders v2 (LEAST_REQUEST, TLS disabled, rule's pool) = %v", o)
	}
	if o := c("outbound|9000||billing.pay.internal"); o.GetLbPolicy() != cluster.Cluster_RING_HASH {
		t.Errorf("billing (wildcard DestinationRule) = %v", o)
	}

	// localityLbSetting.distribute from "*": locality weights 80/20 in the
	// CLA every client reads; Envoy's cluster weighs by locality.
	cla := tr.Resources(KindOf("", EndpointType))["outbound|80||web.vm.internal"].(*endpoint.ClusterLoadAssignment)
	var lw []string
	for _, l := range cla.GetEndpoints() {
		lw = append(lw, l.GetLocality().GetZone()+"="+strconv.Itoa(int(l.GetLoadBalancingWeight().GetValue())))
	}
	if want := []string{"a=80", "b=20"}; !slices.Equal(lw, want) {
		t.Errorf("web locality weights = %v, want %v", lw, want)
	}
	if c("outbound|80||web.vm.internal").GetCommonLbConfig().GetLocalityWeightedLbConfig() == nil {
		t.Error("web's Envoy cluster does not weigh by locality")
	}

	// gRPC: what grpc-go cannot take is left out and listed.
	gcds := tr.Resources(KindOf(ClassGRPC, ClusterType))
	if g := gcds["outbound|8080||orders.vm.internal"].(*cluster.Cluster); g.GetTransportSocket() != nil || g.GetLbPolicy() != cluster.Cluster_ROUND_ROBIN ||
		g.GetOutlierDetection().GetFailurePercentageRequestVolume().GetValue() != 3 {
		t.Errorf("gRPC orders cluster = %v", g)
	}
	if g := gcds["outbound|9000||billing.pay.internal"].(*cluster.Cluster); g.GetLbPolicy() != cluster.Cluster_RING_HASH {
		t.Errorf("gRPC billing cluster = %v", g)
	}
	notes := tr.TrafficNotes()
	var text []string
	for _, n := range notes {
		text = append(text, n.Host+" "+n.Note)
		if n.Client != "grpc" && n.Client != "envoy" {
			t.Errorf("note %+v: client %q", n, n.Client)
		}
	}
	joined := strings.Join(text, "\n")
	for _, want := range []string{
		"orders.vm.internal outbound|8080||orders.vm.internal: tls SIMPLE",
		"orders.vm.internal outbound|8081||orders.vm.internal: tls MUTUAL",
		"orders.vm.internal outbound|8080||orders.vm.internal: consistentHash httpCookie",
		"web.vm.internal http[2] rewrite",
		"web.vm.internal http[2] corsPolicy",
		"web.vm.internal http[6].match[1]: sourceLabels/sourceNamespace (the match is left out)",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("TrafficNotes lack %q:\n%s", want, joined)
		}
	}
}

// TestHostSemantics: an exact host beats a wildcard, the longest wildcard
// beats a shorter one and "*"; gateway-only rules do not apply; short
// names resolve in the rule's namespace.
func TestHostSemantics(t *testing.T) {
	t.Parallel()
	vs := func(name, ns, host, gw string) string {
		return "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec:\n  hosts: [\"" + host + "\"]\n" + gw +
			"  http: [{name: " + name + ", route: [{destination: {host: dest.example}}]}]\n"
	}
	cfg := strings.Join([]string{
		vs("all", "shop", "*", ""),
		vs("internal", "shop", "*.internal", ""),
		vs("vm", "shop", "*.vm.internal", ""),
		vs("exact", "shop", "orders.vm.internal", ""),
		vs("edge", "shop", "web.vm.internal", "  gateways: [edge-gateway]\n"),
		vs("short", "shop", "reviews", ""),
	}, "---\n")
	idx := configByHost(configSnap(t, 1, cfg))
	for host, want := range map[string]string{
		"orders.vm.internal":              "exact",
		"web.vm.internal":                 "vm",
		"billing.pay.internal":            "internal",
		"example.com":                     "all",
		"reviews.shop.svc.cluster.local":  "short",
		"reviews.other.svc.cluster.local": "all",
		"vm.internal":                     "internal",
	} {
		hc := idx.lookup(host)
		if hc.vs == nil || hc.vs.Name != want {
			t.Errorf("%s: VirtualService %v, want %s", host, hc.vs, want)
		}
	}
}

// TestGRPCGoAcksFullTraffic: a real grpc-go xDS client (v1.85) is served
// the gRPC side of every feature above and ACKs every type: calls to the
// hosts with rules (outlier detection, omitted TLS and cookie hashing,
// redirect and direct-response routes, a wildcard rule) reach the
// backends. Every resource is a first version, so a NACK of any of them
// would leave the client without it and fail the call.
func TestGRPCGoAcksFullTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a grpc-go xDS client")
	}
	t.Parallel()
	ports := []uint32{startHealthBackend(t), startHealthBackend(t)}
	svcs := fullSvcs()
	for _, s := range svcs {
		for i := range s.Endpoints {
			e := &s.Endpoints[i]
			e.Address = "127.0.0.1"
			e.Ports = map[string]uint32{}
			for _, p := range s.Ports {
				e.Ports[p.Name] = ports[i%2]
			}
		}
	}
	srv := NewServer(Options{})
	snap := model.NewSnapshot(1, svcs)
	snap.Config = configSnap(t, 1, fullConfig)
	srv.Update(snap)
	addr := startServer(t, srv)

	const nodeID = "grpc-full-traffic"
	boot, err := GRPCBootstrap(addr, nodeID, model.Locality{Region: "us-east"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bootFile := filepath.Join(t.TempDir(), "bootstrap.json")
	if err := os.WriteFile(bootFile, boot, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	targets := []string{"xds:///orders.vm.internal:8080", "xds:///orders.vm.internal:8081", "xds:///web.vm.internal:80", "xds:///billing.pay.internal:9000"}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", "GRPC_XDS_BOOTSTRAP="+bootFile, "MESHFED_XDS_TEST_TARGETS="+strings.Join(targets, ","))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("grpc-go xDS client failed: %v\n%s", err, out)
	}
	for _, tg := range targets {
		if !strings.Contains(string(out), tg+" SERVING") {
			t.Errorf("client output lacks %q:\n%s", tg+" SERVING", out)
		}
	}
}

// startHealthBackend starts a gRPC server with the health service on
// 127.0.0.1 and returns its port.
func startHealthBackend(t *testing.T) uint32 {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	backend := grpc.NewServer()
	healthpb.RegisterHealthServer(backend, health.NewServer())
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = backend.Serve(lis)
	}()
	t.Cleanup(func() { backend.Stop(); <-served })
	return uint32(lis.Addr().(*net.TCPAddr).Port)
}

// TestAcceptedRulesServe: edge cases the config source accepts translate,
// for both client kinds, into resources that pass ValidateAll with no
// host falling back; the ones translation could not serve are refused by
// the source with a reason.
func TestAcceptedRulesServe(t *testing.T) {
	t.Parallel()
	vs := "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: web, namespace: shop}\nspec:\n  hosts: [web.vm.internal]\n"
	dr := "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: web, namespace: shop}\nspec:\n  host: web.vm.internal\n"
	route := "    route: [{destination: {host: web.vm.internal}}]\n"
	for _, tc := range []struct{ name, yaml, refused string }{
		{"empty uri prefix", vs + "  http:\n  - match: [{uri: {prefix: \"\"}}]\n" + route, ""},
		{"empty header prefix", vs + "  http:\n  - match: [{headers: {x-a: {prefix: \"\"}}}]\n" + route, "must not be empty"},
		{"empty header exact", vs + "  http:\n  - match: [{headers: {x-a: {exact: \"\"}}}]\n" + route, ""},
		{"empty regex", vs + "  http:\n  - match: [{uri: {regex: \"\"}}]\n" + route, "must not be empty"},
		{"empty query prefix", vs + "  http:\n  - match: [{queryParams: {q: {prefix: \"\"}}}]\n" + route, "must not be empty"},
		{"empty origin prefix", vs + "  http:\n  - corsPolicy: {allowOrigins: [{prefix: \"\"}]}\n" + route, "must not be empty"},
		{"uppercase set header", vs + "  http:\n  - headers: {request: {set: {X-Big: v}}}\n" + route, ""},
		{"authority header", vs + "  http:\n  - headers: {request: {set: {\":authority\": other.vm.internal, host: h}}}\n" + route, ""},
		{"redirect port only", vs + "  http:\n  - redirect: {port: 8443}\n", ""},
		{"redirect derive", vs + "  http:\n  - redirect: {derivePort: FROM_REQUEST_PORT, scheme: https}\n", ""},
		{"direct response no body", vs + "  http:\n  - directResponse: {status: 204}\n", ""},
		{"mirror 0", vs + "  http:\n  - mirror: {host: web.vm.internal}\n    mirrorPercentage: {value: 0}\n" + route, ""},
		{"retry codes only", vs + "  http:\n  - retries: {attempts: 1, retryOn: \"503,504\"}\n" + route, ""},
		{"fault delay 0%", vs + "  http:\n  - fault: {delay: {fixedDelay: 1s, percentage: {value: 0}}}\n" + route, ""},
		{"tcp no match", vs + "  tcp:\n  - route: [{destination: {host: db.vm.internal}}]\n", ""},
		{"tcp weights", vs + "  tcp:\n  - route: [{destination: {host: db.vm.internal, subset: a}, weight: 0}, {destination: {host: db.vm.internal, subset: b}, weight: 1}]\n", ""},
		{"cookie no ttl", dr + "  trafficPolicy: {loadBalancer: {consistentHash: {httpCookie: {name: s}}}}\n", ""},
		{"maglev no size", dr + "  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x, maglev: {}}}}\n", ""},
		{"pool zeros", dr + "  trafficPolicy: {connectionPool: {tcp: {maxConnections: 0}, http: {http2MaxRequests: 0, maxConcurrentStreams: 0}}}\n", ""},
		{"keepalive sub-second", dr + "  trafficPolicy: {connectionPool: {tcp: {tcpKeepalive: {time: 500ms}}}}\n", ""},
		{"outlier zero", dr + "  trafficPolicy: {outlierDetection: {consecutive5xxErrors: 0}}\n", ""},
		{"tls insecure", dr + "  trafficPolicy: {tls: {mode: SIMPLE, insecureSkipVerify: true}}\n", ""},
		{"tls disable", dr + "  trafficPolicy: {tls: {mode: DISABLE}}\n", ""},
		{"long sni", dr + "  trafficPolicy: {tls: {mode: SIMPLE, insecureSkipVerify: true, sni: " + strings.Repeat("a", 256) + "}}\n", "longer than 255 bytes"},
		{"deprecated ring size", dr + "  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x, minimumRingSize: 9000000}}}\n", "minimumRingSize 9000000"},
		{"newline in rewrite", vs + "  http:\n  - rewrite: {uri: \"/a\\nb\"}\n" + route, "must not hold CR, LF or NUL"},
		{"remove host", vs + "  http:\n  - headers: {request: {remove: [Host]}}\n" + route, "host cannot be removed"},
		{"locality weights", dr + "  trafficPolicy: {loadBalancer: {localityLbSetting: {distribute: [{from: \"*\", to: {\"nowhere/*\": 100}}]}}}\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			objs, rej := istioconfig.ParseObjects("t.yaml", []byte(tc.yaml))
			if tc.refused != "" {
				if len(rej) != 1 || !strings.Contains(rej[0].Reason, tc.refused) {
					t.Fatalf("rejections %v, want one with %q", rej, tc.refused)
				}
				return
			}
			if len(rej) != 0 {
				t.Fatalf("rejected: %v", rej)
			}
			tr := NewTranslator()
			snap := model.NewSnapshot(1, fullSvcs())
			snap.Config = model.NewConfigSnapshot(1, objs)
			tr.Translate(snap)
			assertValid(t, tr)
			if in := tr.Invalid(); len(in) != 0 {
				t.Fatalf("accepted rule left out at translation: %v", in)
			}
		})
	}
}

// TestDestinationHashAcrossHosts: a route takes the consistent hash of
// its destination's DestinationRule, merged for the subset and port (as
// Istio's hashForVirtualService), and a change of that rule rebuilds the
// routes that point at it, though their own VirtualService did not change.
func TestDestinationHashAcrossHosts(t *testing.T) {
	t.Parallel()
	const webVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web, namespace: shop}
spec:
  hosts: [web.vm.internal]
  http:
  - route: [{destination: {host: orders.vm.internal, subset: v1, port: {number: 8081}}}]
`
	ordersDR := fullConfig[strings.Index(fullConfig, "kind: DestinationRule\nmetadata: {name: orders"):]
	ordersDR = "apiVersion: networking.istio.io/v1\n" + ordersDR[:strings.Index(ordersDR, "---")]
	vsObjs := configSnap(t, 1, webVS).Objects()
	svcs := fullSvcs() // the same services: only the rules change
	snap := func(v uint64, dr string) *model.Snapshot {
		s := model.NewSnapshot(v, slices.Clone(svcs))
		s.Config = model.NewConfigSnapshot(v, append(slices.Clone(vsObjs), configSnap(t, v, dr).Objects()...))
		return s
	}
	tr := NewTranslator()
	tr.Translate(snap(1, ordersDR))
	hash := func() []*route.RouteAction_HashPolicy {
		return tr.Resources(KindOf(ClassEnvoy, RouteType))["80"].(*route.RouteConfiguration).GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetHashPolicy()
	}
	// Subset v1 hashes by source IP (over the port's RANDOM).
	if hp := hash(); len(hp) != 1 || !hp[0].GetConnectionProperties().GetSourceIp() {
		t.Fatalf("web → orders v1 hash policy = %v, want source IP", hp)
	}
	// Without v1's policy, port 8081's RANDOM applies: no hashing.
	ch := changed(tr.Translate(snap(2, strings.Replace(ordersDR, "trafficPolicy: {loadBalancer: {consistentHash: {useSourceIp: true, maglev: {tableSize: 65537}}}}", "", 1))))
	if !slices.Contains(ch, "envoy RDS +80") {
		t.Errorf("changes %v lack web's routes (envoy RDS +80)", ch)
	}
	if hp := hash(); len(hp) != 0 {
		t.Errorf("web → orders v1 hash policy = %v after the subset policy went, want none", hp)
	}
	assertValid(t, tr)
}

// TestDNSSubsets: a DNS service's subset clusters carry the subset's
// endpoints inline (Envoy STRICT_DNS, gRPC LOGICAL_DNS on the first), as
// its port's cluster does.
func TestDNSSubsets(t *testing.T) {
	t.Parallel()
	svc := &model.Service{Hostname: "api.ext.internal", Resolution: model.ResolutionDNS, Sources: []string{"ext"},
		Ports: []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}},
		Endpoints: []model.Endpoint{
			{Address: "a.example", Labels: map[string]string{"version": "v1"}, Source: model.Source{Registry: "ext"}},
			{Address: "b.example", Labels: map[string]string{"version": "v2"}, Source: model.Source{Registry: "ext"}},
		}}
	snap := model.NewSnapshot(1, []*model.Service{svc})
	snap.Config = configSnap(t, 1, "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: api, namespace: ext}\nspec:\n  host: api.ext.internal\n  subsets: [{name: v2, labels: {version: v2}}]\n")
	tr := NewTranslator()
	tr.Translate(snap)
	assertValid(t, tr)
	name := SubsetClusterName("api.ext.internal", 80, "v2")
	ec := tr.Resources(KindOf(ClassEnvoy, ClusterType))[name].(*cluster.Cluster)
	if ec.GetType() != cluster.Cluster_STRICT_DNS || len(ec.GetLoadAssignment().GetEndpoints()) != 1 ||
		ec.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress() != "b.example" {
		t.Errorf("Envoy subset cluster = %v, want STRICT_DNS on b.example", ec)
	}
	gc := tr.Resources(KindOf(ClassGRPC, ClusterType))[name].(*cluster.Cluster)
	if gc.GetType() != cluster.Cluster_LOGICAL_DNS || gc.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress() != "b.example" {
		t.Errorf("gRPC subset cluster = %v, want LOGICAL_DNS on b.example", gc)
	}
	if _, ok := tr.Resources(KindOf("", EndpointType))[name]; ok {
		t.Error("a DNS subset has an EDS resource")
	}
}
