package translate

import (
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/meshfed/meshfed/model"
)

// testService is an HTTP service on ports with one endpoint.
func testService(host string, ports ...uint32) *model.Service {
	s := &model.Service{Hostname: host, Sources: []string{"vms"}}
	for _, p := range ports {
		s.Ports = append(s.Ports, model.Port{Name: "http-" + uitoa(p), Number: p, Protocol: model.ProtocolHTTP})
	}
	s.Endpoints = []model.Endpoint{{Address: "10.0.0.1", Source: model.Source{Registry: "vms", Cluster: "vms"}}}
	return s
}

const lastGoodDR = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: a, namespace: shop}
spec:
  host: a.vm.internal
  trafficPolicy:
    tls: {mode: SIMPLE, caCertificates: /etc/ca.pem}
`

// A traffic config edit that builds invalid resources (here a cookie
// attribute without a name, which the config validation refuses: the
// tests decode without it, as a gap in it would let through) keeps the
// host's last good config, TLS included, and is listed in Invalid; the
// kept config follows service changes, and a later good edit applies.
func TestInvalidTrafficConfigKeepsLastGood(t *testing.T) {
	bad := lastGoodDR + `    loadBalancer: {consistentHash: {httpCookie: {name: sid, ttl: 0s, attributes: [{name: ""}]}}}
`
	tr := NewTranslator()
	const name = "outbound|80||a.vm.internal"
	tls := func() string {
		t.Helper()
		c, ok := tr.Resources(KindOf(ClassEnvoy, ClusterType))[name].(*cluster.Cluster)
		if !ok {
			t.Fatalf("cluster %s missing", name)
		}
		return c.GetTransportSocket().GetName()
	}
	snap := func(v uint64, cfg string, svcs ...*model.Service) *model.Snapshot {
		s := model.NewSnapshot(v, svcs)
		s.Config = rawConfigSnap(t, v, cfg)
		return s
	}
	tr.Translate(snap(1, lastGoodDR, testService("a.vm.internal", 80)))
	if tls() == "" || len(tr.Invalid()) != 0 {
		t.Fatalf("good config: transport socket %q, invalid %v", tls(), tr.Invalid())
	}
	tr.Translate(snap(2, bad, testService("a.vm.internal", 80)))
	if tls() == "" {
		t.Errorf("bad edit dropped the cluster's TLS")
	}
	inv := tr.Invalid()
	if len(inv) != 1 || inv[0].Host != "a.vm.internal" || !strings.Contains(inv[0].Error, "last good config kept") ||
		!strings.Contains(inv[0].Error, "DestinationRule shop/a") {
		t.Errorf("Invalid = %+v, want a.vm.internal with the kept config named", inv)
	}
	// The service changes (a new endpoint) while the bad config stays: it is
	// rebuilt with the kept config.
	a2 := testService("a.vm.internal", 80)
	a2.Endpoints = append(a2.Endpoints, model.Endpoint{Address: "10.0.0.2", Source: a2.Endpoints[0].Source})
	tr.Translate(snap(3, bad, a2))
	if tls() == "" || len(tr.Invalid()) != 1 {
		t.Errorf("after a service change: transport socket %q, invalid %v", tls(), tr.Invalid())
	}
	// Fixed: applied, nothing listed.
	tr.Translate(snap(4, strings.Replace(lastGoodDR, "SIMPLE", "DISABLE", 1), a2))
	if tls() != "" || len(tr.Invalid()) != 0 {
		t.Errorf("fixed config: transport socket %q, invalid %v", tls(), tr.Invalid())
	}
}

// With no good config before, an invalid config leaves the host served
// without traffic config.
func TestInvalidTrafficConfigWithoutLastGood(t *testing.T) {
	bad := lastGoodDR + `    loadBalancer: {consistentHash: {httpCookie: {name: sid, ttl: 0s, attributes: [{name: ""}]}}}
`
	tr := NewTranslator()
	s := model.NewSnapshot(1, []*model.Service{testService("a.vm.internal", 80)})
	s.Config = rawConfigSnap(t, 1, bad)
	tr.Translate(s)
	c := tr.Resources(KindOf(ClassEnvoy, ClusterType))["outbound|80||a.vm.internal"].(*cluster.Cluster)
	if c.GetTransportSocket() != nil {
		t.Errorf("transport socket %v, want none", c.GetTransportSocket())
	}
	if inv := tr.Invalid(); len(inv) != 1 || !strings.Contains(inv[0].Error, "traffic config left out") {
		t.Errorf("Invalid = %+v", inv)
	}
}

// The host index is reused while the config snapshot is the same, and
// rebuilt (wildcard lookups answered anew) when it changes.
func TestHostIndexCachedPerConfigSnapshot(t *testing.T) {
	wild := func(host string) string {
		return "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: w, namespace: shop}\nspec:\n  host: \"" + host + "\"\n  trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}\n"
	}
	lb := func(tr *Translator) cluster.Cluster_LbPolicy {
		return tr.Resources(KindOf(ClassEnvoy, ClusterType))["outbound|80||a.vm.internal"].(*cluster.Cluster).GetLbPolicy()
	}
	a := testService("a.vm.internal", 80)
	cfg1 := rawConfigSnap(t, 1, wild("*.vm.internal"))
	tr := NewTranslator()
	s1 := model.NewSnapshot(1, []*model.Service{a})
	s1.Config = cfg1
	tr.Translate(s1)
	idx := tr.hostCfg
	if lb(tr) != cluster.Cluster_LEAST_REQUEST {
		t.Fatalf("wildcard rule not applied: %v", lb(tr))
	}
	s2 := model.NewSnapshot(2, []*model.Service{a, testService("b.vm.internal", 80)})
	s2.Config = cfg1
	tr.Translate(s2)
	if tr.hostCfg != idx {
		t.Errorf("index rebuilt for the same config snapshot")
	}
	s3 := model.NewSnapshot(3, []*model.Service{a})
	s3.Config = rawConfigSnap(t, 2, wild("*.other.internal"))
	tr.Translate(s3)
	if tr.hostCfg == idx || lb(tr) == cluster.Cluster_LEAST_REQUEST {
		t.Errorf("config change: index reused %v, lb %v", tr.hostCfg == idx, lb(tr))
	}
}

// A host kept on its last good config follows the destinations of that
// config's routes: a port change of one rebuilds its route.
func TestLastGoodConfigFollowsItsDestinations(t *testing.T) {
	vs := func(dest string) string {
		return "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: a, namespace: shop}\nspec:\n  hosts: [a.vm.internal]\n  http:\n  - route: [{destination: {host: " + dest + "}}]\n---\n"
	}
	// a's own rule makes its routes invalid (its route to itself carries
	// the rule's hash policy).
	bad := lastGoodDR + `    loadBalancer: {consistentHash: {httpCookie: {name: sid, ttl: 0s, attributes: [{name: ""}]}}}
`
	a, c := testService("a.vm.internal", 80), testService("c.vm.internal", 80)
	tr := NewTranslator()
	snap := func(v uint64, cfg *model.ConfigSnapshot, b *model.Service) *model.Snapshot {
		s := model.NewSnapshot(v, []*model.Service{a, b, c})
		s.Config = cfg
		return s
	}
	tr.Translate(snap(1, rawConfigSnap(t, 1, vs("b.vm.internal")), testService("b.vm.internal", 9090)))
	// The edit moves the route to c and breaks the rule: the old route stays.
	self := "  - match: [{headers: {self: {exact: \"1\"}}}]\n    route: [{destination: {host: a.vm.internal}}]\n"
	cfg2 := rawConfigSnap(t, 2, strings.Replace(vs("c.vm.internal"), "  http:\n", "  http:\n"+self, 1)+bad)
	tr.Translate(snap(2, cfg2, testService("b.vm.internal", 9090)))
	if got := routeClusters(t, tr, ClassEnvoy, "a.vm.internal", 80); len(got) != 1 || got[0][0] != "outbound|9090||b.vm.internal" {
		t.Fatalf("kept route = %v (invalid %v)", got, tr.Invalid())
	}
	tr.Translate(snap(3, cfg2, testService("b.vm.internal", 7070)))
	for _, cl := range []Class{ClassEnvoy, ClassGRPC} {
		if got := routeClusters(t, tr, cl, "a.vm.internal", 80); len(got) != 1 || got[0][0] != "outbound|7070||b.vm.internal" {
			t.Errorf("%s route after b's port changed = %v, want outbound|7070||b.vm.internal", cl, got)
		}
	}
}

// A bad DestinationRule on host b holds b on its last good rule and costs
// host a nothing: a routing to b keeps its own TLS and routes, which take
// b's held rule (no hash policy of the invalid rule), and a route to a
// subset only the invalid rule defines is left out rather than pointing
// at a cluster that is not served. Hosts are translated in both orders.
func TestBadRuleOfDestinationKeepsRoutingHost(t *testing.T) {
	for _, hosts := range [][2]string{{"a.vm.internal", "b.vm.internal"}, {"z.vm.internal", "b.vm.internal"}} {
		t.Run(hosts[0], func(t *testing.T) {
			a, b := hosts[0], hosts[1]
			aCfg := strings.ReplaceAll(lastGoodDR, "a.vm.internal", a) + `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: a, namespace: shop}
spec:
  hosts: [` + a + `]
  http:
  - match: [{headers: {canary: {exact: "1"}}}]
    route: [{destination: {host: ` + b + `, subset: v2}}]
  - route: [{destination: {host: ` + b + `, subset: v1}}]
---
`
			bGood := `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: b, namespace: shop}
spec:
  host: ` + b + `
  subsets: [{name: v1, labels: {v: "1"}}]
`
			bBad := strings.Replace(bGood, "subsets: [", "trafficPolicy: {loadBalancer: {consistentHash: {httpCookie: {name: sid, ttl: 0s, attributes: [{name: \"\"}]}}}}\n  subsets: [{name: v2, labels: {v: \"2\"}}, ", 1)
			tr := NewTranslator()
			snap := func(v uint64, cfg string) *model.Snapshot {
				s := model.NewSnapshot(v, []*model.Service{testService(a, 80), testService(b, 80)})
				s.Config = rawConfigSnap(t, v, cfg)
				return s
			}
			aCluster := "outbound|80||" + a
			check := func(step string) {
				t.Helper()
				cds := tr.Resources(KindOf(ClassEnvoy, ClusterType))
				c, ok := cds[aCluster].(*cluster.Cluster)
				if !ok || c.GetTransportSocket() == nil {
					t.Errorf("%s: %s lost its TLS (invalid %v)", step, aCluster, tr.Invalid())
				}
				got := routeClusters(t, tr, ClassEnvoy, a, 80)
				if len(got) != 1 || len(got[0]) != 1 || got[0][0] != "outbound|80|v1|"+b {
					t.Errorf("%s: routes of %s = %v, want [[outbound|80|v1|%s]] (invalid %v)", step, a, got, b, tr.Invalid())
				}
				vh := tr.Resources(KindOf(ClassEnvoy, RouteType))["80"].(*route.RouteConfiguration)
				for _, h := range vh.GetVirtualHosts() {
					for _, r := range h.GetRoutes() {
						if len(r.GetRoute().GetHashPolicy()) > 0 {
							t.Errorf("%s: route %s of %s carries hash policy %v", step, r.GetName(), h.GetName(), r.GetRoute().GetHashPolicy())
						}
					}
				}
			}
			tr.Translate(snap(1, aCfg+bGood))
			check("good")
			tr.Translate(snap(2, aCfg+bBad))
			check("b's rule broken")
			inv := tr.Invalid()
			if len(inv) != 1 || inv[0].Host != b || !strings.Contains(inv[0].Error, "last good config kept") {
				t.Errorf("Invalid = %+v, want only %s on its last good config", inv, b)
			}
		})
	}
}

// With no last good config, a VirtualService that builds invalid routes
// leaves the host its own DestinationRule (TLS kept), not nothing.
func TestInvalidVirtualServiceKeepsOwnRule(t *testing.T) {
	badVS := lastGoodDR + `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: a, namespace: shop}
spec:
  hosts: [a.vm.internal]
  http:
  - match: [{headers: {"": {exact: "1"}}}]
    route: [{destination: {host: a.vm.internal}}]
`
	tr := NewTranslator()
	s := model.NewSnapshot(1, []*model.Service{testService("a.vm.internal", 80)})
	s.Config = rawConfigSnap(t, 1, badVS)
	tr.Translate(s)
	c := tr.Resources(KindOf(ClassEnvoy, ClusterType))["outbound|80||a.vm.internal"].(*cluster.Cluster)
	if c.GetTransportSocket() == nil {
		t.Errorf("cluster lost its TLS (invalid %v)", tr.Invalid())
	}
	if inv := tr.Invalid(); len(inv) != 1 || !strings.Contains(inv[0].Error, "only DestinationRule shop/a") {
		t.Errorf("Invalid = %+v, want the DestinationRule alone applied", inv)
	}
}
