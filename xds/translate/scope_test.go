package translate

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/encoding/protojson"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/internal/testfixture"
)

const scopeConfig = `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: pay-only, namespace: pay}
spec:
  egress:
  - hosts: ["./*", "vms/web.vm.internal"]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: istio-system}
spec:
  egress:
  - hosts: ["./*", "vms/web.vm.internal"]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: db-clients, namespace: vms}
spec:
  workloadSelector: {labels: {role: db-client}}
  egress:
  - hosts: ["*/*.internal", "~vms/orders.vm.internal"]
`

// scopedSnapshot: the traffic fixture with orders, web and db in
// namespace vms and billing in pay, exported only there.
func scopedSnapshot(t *testing.T, version uint64) *model.Snapshot {
	t.Helper()
	svcs := testfixture.TrafficServices()
	for _, s := range svcs {
		s.Namespace = "vms"
		if s.Hostname == "billing.pay.internal" {
			s.Namespace, s.ExportTo = "pay", []string{"."}
		}
	}
	objs, rej := istioconfig.ParseObjects("traffic.yaml", []byte(testfixture.TrafficConfig+"---\n"+scopeConfig))
	if len(rej) > 0 {
		t.Fatalf("rejected: %v", rej)
	}
	snap := model.NewSnapshot(version, svcs)
	snap.Config = model.NewConfigSnapshot(version, objs)
	return snap
}

// viewResources is what the proxies of view key read of the scoped
// collections: its entries over the translator's collections.
func viewResources(tr *Translator, key string) map[Kind]map[string]types.Resource {
	v := tr.views[key]
	out := map[Kind]map[string]types.Resource{}
	for _, k := range scopedKinds {
		out[k] = map[string]types.Resource{}
		es := v.entries[k]
		if v.all {
			for n, r := range tr.current[k] {
				if _, listed := es[n]; !listed {
					out[k][n] = r
				}
			}
		}
		for n, e := range es {
			switch {
			case e.Own != nil:
				out[k][n] = e.Own
			case !v.all:
				out[k][n] = tr.current[k][n]
			}
		}
	}
	return out
}

// TestScopedViewsGolden: the views of proxies in four namespaces, over
// the traffic fixture: a Sidecar's egress hosts, the root namespace's
// default, a workloadSelector, exportTo, a sourceLabels match, and the
// destinations of an imported host's VirtualService (Istio imports them)
// each shape what the view holds; every resource of a view passes
// ValidateAll.
func TestScopedViewsGolden(t *testing.T) {
	t.Parallel()
	tr := NewTranslator()
	tr.Translate(scopedSnapshot(t, 1))
	proxies := []struct {
		name string
		p    Proxy
	}{
		{"shop frontend (the root namespace's default; a sourceLabels match)", Proxy{Namespace: "shop", Labels: map[string]string{"app": "frontend"}}},
		{"pay (its namespace's Sidecar)", Proxy{Namespace: "pay"}},
		{"other (the root namespace's default)", Proxy{Namespace: "other"}},
		{"vms db client (workloadSelector; ~ excludes orders, which web's VirtualService imports back)", Proxy{Namespace: "vms", Labels: map[string]string{"role": "db-client"}}},
	}
	out := map[string]map[string][]json.RawMessage{}
	for _, px := range proxies {
		key := tr.ScopeKey(px.p)
		if key == "" {
			t.Fatalf("%s: not scoped", px.name)
		}
		tr.ViewFor(key, px.p)
		view := map[string][]json.RawMessage{}
		for k, rs := range viewResources(tr, key) {
			for _, n := range slices.Sorted(maps.Keys(rs)) {
				if err := validate(rs[n]); err != nil {
					t.Errorf("%s: %s %s: ValidateAll: %v", px.name, ShortType(k.TypeURL), n, err)
				}
				b, err := protojson.Marshal(rs[n])
				if err != nil {
					t.Fatal(err)
				}
				view[ShortType(k.TypeURL)] = append(view[ShortType(k.TypeURL)], b)
			}
		}
		sc, hosts, _ := tr.Scope(key)
		h, _ := json.Marshal(map[string]any{"sidecar": sc, "hosts": hosts})
		view["scope"] = []json.RawMessage{h}
		out[px.name] = view
	}
	golden(t, "scoped-views.golden", indentedJSON(t, out))

	// A proxy with no namespace, and one that sees everything, read the
	// collections unscoped.
	if k := tr.ScopeKey(Proxy{}); k != "" {
		t.Errorf("no namespace: key %q, want unscoped", k)
	}
}

// TestScopeKeys: proxies that see the same share a key; what changes the
// view changes the key; everything shared is unscoped.
func TestScopeKeys(t *testing.T) {
	t.Parallel()
	tr := NewTranslator()
	plain := testfixture.TrafficServices()
	tr.Translate(model.NewSnapshot(1, plain))
	if k := tr.ScopeKey(Proxy{Namespace: "shop"}); k != "" {
		t.Errorf("nothing scoped: key %q, want \"\"", k)
	}
	tr.Translate(scopedSnapshot(t, 2))
	a := tr.ScopeKey(Proxy{Namespace: "shop", Labels: map[string]string{"app": "frontend", "pod": "a"}})
	b := tr.ScopeKey(Proxy{Namespace: "shop", Labels: map[string]string{"app": "frontend", "pod": "b"}})
	c := tr.ScopeKey(Proxy{Namespace: "shop", Labels: map[string]string{"app": "backend"}})
	if a != b || a == c {
		t.Errorf("keys %q %q %q: want the first two equal, the third apart", a, b, c)
	}
	if x, y := tr.ScopeKey(Proxy{Namespace: "vms"}), tr.ScopeKey(Proxy{Namespace: "vms", Labels: map[string]string{"role": "db-client"}}); x == y {
		t.Errorf("a workloadSelector does not change the key: %q", x)
	}
}

// TestViewUpdatesFollowChanges: a change inside a view updates its
// entries; one outside it leaves them alone; an edited Sidecar re-scopes
// the view in place.
func TestViewUpdatesFollowChanges(t *testing.T) {
	t.Parallel()
	tr := NewTranslator()
	snap := scopedSnapshot(t, 1)
	tr.Translate(snap)
	pay := Proxy{Namespace: "pay"}
	key := tr.ScopeKey(pay)
	tr.ViewFor(key, pay)
	tr.ViewUpdates()
	cds := KindOf(ClassEnvoy, ClusterType)
	names := func() []string { return slices.Sorted(maps.Keys(viewResources(tr, key)[cds])) }
	want := []string{"outbound|8080|v1|orders.vm.internal", "outbound|8080|v2|orders.vm.internal", "outbound|8080||orders.vm.internal",
		"outbound|8081|v1|orders.vm.internal", "outbound|8081|v2|orders.vm.internal", "outbound|8081||orders.vm.internal", // web's VirtualService mirrors to orders
		"outbound|80|v1|web.vm.internal", "outbound|80|v2|web.vm.internal", "outbound|80||web.vm.internal", "outbound|9000||billing.pay.internal"}
	if got := names(); !slices.Equal(got, want) {
		t.Fatalf("pay's clusters = %v, want %v", got, want)
	}
	// db (out of scope) gains a port: no update of the view.
	svcs := slices.Clone(snap.Services())
	db := *svcs[slices.IndexFunc(svcs, func(s *model.Service) bool { return s.Hostname == "db.vm.internal" })]
	db.Ports = append(slices.Clone(db.Ports), model.Port{Name: "tcp2", Number: 5433, Protocol: model.ProtocolTCP})
	next := model.NewSnapshot(2, testfixture.Replace(svcs, "db.vm.internal", &db))
	next.Config = snap.Config
	tr.Translate(next)
	if ups := tr.ViewUpdates(); len(ups) != 0 {
		t.Errorf("an out-of-scope change updated the view: %+v", ups)
	}
	// web (in scope) gains a port: the view gets its cluster.
	web := *next.Services()[slices.IndexFunc(next.Services(), func(s *model.Service) bool { return s.Hostname == "web.vm.internal" })]
	web.Ports = append(slices.Clone(web.Ports), model.Port{Name: "http2", Number: 81, Protocol: model.ProtocolHTTP})
	third := model.NewSnapshot(3, testfixture.Replace(next.Services(), "web.vm.internal", &web))
	third.Config = snap.Config
	tr.Translate(third)
	ups := tr.ViewUpdates()
	if len(ups) != 1 || ups[0].Key != key || ups[0].Changes[cds] == nil {
		t.Fatalf("in-scope change: updates %+v", ups)
	}
	if _, ok := ups[0].Changes[cds].Set["outbound|81||web.vm.internal"]; !ok {
		t.Errorf("the new cluster is not in the update: %+v", ups[0].Changes[cds])
	}
	if rc, _ := viewResources(tr, key)[KindOf(ClassEnvoy, RouteType)]["81"].(*route.RouteConfiguration); len(rc.GetVirtualHosts()) != 1 {
		t.Errorf("route configuration 81 of the view = %v", rc)
	}
}

// TestRootNamespace: the root namespace's Sidecar without a selector is
// every namespace's default; the root namespace is configurable.
func TestRootNamespace(t *testing.T) {
	t.Parallel()
	sc := &model.ConfigObject{Kind: istioconfig.KindSidecar, Namespace: "mesh-root", Name: "default", Spec: &networking.Sidecar{}}
	snap := model.NewSnapshot(1, testfixture.TrafficServices())
	snap.Config = model.NewConfigSnapshot(1, []*model.ConfigObject{sc})
	tr := NewTranslator()
	tr.Translate(snap)
	if k := tr.ScopeKey(Proxy{Namespace: "shop"}); k != "" {
		t.Errorf("a Sidecar outside istio-system selected a shop proxy: key %q", k)
	}
	tr = NewTranslator()
	tr.SetRootNamespace("mesh-root")
	tr.Translate(snap)
	if k := tr.ScopeKey(Proxy{Namespace: "shop"}); k != "shop|mesh-root/default|" {
		t.Errorf("key %q, want the root namespace's Sidecar", k)
	}
}
