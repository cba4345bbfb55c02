package istioconfig

import (
	"slices"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/istioconfig/drmerge"
)

// TestDestinationRuleMerge: rules for one host in one namespace merge
// oldest first (files: by path, then position): subsets are appended, a
// later subset of a name already defined is dropped, the oldest policy
// wins; /debug/configz lists the merge, and each rule stays in force.
func TestDestinationRuleMerge(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dr := func(name, body string) string {
		return "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: " + name + ", namespace: shop}\nspec:\n  host: reviews\n" + body
	}
	// z-first is in a.yaml: older than both rules of b.yaml, whatever the names.
	write(t, dir, "a.yaml", dr("z-first", "  subsets: [{name: v1, labels: {version: v1}}]\n  trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}\n"))
	write(t, dir, "b.yaml", dr("b-second", "  subsets: [{name: v2, labels: {version: v2}}, {name: v1, labels: {version: other}}]\n")+
		"---\n"+dr("a-third", "  trafficPolicy: {loadBalancer: {simple: RANDOM}}\n  subsets: [{name: v3, labels: {version: v3}}]\n"))
	s := New([]Dir{{Name: "d", Path: dir}}, nil)
	s.Reload()
	st := s.Status()
	if len(st.Rejected) != 0 || len(st.InForce) != 3 {
		t.Fatalf("in force %v, rejected %+v", keys(st), st.Rejected)
	}
	want := MergedRule{
		Host:            "reviews.shop.svc.cluster.local",
		Objects:         []string{"shop/z-first", "shop/b-second", "shop/a-third"},
		Policy:          "shop/z-first",
		IgnoredPolicies: []string{"shop/a-third"},
		DroppedSubsets:  []drmerge.DroppedSubset{{Subset: "v1", Object: "shop/b-second", KeptFrom: "shop/z-first"}},
	}
	if len(st.Merged) != 1 || !mergedEqual(st.Merged[0], want) {
		t.Fatalf("merged = %+v, want %+v", st.Merged, want)
	}
	// The translator sees the same merge through drmerge.
	m := drmerge.Merge(s.Snapshot().OfKind(KindDestinationRule))
	var names []string
	for _, sub := range m.Spec.GetSubsets() {
		names = append(names, sub.GetName()+"="+sub.GetLabels()["version"])
	}
	if !slices.Equal(names, []string{"v1=v1", "v2=v2", "v3=v3"}) {
		t.Errorf("merged subsets = %v", names)
	}
	if got := m.Spec.GetTrafficPolicy().GetLoadBalancer().GetSimple(); got != networking.LoadBalancerSettings_LEAST_REQUEST {
		t.Errorf("merged policy = %v, want the oldest rule's LEAST_REQUEST", got)
	}

	// Moving the oldest rule's document behind the others changes the order.
	write(t, dir, "a.yaml", "")
	write(t, dir, "c.yaml", dr("z-first", "  subsets: [{name: v1, labels: {version: v1}}]\n  trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}\n"))
	s.Reload()
	st = s.Status()
	if len(st.Merged) != 1 || st.Merged[0].Policy != "shop/a-third" || !strings.HasPrefix(st.Merged[0].DroppedSubsets[0].KeptFrom, "shop/b-second") {
		t.Errorf("after the move: merged = %+v", st.Merged)
	}
}

func mergedEqual(a, b MergedRule) bool {
	return a.Host == b.Host && slices.Equal(a.Objects, b.Objects) && a.Policy == b.Policy &&
		slices.Equal(a.IgnoredPolicies, b.IgnoredPolicies) && slices.Equal(a.DroppedSubsets, b.DroppedSubsets)
}
