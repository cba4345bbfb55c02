package translate

import (
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	fault "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/internal/testfixture"
)

// Fault and mirror percentages mean what they mean in Istio (its
// TranslateFault and MirrorPercent): a fault without percentage applies
// to no request ("If not specified, no request will be aborted"), the
// deprecated integer delay.percent counts when percentage is unset; a
// mirror without percentage copies every request, the deprecated
// mirrorPercent counts when mirrorPercentage is unset, an explicit 0
// mirrors nothing. Per million; -1: no fault / no mirror.
func TestFaultAndMirrorPercent(t *testing.T) {
	t.Parallel()
	const head = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: web, namespace: shop}\nspec:\n  hosts: [web.vm.internal]\n  http:\n  - name: r\n    route: [{destination: {host: web.vm.internal}}]\n"
	for _, tc := range []struct {
		name                 string
		rule                 string
		delay, abort, mirror int
	}{
		{"abort unset", "    fault: {abort: {httpStatus: 503}}\n", -1, 0, -1},
		{"abort 25", "    fault: {abort: {httpStatus: 503, percentage: {value: 25}}}\n", -1, 250000, -1},
		{"delay unset", "    fault: {delay: {fixedDelay: 1s}}\n", 0, -1, -1},
		{"delay deprecated percent", "    fault: {delay: {fixedDelay: 1s, percent: 30}}\n", 300000, -1, -1},
		{"delay percentage wins", "    fault: {delay: {fixedDelay: 1s, percent: 30, percentage: {value: 2.5}}}\n", 25000, -1, -1},
		{"mirror unset", "    mirror: {host: orders.vm.internal, port: {number: 8081}}\n", -1, -1, 1000000},
		{"mirror deprecated percent", "    mirror: {host: orders.vm.internal, port: {number: 8081}}\n    mirrorPercent: 40\n", -1, -1, 400000},
		{"mirror deprecated 0", "    mirror: {host: orders.vm.internal, port: {number: 8081}}\n    mirrorPercent: 0\n", -1, -1, -1},
		{"mirror percentage wins", "    mirror: {host: orders.vm.internal, port: {number: 8081}}\n    mirrorPercent: 40\n    mirrorPercentage: {value: 0}\n", -1, -1, -1},
		{"mirrors unset", "    mirrors: [{destination: {host: orders.vm.internal, port: {number: 8081}}}]\n", -1, -1, 1000000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			objs, rej := istioconfig.ParseObjects("t.yaml", []byte(head+tc.rule))
			if len(rej) != 0 {
				t.Fatalf("rejected: %v", rej)
			}
			tr := NewTranslator()
			snap := model.NewSnapshot(1, testfixture.TrafficServices())
			snap.Config = model.NewConfigSnapshot(1, objs)
			tr.Translate(snap)
			assertValid(t, tr)
			if in := tr.Invalid(); len(in) != 0 {
				t.Fatalf("Invalid() = %v, want none", in)
			}
			var r *route.Route
			for _, vh := range tr.Resources(KindOf(ClassEnvoy, RouteType))["80"].(*route.RouteConfiguration).GetVirtualHosts() {
				for _, x := range vh.GetRoutes() {
					if x.GetName() == "r" {
						r = x
					}
				}
			}
			if r == nil {
				t.Fatal("route r not in route configuration 80")
			}
			delay, abort, mirror := -1, -1, -1
			if a := r.GetTypedPerFilterConfig()[wellknown.Fault]; a != nil {
				f := &fault.HTTPFault{}
				if err := a.UnmarshalTo(f); err != nil {
					t.Fatal(err)
				}
				if f.GetDelay() != nil {
					delay = int(f.GetDelay().GetPercentage().GetNumerator())
				}
				if f.GetAbort() != nil {
					abort = int(f.GetAbort().GetPercentage().GetNumerator())
				}
			}
			if m := r.GetRoute().GetRequestMirrorPolicies(); len(m) > 0 {
				mirror = int(m[0].GetRuntimeFraction().GetDefaultValue().GetNumerator())
			}
			if delay != tc.delay || abort != tc.abort || mirror != tc.mirror {
				t.Errorf("per million: delay %d, abort %d, mirror %d; want %d, %d, %d", delay, abort, mirror, tc.delay, tc.abort, tc.mirror)
			}
		})
	}
}
