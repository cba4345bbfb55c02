package translate

import (
	"strings"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/internal/testfixture"
)

// A directResponse body the validation accepts (here 64 KiB, above
// Envoy's default 4 KiB limit) fits the route configuration's
// max_direct_response_body_size_bytes, so Envoy accepts the route
// configuration of the port (and of every other host on it).
func TestDirectResponseBodyFitsEnvoyLimit(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("x", 64<<10)
	yaml := "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: web, namespace: shop}\nspec:\n  hosts: [web.vm.internal]\n" +
		"  http:\n  - directResponse: {status: 503, body: {string: " + body + "}}\n"
	objs, rej := istioconfig.ParseObjects("t.yaml", []byte(yaml))
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
	rc, _ := tr.Resources(KindOf(ClassEnvoy, RouteType))["80"].(*route.RouteConfiguration)
	var got string
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			if b := r.GetDirectResponse().GetBody().GetInlineString(); b != "" {
				got = b
			}
		}
	}
	if got != body {
		t.Fatalf("route configuration 80 holds a %d-byte direct response body, want %d", len(got), len(body))
	}
	if max := rc.GetMaxDirectResponseBodySizeBytes(); max == nil || max.GetValue() < uint32(len(body)) {
		t.Errorf("max_direct_response_body_size_bytes = %v, want at least %d (Envoy refuses the route configuration otherwise)", max, len(body))
	}
	if max := rc.GetMaxDirectResponseBodySizeBytes().GetValue(); max != istioconfig.MaxDirectResponseBodyBytes {
		t.Errorf("max_direct_response_body_size_bytes = %d, want the validation's limit %d", max, istioconfig.MaxDirectResponseBodyBytes)
	}
}
