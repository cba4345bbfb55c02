package translate

import (
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/internal/testfixture"
)

const retryVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders, namespace: shop}
spec:
  hosts: [orders.vm.internal]
  http:
  - name: off
    match: [{headers: {x-off: {exact: "1"}}}]
    retries: {attempts: 0}
    route: [{destination: {host: orders.vm.internal}}]
  - name: hashed
    match: [{headers: {x-hash: {exact: "1"}}}]
    route: [{destination: {host: web.vm.internal, port: {number: 80}}}]
  - name: plain
    route: [{destination: {host: orders.vm.internal}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web, namespace: shop}
spec:
  host: web.vm.internal
  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}
`

// TestDefaultRetryPolicy: routes without retries get Istio's default
// policy (2 retries on its retryOn; Envoy avoids hosts already tried
// unless the route hashes), the default route of a service without rules
// too; attempts 0 turns retries off. gRPC gets retryOn and num_retries.
func TestDefaultRetryPolicy(t *testing.T) {
	t.Parallel()
	tr := NewTranslator()
	snap := model.NewSnapshot(1, testfixture.TrafficServices())
	snap.Config = configSnap(t, 1, retryVS)
	tr.Translate(snap)
	assertValid(t, tr)
	routes := func(vh *route.VirtualHost) map[string]*route.RetryPolicy {
		out := map[string]*route.RetryPolicy{}
		for _, r := range vh.GetRoutes() {
			out[r.GetName()] = r.GetRoute().GetRetryPolicy()
		}
		return out
	}
	isDefault := func(rp *route.RetryPolicy, envoy, avoid bool) bool {
		if rp.GetNumRetries().GetValue() != 2 || rp.GetRetryOn() != "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes" {
			return false
		}
		if !envoy {
			return len(rp.GetRetryHostPredicate()) == 0 && len(rp.GetRetriableStatusCodes()) == 0
		}
		return len(rp.GetRetriableStatusCodes()) == 1 && rp.GetRetriableStatusCodes()[0] == 503 &&
			(len(rp.GetRetryHostPredicate()) == 1) == avoid
	}
	// Envoy: port 8080's route configuration, orders' virtual host.
	var orders, billing *route.VirtualHost
	for _, vh := range tr.Resources(KindOf(ClassEnvoy, RouteType))["8080"].(*route.RouteConfiguration).GetVirtualHosts() {
		if vh.GetDomains()[0] == "orders.vm.internal" {
			orders = vh
		}
	}
	er := routes(orders)
	if er["off"] != nil {
		t.Errorf("envoy attempts 0: retry policy %v, want none", er["off"])
	}
	if !isDefault(er["plain"], true, true) {
		t.Errorf("envoy route without retries: %v, want Istio's default with previous hosts", er["plain"])
	}
	if !isDefault(er["hashed"], true, false) {
		t.Errorf("envoy hashed route: %v, want Istio's default without previous hosts", er["hashed"])
	}
	// The default route of billing (no rules) and of web (no
	// VirtualService, a DestinationRule that hashes).
	for _, vh := range tr.Resources(KindOf(ClassEnvoy, RouteType))["9000"].(*route.RouteConfiguration).GetVirtualHosts() {
		billing = vh
	}
	if rp := billing.GetRoutes()[0].GetRoute().GetRetryPolicy(); !isDefault(rp, true, true) {
		t.Errorf("envoy default route of a service without rules: %v", rp)
	}
	if rp := tr.Resources(KindOf(ClassEnvoy, RouteType))["80"].(*route.RouteConfiguration).GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetRetryPolicy(); !isDefault(rp, true, false) {
		t.Errorf("envoy default route of a hashed service: %v", rp)
	}
	// gRPC.
	gr := routes(tr.Resources(KindOf(ClassGRPC, RouteType))[GRPCListenerName("orders.vm.internal", 8080)].(*route.RouteConfiguration).GetVirtualHosts()[0])
	if gr["off"] != nil || !isDefault(gr["plain"], false, false) || !isDefault(gr["hashed"], false, false) {
		t.Errorf("grpc retry policies = %v", gr)
	}
	grpcBilling := tr.Resources(KindOf(ClassGRPC, RouteType))[GRPCListenerName("billing.pay.internal", 9000)].(*route.RouteConfiguration)
	if rp := grpcBilling.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetRetryPolicy(); !isDefault(rp, false, false) {
		t.Errorf("grpc default route: %v", rp)
	}
}
