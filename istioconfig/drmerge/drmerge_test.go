package drmerge

import (
	"slices"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/model"
)

// TestMergeByCreationTime: Kubernetes objects merge by creationTimestamp
// (not by name), before objects read from files; the inputs are not
// modified.
func TestMergeByCreationTime(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	obj := func(name string, created time.Time, file string, tp *networking.TrafficPolicy, subsets ...string) *model.ConfigObject {
		dr := &networking.DestinationRule{Host: "r.shop.svc.cluster.local", TrafficPolicy: tp}
		for _, s := range subsets {
			dr.Subsets = append(dr.Subsets, &networking.Subset{Name: s})
		}
		return &model.ConfigObject{Kind: "DestinationRule", Namespace: "shop", Name: name, Created: created, File: file, Spec: dr}
	}
	lr := &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_LEAST_REQUEST}}}
	rr := &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_ROUND_ROBIN}}}
	fromFile := obj("a-file", time.Time{}, "/x.yaml", rr, "v1", "v9")
	young := obj("a-young", t0.Add(time.Hour), "", nil, "v2", "v1")
	old := obj("z-old", t0, "", nil, "v1")
	mid := obj("m-mid", t0.Add(time.Minute), "", lr, "v3")
	in := []*model.ConfigObject{fromFile, young, old, mid}
	r := Merge(in)
	var from []string
	for _, o := range r.From {
		from = append(from, o.Name)
	}
	if !slices.Equal(from, []string{"z-old", "m-mid", "a-young", "a-file"}) {
		t.Fatalf("order = %v", from)
	}
	var subs []string
	for _, s := range r.Spec.GetSubsets() {
		subs = append(subs, s.GetName())
	}
	if !slices.Equal(subs, []string{"v1", "v3", "v2", "v9"}) {
		t.Errorf("subsets = %v", subs)
	}
	if r.Spec.GetTrafficPolicy() != lr {
		t.Errorf("policy = %v, want the oldest rule with a policy (m-mid)", r.Spec.GetTrafficPolicy())
	}
	if !slices.Equal(r.IgnoredPolicies, []string{"shop/a-file"}) {
		t.Errorf("ignored policies = %v", r.IgnoredPolicies)
	}
	want := []DroppedSubset{{Subset: "v1", Object: "shop/a-young", KeptFrom: "shop/z-old"}, {Subset: "v1", Object: "shop/a-file", KeptFrom: "shop/z-old"}}
	if !slices.Equal(r.DroppedSubsets, want) {
		t.Errorf("dropped = %+v", r.DroppedSubsets)
	}
	if in[0] != fromFile || len(old.Spec.(*networking.DestinationRule).Subsets) != 1 {
		t.Error("Merge modified its input")
	}
	if one := Merge([]*model.ConfigObject{old}); one.Spec != old.Spec {
		t.Error("a single rule is not served as it is")
	}
}
