package translate

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/internal/testfixture"
)

// TestEnvoyTrafficGolden: every VirtualService and DestinationRule
// feature, translated for Envoy and for proxyless gRPC, against golden
// files; every resource passes ValidateAll and no host falls back.
func TestEnvoyTrafficGolden(t *testing.T) {
	t.Parallel()
	tr := NewTranslator()
	snap := model.NewSnapshot(1, testfixture.TrafficServices())
	snap.Config = configSnap(t, 1, testfixture.TrafficConfig)
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
	snap := model.NewSnapshot(1, testfixture.TrafficServices())
	snap.Config = configSnap(t, 1, testfixture.TrafficConfig)
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
	idx := configByHost(configSnap(t, 1, cfg), nil)
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
			snap := model.NewSnapshot(1, testfixture.TrafficServices())
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
	ordersDR := testfixture.TrafficConfig[strings.Index(testfixture.TrafficConfig, "kind: DestinationRule\nmetadata: {name: orders"):]
	ordersDR = "apiVersion: networking.istio.io/v1\n" + ordersDR[:strings.Index(ordersDR, "---")]
	vsObjs := configSnap(t, 1, webVS).Objects()
	svcs := testfixture.TrafficServices() // the same services: only the rules change
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
