package xds

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/translate"
)

// scopedService is a service of namespace ns on one port.
func scopedService(host, ns string, port uint32, proto model.Protocol, exportTo ...string) *model.Service {
	return &model.Service{Hostname: host, Namespace: ns, ExportTo: exportTo,
		Ports:     []model.Port{{Name: strings.ToLower(string(proto)), Number: port, Protocol: proto}},
		Endpoints: []model.Endpoint{{Address: "10.0.0.1"}}}
}

// configOf parses Istio YAML into a config snapshot.
func configOf(t *testing.T, version uint64, yaml string) *model.ConfigSnapshot {
	t.Helper()
	objs, rej := istioconfig.ParseObjects("scope.yaml", []byte(yaml))
	if len(rej) > 0 {
		t.Fatalf("config rejected: %v", rej)
	}
	return model.NewConfigSnapshot(version, objs)
}

func sidecarYAML(hosts ...string) string {
	return "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: shop}\nspec:\n  egress:\n  - hosts: [\"" +
		strings.Join(hosts, `", "`) + "\"]\n"
}

// envoyNodeIn is an Envoy sidecar's node in namespace ns, as Istio's
// proxies name themselves.
func envoyNodeIn(id, ns string) *core.Node {
	return &core.Node{Id: "sidecar~10.1.0.1~" + id + "." + ns + "~" + ns + ".svc.cluster.local"}
}

// vhostsOf lists the virtual hosts of route configuration name a client holds.
func vhostsOf(st map[string]map[string]proto.Message, name string) []string {
	rc, _ := st[translate.RouteType][name].(*route.RouteConfiguration)
	var out []string
	for _, vh := range rc.GetVirtualHosts() {
		out = append(out, vh.GetName())
	}
	slices.Sort(out)
	return out
}

// TestScopedViews: Envoy proxies in two namespaces each receive exactly
// their scope (a Sidecar's egress hosts; exportTo), over SotW and delta;
// a Sidecar edit moves the scope without removing a cluster that stays;
// a change out of a proxy's scope sends it nothing; proxies without a
// namespace and proxyless gRPC clients see everything, as before.
func TestScopedViews(t *testing.T) {
	t.Parallel()
	a := scopedService("a.shop.svc.cluster.local", "shop", 8080, model.ProtocolHTTP)
	b := scopedService("b.shop.svc.cluster.local", "shop", 8080, model.ProtocolHTTP)
	c := scopedService("c.pay.svc.cluster.local", "pay", 8080, model.ProtocolHTTP)
	d := scopedService("d.pay.svc.cluster.local", "pay", 9090, model.ProtocolTCP, ".")
	e := scopedService("e.vm.internal", "vms", 8080, model.ProtocolHTTP)
	snap := func(v uint64, cfg *model.ConfigSnapshot, svcs ...*model.Service) *model.Snapshot {
		s := model.NewSnapshot(v, svcs)
		s.Config = cfg
		return s
	}
	cfg1 := configOf(t, 1, sidecarYAML("./*", "vms/*"))
	srv := NewServer(Options{})
	srv.Update(snap(1, cfg1, a, b, c, d, e))
	addr := startServer(t, srv)

	cl := translate.ClusterName
	shop := dialADS(t, addr, envoyNodeIn("web-1", "shop"), false)
	md, _ := structpb.NewStruct(map[string]any{"NAMESPACE": "pay"})
	pay := dialADS(t, addr, &core.Node{Id: "pay-proxy", Metadata: md}, true)
	plain := dialADS(t, addr, envoyNode("plain"), false)
	for _, c := range []*adsClient{shop, pay, plain} {
		c.subscribe(translate.ClusterType)
		c.subscribe(translate.ListenerType)
		c.subscribe(translate.RouteType, "8080", "9090")
	}
	shop.until(all(
		holds(translate.ClusterType, cl(a.Hostname, 8080), cl(b.Hostname, 8080), cl(e.Hostname, 8080)),
		holds(translate.ListenerType, "0.0.0.0_8080"),
		func(st map[string]map[string]proto.Message) bool {
			return slices.Equal(vhostsOf(st, "8080"), []string{"a.shop.svc.cluster.local:8080", "b.shop.svc.cluster.local:8080", "e.vm.internal:8080"})
		}), nil)
	everything := []string{cl(a.Hostname, 8080), cl(b.Hostname, 8080), cl(c.Hostname, 8080), cl(d.Hostname, 9090), cl(e.Hostname, 8080)}
	pay.until(all(holds(translate.ClusterType, everything...), holds(translate.ListenerType, "0.0.0.0_8080", "0.0.0.0_9090")), nil)
	plain.until(all(holds(translate.ClusterType, everything...), // no namespace: not scoped
		holds(translate.ListenerType, "0.0.0.0_8080", "0.0.0.0_9090"),
		func(st map[string]map[string]proto.Message) bool { return len(vhostsOf(st, "8080")) == 4 }), nil)

	// An edit of the Sidecar: e leaves the shop's scope, a and b stay.
	srv.Update(snap(2, configOf(t, 2, sidecarYAML("./*")), a, b, c, d, e))
	for _, m := range shop.until(holds(translate.ClusterType, cl(a.Hostname, 8080), cl(b.Hostname, 8080)), nil) {
		if m.typeURL == translate.ClusterType && (m.resources[cl(a.Hostname, 8080)] == nil || m.resources[cl(b.Hostname, 8080)] == nil) {
			t.Errorf("a CDS response during the move lacks a cluster that stays in scope: %v", m.names())
		}
	}
	shop.until(func(st map[string]map[string]proto.Message) bool {
		return slices.Equal(vhostsOf(st, "8080"), []string{"a.shop.svc.cluster.local:8080", "b.shop.svc.cluster.local:8080"})
	}, nil)

	// Out of the shop's scope: c gains a port; then in scope: a does.
	// Until the shop holds a's new cluster, nothing it receives is of c.
	c2 := scopedService(c.Hostname, "pay", 8080, model.ProtocolHTTP)
	c2.Ports = append(c2.Ports, model.Port{Name: "http2", Number: 8081, Protocol: model.ProtocolHTTP})
	srv.Update(snap(3, configOf(t, 2, sidecarYAML("./*")), a, b, c2, d, e))
	a2 := scopedService(a.Hostname, "shop", 8080, model.ProtocolHTTP)
	a2.Ports = append(a2.Ports, model.Port{Name: "http2", Number: 8082, Protocol: model.ProtocolHTTP})
	srv.mu.Lock()
	cfg2 := srv.tr.Resources(translate.KindOf(translate.ClassEnvoy, translate.ClusterType))
	srv.mu.Unlock()
	if cfg2[cl(c.Hostname, 8081)] == nil {
		t.Fatal("c's new cluster is not served")
	}
	srv.Update(snap(4, configOf(t, 2, sidecarYAML("./*")), a2, b, c2, d, e))
	seen := shop.until(holds(translate.ClusterType, cl(a.Hostname, 8080), cl(b.Hostname, 8080), cl(a.Hostname, 8082)), nil)
	for _, m := range seen {
		for _, n := range m.names() {
			if strings.Contains(n, "c.pay") || strings.Contains(n, "8081") {
				t.Errorf("the out-of-scope change reached the shop: %s %v", m.typeURL, m.names())
			}
		}
	}
	pay.until(holds(translate.ClusterType, append(slices.Clone(everything), cl(c.Hostname, 8081), cl(a.Hostname, 8082))...), nil)

	// Proxyless gRPC subscribes by name and is not scoped.
	g := dialADS(t, addr, grpcNode("g"), false)
	g.subscribe(translate.ListenerType, "e.vm.internal:8080")
	g.until(holds(translate.ListenerType, "e.vm.internal:8080"), nil)
}

// TestConfigDumpShowsScope: /debug/config_dump of a scoped proxy names
// its view, its Sidecar and the hosts it sees; an unscoped one has none.
func TestConfigDumpShowsScope(t *testing.T) {
	t.Parallel()
	a := scopedService("a.shop.svc.cluster.local", "shop", 8080, model.ProtocolHTTP)
	b := scopedService("b.pay.svc.cluster.local", "pay", 8080, model.ProtocolHTTP)
	srv := NewServer(Options{})
	s := model.NewSnapshot(1, []*model.Service{a, b})
	s.Config = configOf(t, 1, sidecarYAML("./*"))
	srv.Update(s)
	addr := startServer(t, srv)
	shop := dialADS(t, addr, envoyNodeIn("web-1", "shop"), false)
	shop.subscribe(translate.ClusterType)
	shop.until(holds(translate.ClusterType, translate.ClusterName(a.Hostname, 8080)), nil)
	plain := dialADS(t, addr, envoyNode("plain"), false)
	plain.subscribe(translate.ClusterType)
	plain.until(holds(translate.ClusterType, translate.ClusterName(a.Hostname, 8080), translate.ClusterName(b.Hostname, 8080)), nil)

	var dump struct {
		Scope *Scope `json:"scope"`
	}
	raw, ok := srv.ConfigDump("sidecar~10.1.0.1~web-1.shop~shop.svc.cluster.local")
	if !ok {
		t.Fatal("no dump")
	}
	if err := json.Unmarshal(raw, &dump); err != nil {
		t.Fatal(err)
	}
	if dump.Scope == nil || dump.Scope.Sidecar != "shop/default" || !slices.Equal(dump.Scope.Hosts, []string{a.Hostname}) {
		t.Errorf("scope = %+v", dump.Scope)
	}
	raw, _ = srv.ConfigDump("plain")
	dump.Scope = nil
	if err := json.Unmarshal(raw, &dump); err != nil || dump.Scope != nil {
		t.Errorf("unscoped proxy: scope %+v (%v)", dump.Scope, err)
	}
}
