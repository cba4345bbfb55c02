package translate

import (
	"slices"
	"strings"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/meshfed/meshfed/model"
)

// routeClusters lists, per route of the virtual host of host in the
// route configuration of class (Envoy: "<port>"; gRPC: the host's port
// listener), the clusters it sends to, and fails when one is not in the
// class's CDS.
func routeClusters(t *testing.T, tr *Translator, c Class, host string, port uint32) [][]string {
	t.Helper()
	name := EnvoyRouteName(port)
	if c == ClassGRPC {
		name = GRPCListenerName(host, port)
	}
	rc, ok := tr.Resources(KindOf(c, RouteType))[name].(*route.RouteConfiguration)
	if !ok {
		t.Fatalf("%s route configuration %s missing", c, name)
	}
	cds := tr.Resources(KindOf(c, ClusterType))
	var out [][]string
	for _, vh := range rc.GetVirtualHosts() {
		if !slices.Contains(vh.GetDomains(), host) {
			continue
		}
		for _, r := range vh.GetRoutes() {
			var cl []string
			if n := r.GetRoute().GetCluster(); n != "" {
				cl = append(cl, n)
			}
			for _, w := range r.GetRoute().GetWeightedClusters().GetClusters() {
				cl = append(cl, w.GetName())
			}
			for _, n := range cl {
				if _, ok := cds[n]; !ok {
					t.Errorf("%s route %s of %s points at %s, which is not in CDS", c, r.GetName(), host, n)
				}
			}
			out = append(out, cl)
		}
	}
	return out
}

func notesOf(tr *Translator, host string) []string {
	var out []string
	for _, n := range tr.TrafficNotes() {
		if n.Host == host && strings.Contains(n.Note, "left out") && strings.Contains(n.Note, "route") {
			out = append(out, n.Client+": "+n.Note)
		}
	}
	return out
}

const typoVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: a, namespace: shop}
spec:
  hosts: [a.vm.internal]
  http:
  - name: canary
    match: [{headers: {x-canary: {exact: "1"}}}]
    route: [{destination: {host: a.vm.internal, subset: v3}}]
  - name: split
    route:
    - {destination: {host: a.vm.internal, subset: v1}, weight: 90}
    - {destination: {host: b.vm.internal}, weight: 10}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: a, namespace: shop}
spec:
  host: a.vm.internal
  subsets: [{name: v1, labels: {version: v1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: c, namespace: shop}
spec:
  hosts: [c.vm.internal]
  http:
  - route: [{destination: {host: cc.vm.internal}}]
`

// A destination that names no cluster (subset no DestinationRule
// defines, host that is no service) is left out of its route, a route
// with none left is left out so the default route applies, and each is
// listed in TrafficNotes, for both client kinds. When the missing
// service appears, the route is rebuilt to it without a config change.
func TestMissingDestinationsLeftOut(t *testing.T) {
	t.Parallel()
	cfg := configSnap(t, 1, typoVS)
	a, c := testService("a.vm.internal", 80), testService("c.vm.internal", 80)
	tr := NewTranslator()
	s := model.NewSnapshot(1, []*model.Service{a, c})
	s.Config = cfg
	tr.Translate(s)
	for _, cl := range []Class{ClassEnvoy, ClassGRPC} {
		// canary (unknown subset v3) is left out; split keeps v1 only.
		if got, want := routeClusters(t, tr, cl, "a.vm.internal", 80), [][]string{{"outbound|80|v1|a.vm.internal"}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("%s routes of a = %v, want %v", cl, got, want)
		}
		if got, want := routeClusters(t, tr, cl, "c.vm.internal", 80), [][]string{{"outbound|80||c.vm.internal"}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("%s routes of c = %v, want the default route %v", cl, got, want)
		}
	}
	wantA := []string{
		"envoy: port 80 route canary: destination outbound|80|v3|a.vm.internal left out: subset v3 is defined by no DestinationRule of a.vm.internal",
		"envoy: port 80 route canary: no destination left, route left out (the default route applies)",
		"envoy: port 80 route split: destination outbound|80||b.vm.internal left out: host b.vm.internal is no known service",
		"grpc: port 80 route canary: destination outbound|80|v3|a.vm.internal left out: subset v3 is defined by no DestinationRule of a.vm.internal",
		"grpc: port 80 route canary: no destination left, route left out (the default route applies)",
		"grpc: port 80 route split: destination outbound|80||b.vm.internal left out: host b.vm.internal is no known service",
	}
	if got := notesOf(tr, "a.vm.internal"); !slices.Equal(got, wantA) {
		t.Errorf("notes of a:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantA, "\n"))
	}
	if got := notesOf(tr, "c.vm.internal"); len(got) != 4 {
		t.Errorf("notes of c = %q, want the unknown host cc and the dropped route for both kinds", got)
	}

	// b and cc appear: a and c are rebuilt (their deps changed).
	s2 := model.NewSnapshot(2, []*model.Service{a, c, testService("b.vm.internal", 80), testService("cc.vm.internal", 80)})
	s2.Config = cfg
	tr.Translate(s2)
	for _, cl := range []Class{ClassEnvoy, ClassGRPC} {
		if got, want := routeClusters(t, tr, cl, "a.vm.internal", 80), [][]string{{"outbound|80|v1|a.vm.internal", "outbound|80||b.vm.internal"}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("%s routes of a after b appeared = %v, want %v", cl, got, want)
		}
		if got, want := routeClusters(t, tr, cl, "c.vm.internal", 80), [][]string{{"outbound|80||cc.vm.internal"}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("%s routes of c after cc appeared = %v, want %v", cl, got, want)
		}
	}
	if got := notesOf(tr, "c.vm.internal"); len(got) != 0 {
		t.Errorf("notes of c after cc appeared = %q", got)
	}
}

// A destination without a port uses its service's only port; when that
// service's ports change (no config change), the route follows, as a
// from-scratch translation does.
func TestDestinationPortChangeRebuildsRoute(t *testing.T) {
	t.Parallel()
	cfg := configSnap(t, 1, `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: a, namespace: shop}
spec:
  hosts: [a.vm.internal]
  http:
  - route: [{destination: {host: b.vm.internal}}]
`)
	a := testService("a.vm.internal", 80)
	snap := func(v uint64, b *model.Service) *model.Snapshot {
		s := model.NewSnapshot(v, []*model.Service{a, b})
		s.Config = cfg
		return s
	}
	tr := NewTranslator()
	tr.Translate(snap(1, testService("b.vm.internal", 9090)))
	steps := []struct {
		b    *model.Service
		want string
	}{
		{testService("b.vm.internal", 80, 9090), "outbound|80||b.vm.internal"}, // several ports: the route's port
		{testService("b.vm.internal", 9090), "outbound|9090||b.vm.internal"},   // one port: that one
		{testService("b.vm.internal", 7070), "outbound|7070||b.vm.internal"},
	}
	for i, st := range steps {
		tr.Translate(snap(uint64(i+2), st.b))
		fresh := NewTranslator()
		fresh.Translate(snap(uint64(i+2), st.b))
		for _, cl := range []Class{ClassEnvoy, ClassGRPC} {
			got := routeClusters(t, tr, cl, "a.vm.internal", 80)
			want := routeClusters(t, fresh, cl, "a.vm.internal", 80)
			if !slices.EqualFunc(got, want, slices.Equal) || len(got) != 1 || got[0][0] != st.want {
				t.Errorf("step %d %s: incremental %v, from scratch %v, want %s", i, cl, got, want, st.want)
			}
		}
	}
}

// A route with several matches and no destination left is noted once.
func TestDroppedRouteNotedOnce(t *testing.T) {
	t.Parallel()
	cfg := configSnap(t, 1, strings.Replace(typoVS, `match: [{headers: {x-canary: {exact: "1"}}}]`,
		`match: [{headers: {x-canary: {exact: "1"}}}, {headers: {x-canary: {exact: "2"}}}]`, 1))
	tr := NewTranslator()
	s := model.NewSnapshot(1, []*model.Service{testService("a.vm.internal", 80), testService("c.vm.internal", 80)})
	s.Config = cfg
	tr.Translate(s)
	seen := map[string]int{}
	for _, n := range notesOf(tr, "a.vm.internal") {
		if seen[n]++; seen[n] == 2 {
			t.Errorf("note listed twice: %s", n)
		}
	}
	if seen["envoy: port 80 route canary: no destination left, route left out (the default route applies)"] == 0 {
		t.Errorf("notes = %v, want canary's route left out", notesOf(tr, "a.vm.internal"))
	}
}

// A destination that named a cluster when the VirtualService was applied
// and disappears later (its service leaves) keeps its place in the route:
// its traffic fails as in Istio rather than going to the routed host's own
// backends, with a note; when it is back the route is as before. Only a
// destination missing when the VirtualService is applied is left out.
func TestVanishedDestinationKeptInRoute(t *testing.T) {
	t.Parallel()
	const vs = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: legacy, namespace: shop}
spec:
  hosts: [legacy.vm.internal]
  http:
  - route: [{destination: {host: new.vm.internal}}]
`
	legacy, next := testService("legacy.vm.internal", 80), testService("new.vm.internal", 80)
	cfg := configSnap(t, 1, vs)
	tr := NewTranslator()
	translate := func(v uint64, cfg *model.ConfigSnapshot, svcs ...*model.Service) {
		s := model.NewSnapshot(v, svcs)
		s.Config = cfg
		tr.Translate(s)
	}
	clusters := func(c Class) []string {
		t.Helper()
		name := EnvoyRouteName(80)
		if c == ClassGRPC {
			name = GRPCListenerName("legacy.vm.internal", 80)
		}
		rc, _ := tr.Resources(KindOf(c, RouteType))[name].(*route.RouteConfiguration)
		var out []string
		for _, vh := range rc.GetVirtualHosts() {
			if slices.Contains(vh.GetDomains(), "legacy.vm.internal") {
				for _, r := range vh.GetRoutes() {
					out = append(out, r.GetRoute().GetCluster())
				}
			}
		}
		return out
	}
	want := []string{"outbound|80||new.vm.internal"}
	translate(1, cfg, legacy, next)
	translate(2, cfg, legacy) // new leaves
	for _, c := range []Class{ClassEnvoy, ClassGRPC} {
		if got := clusters(c); !slices.Equal(got, want) {
			t.Errorf("%s: after new left, routes of legacy = %v, want %v (fail, not misroute)", c, got, want)
		}
	}
	if n := notesOf(tr, "legacy.vm.internal"); len(n) != 0 {
		t.Errorf("kept destination noted as left out: %v", n)
	}
	var kept int
	for _, n := range tr.TrafficNotes() {
		if n.Host == "legacy.vm.internal" && strings.Contains(n.Note, "destination outbound|80||new.vm.internal kept") {
			kept++
		}
	}
	if kept != 2 {
		t.Errorf("notes = %v, want one 'kept' note per client kind", tr.TrafficNotes())
	}
	translate(3, cfg, legacy, next) // back
	for _, c := range []Class{ClassEnvoy, ClassGRPC} {
		if got := clusters(c); !slices.Equal(got, want) {
			t.Errorf("%s: after new came back, routes = %v, want %v", c, got, want)
		}
	}
	if len(tr.TrafficNotes()) != 0 {
		t.Errorf("notes after new came back: %v", tr.TrafficNotes())
	}
	// A VirtualService applied while its destination is missing (a typo)
	// has it left out: the default route applies.
	tr2 := NewTranslator()
	s := model.NewSnapshot(1, []*model.Service{legacy})
	s.Config = configSnap(t, 1, vs)
	tr2.Translate(s)
	if got := routeClusters(t, tr2, ClassEnvoy, "legacy.vm.internal", 80); len(got) != 1 || got[0][0] != "outbound|80||legacy.vm.internal" {
		t.Errorf("destination missing at apply: routes = %v, want the default route", got)
	}
}
