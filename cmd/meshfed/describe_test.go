package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/config"
	"github.com/meshfed/meshfed/explain"
	"github.com/meshfed/meshfed/gateway"
	"github.com/meshfed/meshfed/test/servers"
)

// describeServices are the services of the describe tests' file registry:
// orders as in examples/services.yaml, one more v1 endpoint that is
// DRAINING and one the gate quarantines; payments on two ports.
const describeServices = `services:
  - name: orders
    ports: [{name: grpc, port: 8080, protocol: GRPC}]
    endpoints:
      - {address: 127.0.0.1, ports: {grpc: 18080}, labels: {version: v1}, locality: us-east/us-east-1a}
      - {address: 127.0.0.11, labels: {version: v2}, locality: us-east/us-east-1b}
      - {address: 127.0.0.12, labels: {version: v1}, locality: us-east/us-east-1b, health: DRAINING}
      - {address: 127.0.0.300, labels: {version: v1}}
  - name: payments
    ports: [{name: grpc, port: 9090, protocol: GRPC}, {name: http, port: 9091, protocol: HTTP}]
    endpoints:
      - {address: 127.0.0.21, labels: {track: stable}}
      - {address: 127.0.0.22, labels: {track: canary}, health: DEGRADED}
`

// describeRules are traffic rules beside examples/traffic: a second
// DestinationRule for orders (merged with the example's: its policy, and
// a subset v2 dropped as a duplicate), rejected VirtualServices, and
// payments' rules with per-port and per-subset policies and route
// policies.
const describeRules = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders-policy, namespace: shop}
spec:
  host: orders.vm.internal
  trafficPolicy:
    loadBalancer:
      simple: LEAST_REQUEST
      localityLbSetting: {failover: [{from: us-east, to: us-west}]}
    outlierDetection: {consecutive5xxErrors: 3, interval: 10s, baseEjectionTime: 30s}
    connectionPool: {tcp: {maxConnections: 100}}
    tls: {mode: SIMPLE, caCertificates: /etc/meshfed/ca.pem}
  subsets:
  - {name: v2, labels: {version: two}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders-bad, namespace: shop}
spec:
  hosts: [orders.vm.internal]
  http: [{route: [{destination: {subset: v3}}]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web-bad, namespace: shop}
spec:
  hosts: [web.vm.internal]
  http: [{route: [{destination: {subset: v3}}]}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: payments, namespace: shop}
spec:
  host: payments.vm.internal
  trafficPolicy:
    loadBalancer: {simple: ROUND_ROBIN}
    portLevelSettings:
    - port: {number: 9091}
      connectionPool: {http: {http1MaxPendingRequests: 10}}
  subsets:
  - name: stable
    labels: {track: stable}
  - name: canary
    labels: {track: canary}
    trafficPolicy: {loadBalancer: {simple: RANDOM}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: payments, namespace: shop}
spec:
  hosts: [payments.vm.internal]
  http:
  - name: main
    timeout: 2s
    retries: {attempts: 3, perTryTimeout: 500ms, retryOn: 5xx}
    fault: {abort: {httpStatus: 503, percentage: {value: 50}}}
    mirror: {host: orders.vm.internal, subset: v1}
    route:
    - destination: {host: payments.vm.internal, subset: stable, port: {number: 9090}}
`

// describeGateway runs a real gateway (file registry, a traffic
// directory with examples/traffic and describeRules) until the test
// ends, and returns its admin URL once it serves every rule, and its
// directory.
func describeGateway(t *testing.T) (url, dir string) {
	t.Helper()
	dir = t.TempDir()
	traffic := filepath.Join(dir, "traffic")
	if err := os.Mkdir(traffic, 0o755); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("../../examples/traffic/*.yaml")
	if len(files) != 2 {
		t.Fatalf("examples/traffic: %v, want 2 files", files)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		writeTestFile(t, filepath.Join(traffic, filepath.Base(f)), string(data))
	}
	writeTestFile(t, filepath.Join(traffic, "policy.yaml"), describeRules)
	writeTestFile(t, filepath.Join(dir, "services.yaml"), describeServices)
	admin := fmt.Sprintf("127.0.0.1:%d", servers.LowPort(t))
	cfg, err := config.Parse(filepath.Join(dir, "clusters.yaml"), []byte(fmt.Sprintf(`xds: {address: "127.0.0.1:%d"}
admin: {address: "%s"}
debounce: {quiet: 1ms, max: 10ms}
registries:
  - {name: vms, kind: file, domain: vm.internal, file: {path: services.yaml}}
configSources:
  - {name: local, dir: traffic}
`, servers.LowPort(t), admin)))
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.NewGateway(cfg, gateway.GatewayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	url = "http://" + admin
	deadline := time.Now().Add(20 * time.Second)
	for {
		var d explain.Description
		resp, err := http.Get(url + "/debug/describez?host=payments.vm.internal")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&d)
			resp.Body.Close()
		}
		if err == nil && len(d.Traffic.VirtualServices) == 1 {
			return url, dir
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway does not serve the rules of payments: %v %+v", err, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDescribe runs describe against a real gateway: HOST shows the
// VirtualService and DestinationRules in force for the host with their
// sources (merged as Istio merges them), the subsets with the endpoints
// they select, the route table (header match, 90/10 split) with the
// routes' policies, the policies in force per port and subset, what was
// rejected for the host and its notForClients notes, in the table and in
// -o json/yaml; --endpoint says why an endpoint is or is not in each
// client's EDS; an unknown host or endpoint fails with a did-you-mean.
func TestDescribe(t *testing.T) {
	t.Parallel()
	url, dir := describeGateway(t)
	// describe runs the command; sources are shown relative to dir.
	describe := func(t *testing.T, args ...string) (string, string, error) {
		out, errOut, err := execute(t, append([]string{"describe", "--admin", url}, args...)...)
		return strings.ReplaceAll(out, dir+string(filepath.Separator), ""), errOut, err
	}
	t.Run("host", func(t *testing.T) {
		t.Parallel()
		out, errOut, err := describe(t, "orders.vm.internal")
		if err != nil {
			t.Fatalf("describe: %v\n%s", err, errOut)
		}
		for _, want := range []string{
			"Service:     orders.vm.internal",
			"127.0.0.1:18080",
			"Traffic rules: 3 in force",
			"VirtualService   shop/orders         traffic/orders-canary.yaml:5",
			"DestinationRule  shop/orders         traffic/orders-subsets.yaml:4",
			"DestinationRule  shop/orders-policy  traffic/policy.yaml:1",
			"subset v2 of shop/orders-policy dropped: shop/orders defines it",
			"  v1    version=v1  2          shop/orders",
			"  v2    version=v2  1          shop/orders",
			`http canary-header  header x-canary="yes"  → 100% orders.vm.internal subset v2`,
			"http split          *                      → 90% orders.vm.internal subset v1, 10% orders.vm.internal subset v2",
			"http split: retries default: 2 retries on connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes [503]",
			"loadBalancer      LEAST_REQUEST, locality failover us-east→us-west                (shop/orders-policy)",
			"outlierDetection  eject after 3 consecutive 5xx, interval 10s, base ejection 30s",
			"connectionPool    max 100 connections",
			"tls               SIMPLE, ca /etc/meshfed/ca.pem",
			"Rejected:    1",
			"VirtualService shop/orders-bad:",
			"Not for clients:\n  grpc: ",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("describe lacks %q:\n%s", want, out)
			}
		}
		for _, not := range []string{"web-bad", "not about orders"} {
			if strings.Contains(out, not) {
				t.Errorf("describe shows %q:\n%s", not, out)
			}
		}

		out, _, err = describe(t, "orders.vm.internal", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var d explain.Description
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("-o json: %v\n%s", err, out)
		}
		tr := d.Traffic
		if len(tr.VirtualServices) != 1 || tr.VirtualServices[0].Source != "traffic/orders-canary.yaml:5" ||
			len(tr.DestinationRules) != 2 || tr.DestinationRules[1].Name != "orders-policy" {
			t.Errorf("-o json rules: %+v %+v", tr.VirtualServices, tr.DestinationRules)
		}
		if len(tr.Subsets) != 2 || tr.Subsets[0].Name != "v1" || tr.Subsets[0].Endpoints != 2 || tr.Subsets[1].Endpoints != 1 ||
			tr.Subsets[1].Labels["version"] != "v2" || len(tr.DroppedSubsets) != 1 {
			t.Errorf("-o json subsets: %+v dropped %+v", tr.Subsets, tr.DroppedSubsets)
		}
		if len(tr.RouteTable) != 2 || tr.RouteTable[0].Match[0] != `header x-canary="yes"` ||
			len(tr.RouteTable[1].Destinations) != 2 ||
			tr.RouteTable[1].Destinations[0] != (explain.Weighted{Host: "orders.vm.internal", Subset: "v1", Weight: 90}) ||
			tr.RouteTable[1].Destinations[1] != (explain.Weighted{Host: "orders.vm.internal", Subset: "v2", Weight: 10}) {
			t.Errorf("-o json route table: %+v", tr.RouteTable)
		}
		if len(tr.Policies) != 4 || len(tr.Rejected) != 1 || tr.Rejected[0].Name != "orders-bad" || len(tr.NotForClients) == 0 {
			t.Errorf("-o json policies %+v, rejected %+v, notes %+v", tr.Policies, tr.Rejected, tr.NotForClients)
		}
		if len(d.Conflicts) != 1 || d.Conflicts[0].Subject != "127.0.0.300 (services.yaml:8)" {
			t.Errorf("-o json conflicts: %+v", d.Conflicts)
		}
		out, _, err = describe(t, "orders.vm.internal", "-o", "yaml")
		if err != nil || !strings.Contains(out, "routeTable:") || !strings.Contains(out, "weight: 90") {
			t.Errorf("-o yaml: %v\n%s", err, out)
		}
	})

	t.Run("policies per port and subset", func(t *testing.T) {
		t.Parallel()
		out, errOut, err := describe(t, "payments.vm.internal")
		if err != nil {
			t.Fatalf("describe: %v\n%s", err, errOut)
		}
		for _, want := range []string{
			"loadBalancer    ROUND_ROBIN              (shop/payments port 9090)",
			"loadBalancer    ROUND_ROBIN              (shop/payments port 9091)",
			"connectionPool  max 10 pending requests  (shop/payments port 9091)",
			"loadBalancer    RANDOM                   (shop/payments subset canary)",
			"main: timeout 2s; retries 3 retries on 5xx, per try 500ms; fault abort http 503 for 50%; mirror orders.vm.internal subset v1 (100%)",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("describe payments lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("endpoint", func(t *testing.T) {
		t.Parallel()
		out, errOut, err := describe(t, "orders.vm.internal", "--endpoint", "127.0.0.1")
		if err != nil {
			t.Fatalf("describe --endpoint: %v\n%s", err, errOut)
		}
		for _, want := range []string{
			"Endpoint:    127.0.0.1 of orders.vm.internal",
			"Scope:       not scoped: every proxy",
			"127.0.0.1  HEALTHY  locality us-east/us-east-1a  registry vms (Synced: current)",
			"outbound|8080||orders.vm.internal (as port 18080)    in, used: HEALTHY: load balanced",
			"outbound|8080|v1|orders.vm.internal (as port 18080)  in, used: HEALTHY: load balanced",
			"outbound|8080|v2|orders.vm.internal                  not in: outside subset v2: its labels do not carry version=v2",
			"istiod (MCP): in, used: listed in ServiceEntry meshfed/orders.vm.internal",
			"per-client variant (localityLbSetting failover with outlierDetection): priority 0 for clients in us-east/us-east-1a",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("describe --endpoint 127.0.0.1 lacks %q:\n%s", want, out)
			}
		}

		out, _, err = describe(t, "orders.vm.internal", "--endpoint", "127.0.0.12:8080", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var r explain.EndpointReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("-o json: %v\n%s", err, out)
		}
		if len(r.Endpoints) != 1 || r.Scope.Scoped || r.Scope.Note != "not scoped: every proxy" {
			t.Fatalf("--endpoint 127.0.0.12:8080 -o json: %s", out)
		}
		v := r.Endpoints[0]
		c := v.Clusters[0]
		if c.Cluster != "outbound|8080||orders.vm.internal" || !c.Envoy.In || c.Envoy.Used || !strings.Contains(c.Envoy.Reason, "DRAINING") ||
			!c.GRPC.In || c.GRPC.Used || !strings.Contains(c.GRPC.Reason, "grpc-go uses only HEALTHY") {
			t.Errorf("DRAINING endpoint's cluster: %+v", c)
		}
		if v.ServiceEntry.In || !strings.Contains(v.ServiceEntry.Reason, "DRAINING") {
			t.Errorf("DRAINING endpoint in istiod's ServiceEntry: %+v", v.ServiceEntry)
		}

		out, _, err = describe(t, "orders.vm.internal", "--endpoint", "127.0.0.300")
		if err != nil || !strings.Contains(out, "QUARANTINED invalid vms 127.0.0.300 (services.yaml:8): endpoint dropped: ") {
			t.Errorf("quarantined endpoint: %v\n%s", err, out)
		}

		for _, tt := range []struct{ addr, want string }{
			{"127.0.0.2", `no endpoint 127.0.0.2 of orders.vm.internal is served (did you mean "127.0.0.1"?); its addresses: 127.0.0.1, 127.0.0.11, 127.0.0.12`},
			{"127.0.0.1:9999", "no endpoint 127.0.0.1:9999 of orders.vm.internal is served; 127.0.0.1 serves it on other ports"},
		} {
			_, _, err = describe(t, "orders.vm.internal", "--endpoint", tt.addr)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("--endpoint %s: %v, want an error with %q", tt.addr, err, tt.want)
			}
		}
	})

	t.Run("unknown host", func(t *testing.T) {
		t.Parallel()
		_, _, err := describe(t, "orders.vm.interna")
		if err == nil || err.Error() != `no service "orders.vm.interna" is served; did you mean orders.vm.internal?` {
			t.Errorf("unknown host: %v", err)
		}
	})
}
