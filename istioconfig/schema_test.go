package istioconfig

import (
	"os"
	"strings"
	"testing"
)

// TestRejectionPositions (issue 24 item 5): every problem of every object
// is reported at the line:column of its field in the file, an unknown
// field with the nearest known name, a value of the wrong type with what
// the field wants and what it got.
func TestRejectionPositions(t *testing.T) {
	t.Parallel()
	const file = "testdata/issue24-typos.yaml"
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	objs, rej := ParseObjects(file, data)
	if len(objs) != 0 || len(rej) != 2 {
		t.Fatalf("objects %v, rejections %v; want two rejections", objs, rej)
	}
	want := [][]string{{
		file + `:9:7 VirtualService shop/orders: spec.http[0].route[0].wieght: unknown field "wieght" of HTTPRouteDestination (did you mean "weight"?)`,
		file + `:10:14 VirtualService shop/orders: spec.http[0].timeout: want a duration string like "5s", got 5`,
		file + `:13:16 VirtualService shop/orders: spec.http[0].retries.retryOn "sometimes": unknown retry condition`,
	}, {
		file + `:21:28 DestinationRule shop/orders: spec.trafficPolicy.loadBalancer.simple: want one of UNSPECIFIED, LEAST_CONN, RANDOM, PASSTHROUGH, ROUND_ROBIN, LEAST_REQUEST, got "ROUND_ROBN" (did you mean "ROUND_ROBIN"?)`,
		file + `:26:19 DestinationRule shop/orders: spec.subsets[0].trafficPolicy.tls.mode ISTIO_MUTUAL: needs Istio workload certificates`,
		file + `:27:11 DestinationRule shop/orders: spec.subsets[1].name "V2": want a DNS-1123 label`,
	}}
	for i, r := range rej {
		got := strings.Split(r.String(), "\n")
		if len(got) != len(want[i]) {
			t.Errorf("rejection %d: %d lines, want %d:\n%s", i, len(got), len(want[i]), r)
			continue
		}
		for j, w := range want[i] {
			if !strings.HasPrefix(got[j], w) {
				t.Errorf("rejection %d line %d:\n got %s\nwant %s...", i, j, got[j], w)
			}
		}
	}
	// The config source reports the same problems at the same places.
	dir := t.TempDir()
	write(t, dir, "x.yaml", string(data))
	st := Validate(Dir{Name: "d", Path: dir})
	if len(st.Rejected) != 2 || len(st.InForce) != 0 {
		t.Fatalf("in force %v, rejected %v; want two rejections", keys(st), st.Rejected)
	}
	for _, r := range st.Rejected {
		if r.Name != "orders" || strings.Count(r.Reason, "\n") != 2 {
			t.Errorf("rejection %s: want 3 problems", r)
		}
	}
	if r := st.Rejected[0]; r.Kind == "VirtualService" && !strings.Contains(r.Reason, "10:14: spec.http[0].timeout: want a duration string") {
		t.Errorf("reason %q, want the timeout at 10:14", r.Reason)
	}
}
