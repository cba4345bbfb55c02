package serviceentry

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

var common = registries.Common{Name: "istio", Kind: "serviceentry", Domain: "ext.example"}

// load parses each file (named "f0.yaml", "f1.yaml"...) and merges them as
// a Run does.
func load(t *testing.T, files ...string) ([]model.Service, []model.Rejection) {
	t.Helper()
	var all []Object
	for i, f := range files {
		name := fmt.Sprintf("f%d.yaml", i)
		objs, err := Parse(name, []byte(f))
		if err != nil {
			t.Fatalf("Parse(%s): %v", name, err)
		}
		all = append(all, objs...)
	}
	m := &merger{common: common, lastGood: map[string]Object{}}
	return m.mergeObjects(all)
}

func byHost(t *testing.T, svcs []model.Service, host string) model.Service {
	t.Helper()
	for _, s := range svcs {
		if s.Hostname == host {
			return s
		}
	}
	t.Fatalf("no service %s in %v", host, hosts(svcs))
	return model.Service{}
}

func hosts(svcs []model.Service) []string {
	var out []string
	for _, s := range svcs {
		out = append(out, s.Hostname)
	}
	return out
}

func reasons(rs []model.Rejection) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.String() + "\n")
	}
	return b.String()
}

const seStatic = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vms, namespace: shop}
spec:
  hosts: [orders.ext.example, Billing.Ext.Example.]
  location: MESH_INTERNAL
  ports:
    - {number: 8080, name: grpc, protocol: GRPC, targetPort: 18080}
    - {number: 443, name: https, protocol: HTTPS}
    - {number: 8000, name: web, protocol: http}
  resolution: STATIC
  endpoints:
    - address: 10.0.0.1
      labels: {version: v1}
      locality: us-east/us-east-1a/rack1
      network: net-a
      weight: 3
    - address: 10.0.0.2
      ports: {grpc: 19090, web: 8001}
`

// TestConvertFields: every ServiceEntry field meshfed serves, one
// assertion each.
func TestConvertFields(t *testing.T) {
	t.Parallel()
	svcs, rej := load(t, seStatic)
	if len(rej) != 0 {
		t.Fatalf("rejected:\n%s", reasons(rej))
	}
	if got, want := hosts(svcs), []string{"orders.ext.example", "billing.ext.example"}; !slices.Equal(got, want) {
		t.Fatalf("hosts = %v, want %v (each host a service, lowercased, no trailing dot)", got, want)
	}
	orders := byHost(t, svcs, "orders.ext.example")
	wantPorts := []model.Port{
		{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC},
		{Name: "https", Number: 443, Protocol: model.ProtocolTCP},
		{Name: "web", Number: 8000, Protocol: model.ProtocolHTTP},
	}
	if diff := cmp.Diff(wantPorts, orders.Ports); diff != "" {
		t.Errorf("ports (-want +got):\n%s", diff)
	}
	if orders.Resolution != model.ResolutionEDS {
		t.Errorf("STATIC resolution = %v, want EDS", orders.Resolution)
	}
	want := []model.Endpoint{
		{Address: "10.0.0.1", Ports: map[string]uint32{"grpc": 18080}, Labels: map[string]string{"version": "v1"},
			Locality: model.Locality{Region: "us-east", Zone: "us-east-1a", SubZone: "rack1"}, Weight: 3,
			Source: model.Source{Registry: "istio", Cluster: "istio", Network: "net-a"}, Origin: "f0.yaml:13 ServiceEntry shop/vms"},
		{Address: "10.0.0.2", Ports: map[string]uint32{"grpc": 19090, "web": 8001}, Weight: 1, // the default
			Source: model.Source{Registry: "istio", Cluster: "istio"}, Origin: "f0.yaml:18 ServiceEntry shop/vms"},
	}
	if diff := cmp.Diff(want, orders.Endpoints, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("endpoints (-want +got): targetPort applies unless the endpoint's ports override it\n%s", diff)
	}
	if billing := byHost(t, svcs, "billing.ext.example"); !cmp.Equal(billing.Endpoints, orders.Endpoints) {
		t.Errorf("every host has the entry's endpoints")
	}
}

func TestConvertResolution(t *testing.T) {
	t.Parallel()
	const tmpl = `apiVersion: networking.istio.io/v1beta1
kind: ServiceEntry
metadata: {name: x}
spec:
  hosts: [api.ext.example]
  ports: [{number: 443, name: tls, protocol: TLS}]
%s`
	tests := []struct {
		name    string
		spec    string
		wantRes model.Resolution
		wantEPs []string // addresses
		wantErr string
	}{
		{name: "DNS without endpoints resolves the host", spec: "  resolution: DNS\n", wantRes: model.ResolutionDNS, wantEPs: []string{"api.ext.example"}},
		{name: "DNS_ROUND_ROBIN is DNS", spec: "  resolution: DNS_ROUND_ROBIN\n", wantRes: model.ResolutionDNS, wantEPs: []string{"api.ext.example"}},
		{name: "DNS endpoints may be hostnames", spec: "  resolution: DNS\n  endpoints: [{address: a.example.net}, {address: 192.0.2.1}]\n",
			wantRes: model.ResolutionDNS, wantEPs: []string{"a.example.net", "192.0.2.1"}},
		{name: "NONE with endpoints serves them", spec: "  resolution: NONE\n  endpoints: [{address: 192.0.2.7}]\n", wantRes: model.ResolutionEDS, wantEPs: []string{"192.0.2.7"}},
		{name: "unset resolution is NONE", spec: "  endpoints: [{address: 192.0.2.7}]\n", wantRes: model.ResolutionEDS, wantEPs: []string{"192.0.2.7"}},
		{name: "NONE alone is passthrough, rejected", spec: "  resolution: NONE\n", wantErr: "f0.yaml:7:15 ServiceEntry default/x: object rejected: spec.resolution: NONE without endpoints"},
		{name: "STATIC without endpoints has none", spec: "  resolution: STATIC\n", wantRes: model.ResolutionEDS},
		{name: "unknown resolution", spec: "  resolution: MAGIC\n", wantErr: `f0.yaml:7:15 ServiceEntry default/x: object rejected: spec.resolution: want one of NONE, STATIC, DNS, DNS_ROUND_ROBIN, DYNAMIC_DNS, got "MAGIC"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svcs, rej := load(t, fmt.Sprintf(tmpl, tt.spec))
			if tt.wantErr != "" {
				if len(svcs) != 0 || len(rej) != 1 || !strings.Contains(rej[0].String(), tt.wantErr) {
					t.Fatalf("got services %v, rejected:\n%s\nwant one rejection containing %q", hosts(svcs), reasons(rej), tt.wantErr)
				}
				return
			}
			if len(rej) != 0 || len(svcs) != 1 {
				t.Fatalf("got services %v, rejected:\n%s", hosts(svcs), reasons(rej))
			}
			if svcs[0].Resolution != tt.wantRes {
				t.Errorf("resolution = %v, want %v", svcs[0].Resolution, tt.wantRes)
			}
			var got []string
			for _, e := range svcs[0].Endpoints {
				got = append(got, e.Address)
			}
			if !slices.Equal(got, tt.wantEPs) {
				t.Errorf("endpoints = %v, want %v", got, tt.wantEPs)
			}
		})
	}
}

const seSelector = `apiVersion: networking.istio.io/v1alpha3
kind: ServiceEntry
metadata: {name: pay, namespace: shop}
spec:
  hosts: [pay.ext.example]
  ports: [{number: 8080, name: grpc, protocol: GRPC, targetPort: 9000}]
  resolution: STATIC
  workloadSelector:
    labels: {app: pay}
`

const workloads = `apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-1, namespace: shop}
spec:
  address: 10.1.0.1
  labels: {app: pay, version: v1}
  locality: eu/eu-1a
  network: vpc-1
  weight: 5
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-2, namespace: shop}
spec:
  address: 10.1.0.2
  labels: {app: pay, version: v2}
  ports: {grpc: 9100}
---
# another app: not selected
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-3, namespace: shop}
spec:
  address: 10.1.0.3
  labels: {app: cart}
---
# another namespace: not selected
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-4, namespace: other}
spec:
  address: 10.1.0.4
  labels: {app: pay}
---
# kinds other than ServiceEntry and WorkloadEntry are skipped
apiVersion: v1
kind: ConfigMap
metadata: {name: x}
`

func TestConvertWorkloadSelector(t *testing.T) {
	t.Parallel()
	svcs, rej := load(t, seSelector, workloads)
	if len(rej) != 0 {
		t.Fatalf("rejected:\n%s", reasons(rej))
	}
	pay := byHost(t, svcs, "pay.ext.example")
	want := []model.Endpoint{
		{Address: "10.1.0.1", Ports: map[string]uint32{"grpc": 9000}, Labels: map[string]string{"app": "pay", "version": "v1"},
			Locality: model.Locality{Region: "eu", Zone: "eu-1a"}, Weight: 5,
			Source: model.Source{Registry: "istio", Cluster: "istio", Network: "vpc-1"}, Origin: "f1.yaml:1 WorkloadEntry shop/vm-1"},
		{Address: "10.1.0.2", Ports: map[string]uint32{"grpc": 9100}, Labels: map[string]string{"app": "pay", "version": "v2"},
			Weight: 1, Source: model.Source{Registry: "istio", Cluster: "istio"}, Origin: "f1.yaml:11 WorkloadEntry shop/vm-2"}, // weight: the default
	}
	if diff := cmp.Diff(want, pay.Endpoints, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("selected endpoints (-want +got): same namespace, labels match, WorkloadEntry ports over targetPort\n%s", diff)
	}
}

// TestConvertRejectsAlone: each bad item is rejected alone, named by its
// file:line, and everything else is served.
func TestConvertRejectsAlone(t *testing.T) {
	t.Parallel()
	bad := `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: mixed}
spec:
  hosts: [good.ext.example, other.example.org, "*.ext.example", orders.ext.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints:
    - address: 10.0.0.9
    - address: unix:///var/run/x.sock
    - address: 10.0.0.10
      locality: a//b
    - address: 10.0.0.11
      ports: {nope: 81}
    - address: not-an-ip
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: bad-port}
spec:
  hosts: [bp.ext.example]
  ports: [{number: 70000, name: http, protocol: HTTP}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: both}
spec:
  hosts: [both.ext.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  endpoints: [{address: 10.0.0.1}]
  workloadSelector: {labels: {app: x}}
---
apiVersion: networking.istio.io/v2
kind: ServiceEntry
metadata: {name: future}
spec: {hosts: [f.ext.example]}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: no-address}
spec: {labels: {app: x}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vms, namespace: shop}
spec: {hosts: [dup.ext.example], ports: [{number: 1, name: a}]}
`
	svcs, rej := load(t, seStatic, bad)
	if got, want := hosts(svcs), []string{"orders.ext.example", "billing.ext.example", "good.ext.example"}; !slices.Equal(got, want) {
		t.Errorf("served hosts = %v, want %v", got, want)
	}
	good := byHost(t, svcs, "good.ext.example")
	var addrs []string
	for _, e := range good.Endpoints {
		addrs = append(addrs, e.Address)
	}
	// not-an-ip goes to the aggregator's gate, which quarantines it alone.
	if want := []string{"10.0.0.9", "not-an-ip"}; !slices.Equal(addrs, want) {
		t.Errorf("good.ext.example endpoints = %v, want %v", addrs, want)
	}
	text := reasons(rej)
	for _, want := range []string{
		`f1.yaml:22:20 ServiceEntry default/bad-port: object rejected: spec.ports[0].number: 70000 is not a port number`,
		`f1.yaml:20:1 ServiceEntry default/bad-port: object rejected: spec.resolution: NONE without endpoints or a workloadSelector`,
		`f1.yaml:27:1 ServiceEntry default/both: object rejected: spec: endpoints and workloadSelector are mutually exclusive`,
		`f1.yaml:33:13 ServiceEntry default/future: object rejected: apiVersion "networking.istio.io/v2"`,
		`f1.yaml:36:1 ServiceEntry default/future: object rejected: spec.ports: at least one port is required`,
		`f1.yaml:41:1 WorkloadEntry default/no-address: object rejected: spec.address: is required`,
		`f1.yaml:43 ServiceEntry shop/vms: object rejected: ServiceEntry shop/vms is already declared at f0.yaml:1, which is served`,
		`other.example.org: ServiceEntry default/mixed host "other.example.org" (f1.yaml:5): host rejected: it is outside the registry's domain "ext.example"`,
		`*.ext.example: ServiceEntry default/mixed host "*.ext.example" (f1.yaml:5): host rejected: wildcard hosts are not served`,
		`orders.ext.example: ServiceEntry default/mixed host "orders.ext.example" (f1.yaml:5): host rejected: already served by ServiceEntry shop/vms`,
		`good.ext.example: unix:///var/run/x.sock (f1.yaml:10 ServiceEntry default/mixed): endpoint rejected: spec.endpoints[1]: address "unix:///var/run/x.sock": Unix domain socket endpoints are not served`,
		`good.ext.example: 10.0.0.10 (f1.yaml:11 ServiceEntry default/mixed): endpoint rejected: spec.endpoints[2]: locality "a//b" has an empty part`,
		`good.ext.example: 10.0.0.11 (f1.yaml:13 ServiceEntry default/mixed): endpoint rejected: spec.endpoints[3]: ports["nope"] names no port of the ServiceEntry`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("rejections lack %q; got:\n%s", want, text)
		}
	}
	if len(rej) != 14 {
		t.Errorf("%d rejections, want 14:\n%s", len(rej), text)
	}
}

// TestKeepsLastGoodObject: an object that turns invalid keeps its last
// good version served, and says so; once removed it leaves.
func TestKeepsLastGoodObject(t *testing.T) {
	t.Parallel()
	m := &merger{common: common, lastGood: map[string]Object{}}
	run := func(content string) ([]model.Service, []model.Rejection) {
		objs, err := Parse("se.yaml", []byte(content))
		if err != nil {
			t.Fatal(err)
		}
		return m.mergeObjects(objs)
	}
	if svcs, rej := run(seStatic); len(svcs) != 2 || len(rej) != 0 {
		t.Fatalf("first read: %v %s", hosts(svcs), reasons(rej))
	}
	broken := strings.Replace(seStatic, "number: 8080", "number: 0", 1)
	svcs, rej := run(broken)
	if len(svcs) != 2 || byHost(t, svcs, "orders.ext.example").Ports[0].Number != 8080 {
		t.Errorf("after a bad edit: served %v, want the last good version", hosts(svcs))
	}
	if len(rej) != 1 || !strings.Contains(rej[0].Reason, "spec.ports[0].number: 0 is not a port number") || !strings.Contains(rej[0].Reason, "last good version (se.yaml:1) stays served") {
		t.Errorf("rejections:\n%s", reasons(rej))
	}
	if svcs, _ := run("# emptied\n"); len(svcs) != 0 {
		t.Errorf("after removal: served %v, want nothing", hosts(svcs))
	}
	if svcs, rej := run(broken); len(svcs) != 0 || len(rej) != 1 {
		t.Errorf("invalid again after removal: served %v (no last good left), rejected:\n%s", hosts(svcs), reasons(rej))
	}
}

func TestParseSyntaxErrorFailsFile(t *testing.T) {
	t.Parallel()
	_, err := Parse("x.yaml", []byte("kind: ServiceEntry\nspec: [\n"))
	if err == nil || !strings.Contains(err.Error(), "x.yaml: YAML syntax error") {
		t.Errorf("err = %v, want a YAML syntax error naming the file", err)
	}
}

// TestExample: the shipped example serves what its comments say.
func TestExample(t *testing.T) {
	t.Parallel()
	var files []string
	for _, f := range []string{"serviceentries.yaml", "workloads.yaml"} {
		b, err := os.ReadFile(filepath.Join("../../examples/serviceentry/istio", f))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, string(b))
	}
	c := common
	c.Domain = "mesh.example"
	m := &merger{common: c, lastGood: map[string]Object{}}
	var all []Object
	for i, f := range files {
		objs, err := Parse(fmt.Sprint(i), []byte(f))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, objs...)
	}
	svcs, rej := m.mergeObjects(all)
	if got, want := hosts(svcs), []string{"orders.mesh.example", "billing.mesh.example", "payments.mesh.example"}; !slices.Equal(got, want) {
		t.Errorf("hosts = %v, want %v", got, want)
	}
	if len(rej) != 1 || rej[0].Host != "api.example.org" {
		t.Errorf("rejected:\n%s\nwant only api.example.org", reasons(rej))
	}
	if eps := byHost(t, svcs, "orders.mesh.example").Endpoints; len(eps) != 2 || eps[1].Ports["grpc"] != 18080 || eps[1].Weight != 2 {
		t.Errorf("orders endpoints = %+v", eps)
	}
}

// TestParseProblems (issue 24): every problem of every ServiceEntry and
// WorkloadEntry is reported at its field's file:line:column, an unknown
// field with the nearest known name and a value of the wrong type with
// what the field wants, as VirtualServices are; a Run lists each as a
// rejection of its own.
func TestParseProblems(t *testing.T) {
	t.Parallel()
	const f = "testdata/typos/entries.yaml"
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Parse(f, data)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{
		f + `:9:3: ServiceEntry shop/orders: spec.resolutoin: unknown field "resolutoin" of ServiceEntry (did you mean "resolution"?)`,
		f + `:13:7: ServiceEntry shop/orders: spec.ports[0].protocl: unknown field "protocl" of ServicePort (did you mean "protocol"?)`,
		f + `:18:15: ServiceEntry shop/orders: spec.endpoints[0].weight: want an integer, got "heavy"`,
		f + `:14:15: ServiceEntry shop/orders: spec.ports[1].number: 70000 is not a port number (1-65535)`,
	}, {
		f + `:26:3: WorkloadEntry shop/vm-1: spec.adress: unknown field "adress" of WorkloadEntry (did you mean "address"?)`,
		f + `:25:1: WorkloadEntry shop/vm-1: spec.address: is required`,
		f + `:28:13: WorkloadEntry shop/vm-1: spec.locality: locality "a//b" has an empty part`,
		f + `:29:17: WorkloadEntry shop/vm-1: spec.ports["grpc"]: 0 is not a port number (1-65535)`,
	}}
	if len(objs) != len(want) {
		t.Fatalf("%d objects, want %d", len(objs), len(want))
	}
	for i, o := range objs {
		got := strings.Split(fmt.Sprint(objectError(o)), "\n")
		if len(got) != len(want[i]) {
			t.Errorf("object %d: %d problems, want %d:\n%s", i, len(got), len(want[i]), strings.Join(got, "\n"))
			continue
		}
		for j, w := range want[i] {
			if !strings.HasPrefix(got[j], w) {
				t.Errorf("object %d problem %d:\n got %s\nwant %s", i, j, got[j], w)
			}
		}
	}
	m := &merger{common: common, lastGood: map[string]Object{}}
	if _, rej := m.mergeObjects(objs); len(rej) != 8 || !strings.HasPrefix(rej[0].Subject, f+":9:3 ServiceEntry shop/orders") {
		t.Errorf("rejections, want one per problem:\n%s", reasons(rej))
	}
}
