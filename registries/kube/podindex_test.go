package kube

import (
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// TestPodIndex: the index names the services whose slices list a pod,
// through a move between two slices of one service, a pod listed by two
// services, and deletions; it holds nothing once every slice is gone.
func TestPodIndex(t *testing.T) {
	t.Parallel()
	x := newPodIndex()
	h := x.handler()
	slice := func(name, svc string, pods ...string) *discoveryv1.EndpointSlice {
		var eps []epSpec
		for i, p := range pods {
			eps = append(eps, epSpec{addr: "192.0.2." + string(rune('1'+i)), pod: p})
		}
		return sliceObj("shop", name, svc, discoveryv1.AddressTypeIPv4, map[string]int32{"http": 80}, eps...)
	}
	want := func(pod string, svcs ...string) {
		t.Helper()
		var got []string
		for _, k := range x.services(podRef{"shop", pod}) {
			got = append(got, k.name)
		}
		slices.Sort(got)
		if !slices.Equal(got, svcs) {
			t.Errorf("services of pod %s = %v, want %v", pod, got, svcs)
		}
	}
	a1 := slice("a-1", "a", "p1", "p2")
	h.OnAdd(a1, true)
	want("p1", "a")
	want("p2", "a")
	a2 := slice("a-2", "a", "p2") // p2 moving from a-1 to a-2
	h.OnAdd(a2, false)
	a1b := slice("a-1", "a", "p1")
	h.OnUpdate(a1, a1b)
	want("p2", "a")
	b := slice("b-1", "b", "p1") // p1 backs services a and b
	h.OnAdd(b, false)
	want("p1", "a", "b")
	h.OnDelete(b)
	want("p1", "a")
	h.OnDelete(a2)
	want("p2")
	h.OnDelete(a1b)
	want("p1")
	if len(x.one) != 0 || len(x.more) != 0 {
		t.Errorf("index holds %d + %d pods after every slice went", len(x.one), len(x.more))
	}
}
