package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/translate"
)

// describeAdmin is a fake admin API serving orders.vm.internal with the
// rules of examples/traffic in force (parsed as meshfed parses them),
// extra plus a DestinationRule with policies, and one rejected
// VirtualService for orders.
func describeAdmin(t *testing.T) string {
	t.Helper()
	var objs []*model.ConfigObject
	files, _ := filepath.Glob("../../examples/traffic/*.yaml")
	if len(files) != 2 {
		t.Fatalf("examples/traffic: %v, want 2 files", files)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		o, rej := istioconfig.ParseObjects("examples/traffic/"+filepath.Base(f), data)
		if len(rej) != 0 {
			t.Fatalf("%s: %v", f, rej)
		}
		objs = append(objs, o...)
	}
	extra, rej := istioconfig.ParseObjects("ops/policy.yaml", []byte(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders-policy, namespace: ops}
spec:
  host: orders.vm.internal
  trafficPolicy:
    loadBalancer: {simple: LEAST_REQUEST}
    outlierDetection: {consecutive5xxErrors: 3, interval: 10s, baseEjectionTime: 30s}
    connectionPool: {tcp: {maxConnections: 100}}
    tls: {mode: SIMPLE, caCertificates: /etc/meshfed/ca.pem}
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
`))
	if len(extra) != 1 || len(rej) != 2 {
		t.Fatalf("extra rules: %v, rejected %v", extra, rej)
	}
	objs = append(objs, extra...)
	cz := admin.Configz{Status: istioconfig.Status{Version: 2, Rejected: rej},
		Specs: admin.ObjectSpecs(objs),
		NotForClients: []translate.TrafficNote{
			{Host: "orders.vm.internal", Client: "grpc", Note: "outbound|8080||orders.vm.internal: tls SIMPLE from files not sent"},
			{Host: "web.vm.internal", Client: "grpc", Note: "not about orders"},
		}}
	for _, o := range objs {
		cz.InForce = append(cz.InForce, istioconfig.ObjectStatus{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name,
			Source: o.Source, Hash: o.Hash, Hosts: istioconfig.Hosts(o)})
	}
	// The endpoints of orders in examples/services.yaml, and one more v1.
	eps := []admin.EndpointInfo{
		{Address: "127.0.0.1", Ports: map[string]uint32{"grpc": 18080}, Health: "HEALTHY", Weight: 1, Locality: "us-east/us-east-1a", Labels: map[string]string{"version": "v1"}, Registry: "vms"},
		{Address: "127.0.0.11", Ports: map[string]uint32{"grpc": 8080}, Health: "HEALTHY", Weight: 1, Locality: "us-east/us-east-1b", Labels: map[string]string{"version": "v2"}, Registry: "vms"},
		{Address: "127.0.0.12", Ports: map[string]uint32{"grpc": 8080}, Health: "HEALTHY", Weight: 1, Locality: "us-east/us-east-1b", Labels: map[string]string{"version": "v1"}, Registry: "vms"},
	}
	answers := map[string]any{
		"/debug/registryz": []admin.ServiceInfo{{Host: "orders.vm.internal", Resolution: "STATIC", Sources: []string{"vms"}, Endpoints: len(eps),
			Ports: []admin.PortInfo{{Name: "grpc", Port: 8080, Protocol: "GRPC"}}}},
		"/debug/conflictz": []conflictJSON{},
		"/debug/endpointz": eps,
		"/debug/configz":   cz,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, ok := answers[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(v)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestDescribeShowsTrafficRules: describe HOST shows the VirtualService
// and DestinationRules in force for the host with their sources, the
// subsets with the endpoints they select, the route table (header match,
// 90/10 split), the policies, what was rejected for the host and its
// notForClients notes, in the table and in -o json.
func TestDescribeShowsTrafficRules(t *testing.T) {
	t.Parallel()
	url := describeAdmin(t)
	out, errOut, err := execute(t, "describe", "orders.vm.internal", "--admin", url)
	if err != nil {
		t.Fatalf("describe: %v\n%s", err, errOut)
	}
	for _, want := range []string{
		"Traffic rules: 3 in force",
		"VirtualService   shop/orders        examples/traffic/orders-canary.yaml:5",
		"DestinationRule  shop/orders        examples/traffic/orders-subsets.yaml:4",
		"DestinationRule  ops/orders-policy  ops/policy.yaml:1",
		"  v1    version=v1  2          shop/orders",
		"  v2    version=v2  1          shop/orders",
		`http canary-header  header x-canary="yes"  → 100% orders.vm.internal subset v2`,
		"http split          *                      → 90% orders.vm.internal subset v1, 10% orders.vm.internal subset v2",
		"loadBalancer      LEAST_REQUEST",
		"outlierDetection  eject after 3 consecutive 5xx, interval 10s, base ejection 30s",
		"connectionPool    max 100 connections",
		"tls               SIMPLE",
		"Rejected:    1",
		"ops/policy.yaml:17:20 VirtualService shop/orders-bad:",
		"Not for clients:\n  grpc: outbound|8080||orders.vm.internal: tls SIMPLE from files not sent\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("describe lacks %q:\n%s", want, out)
		}
	}
	for _, not := range []string{"web-bad", "not about orders"} {
		if strings.Contains(out, not) {
			t.Errorf("describe shows %q of another host:\n%s", not, out)
		}
	}

	out, _, err = execute(t, "describe", "orders.vm.internal", "--admin", url, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var d description
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	tr := d.Traffic
	if len(tr.VirtualServices) != 1 || tr.VirtualServices[0].Source != "examples/traffic/orders-canary.yaml:5" ||
		len(tr.DestinationRules) != 2 || tr.DestinationRules[0].Source != "examples/traffic/orders-subsets.yaml:4" {
		t.Errorf("-o json rules: %+v %+v", tr.VirtualServices, tr.DestinationRules)
	}
	if len(tr.Subsets) != 2 || tr.Subsets[0].Name != "v1" || tr.Subsets[0].Endpoints != 2 || tr.Subsets[1].Endpoints != 1 ||
		tr.Subsets[1].Labels["version"] != "v2" {
		t.Errorf("-o json subsets: %+v", tr.Subsets)
	}
	if len(tr.RouteTable) != 2 || tr.RouteTable[0].Match[0] != `header x-canary="yes"` ||
		len(tr.RouteTable[1].Destinations) != 2 ||
		tr.RouteTable[1].Destinations[0] != (weighted{Host: "orders.vm.internal", Subset: "v1", Weight: 90}) ||
		tr.RouteTable[1].Destinations[1] != (weighted{Host: "orders.vm.internal", Subset: "v2", Weight: 10}) {
		t.Errorf("-o json route table: %+v", tr.RouteTable)
	}
	if len(tr.Policies) != 4 || len(tr.Rejected) != 1 || tr.Rejected[0].Name != "orders-bad" || len(tr.NotForClients) != 1 {
		t.Errorf("-o json policies %+v, rejected %+v, notes %+v", tr.Policies, tr.Rejected, tr.NotForClients)
	}
	out, _, err = execute(t, "describe", "orders.vm.internal", "--admin", url, "-o", "yaml")
	if err != nil || !strings.Contains(out, "routeTable:") || !strings.Contains(out, "weight: 90") {
		t.Errorf("-o yaml: %v\n%s", err, out)
	}
}
