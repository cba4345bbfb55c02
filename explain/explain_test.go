package explain

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/model"
)

// input is a snapshot of one host a.vm.internal (ports grpc 8080 and
// http 8081) with the given endpoints, rules and registry states.
func input(t *testing.T, eps []model.Endpoint, rules string, regs ...aggregate.RegistryStatus) Input {
	t.Helper()
	svc := &model.Service{Hostname: "a.vm.internal", Sources: []string{"vms"}, Endpoints: eps,
		Ports: []model.Port{{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}, {Name: "http", Number: 8081, Protocol: model.ProtocolHTTP}}}
	snap := model.NewSnapshot(1, []*model.Service{svc})
	if rules != "" {
		objs, rej := istioconfig.ParseObjects("rules.yaml", []byte(rules))
		if len(rej) > 0 {
			t.Fatalf("rules: %v", rej)
		}
		snap.Config = model.NewConfigSnapshot(1, objs)
	}
	if len(regs) == 0 {
		regs = []aggregate.RegistryStatus{{Name: "vms", State: aggregate.Synced}}
	}
	return Input{Snapshot: snap, Registries: regs}
}

const subsetRule = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: a, namespace: ns}
spec:
  host: a.vm.internal
  subsets: [{name: v1, labels: {version: v1}}]
`

// TestExplainEndpoint: each reason an endpoint is or is not in a client's
// EDS, per cluster and client kind.
func TestExplainEndpoint(t *testing.T) {
	t.Parallel()
	v1 := map[string]string{"version": "v1"}
	tests := []struct {
		name    string
		eps     []model.Endpoint
		rules   string
		regs    []aggregate.RegistryStatus
		addr    string
		cluster string // the cluster checked
		envoy   Verdict
		grpc    Verdict
		se      Verdict
		reg     string // in the registry note
	}{
		{name: "healthy", eps: []model.Endpoint{{Address: "10.0.0.1", Source: model.Source{Registry: "vms"}}}, addr: "10.0.0.1",
			cluster: "outbound|8080||a.vm.internal", reg: "current",
			envoy: Verdict{In: true, Used: true, Reason: "HEALTHY: load balanced"}, grpc: Verdict{In: true, Used: true, Reason: "HEALTHY: load balanced"},
			se: Verdict{In: true, Used: true, Reason: "listed in ServiceEntry meshfed/a.vm.internal (istiod sends it to its proxies as healthy)"}},
		{name: "degraded", eps: []model.Endpoint{{Address: "10.0.0.1", Health: model.Degraded, Source: model.Source{Registry: "vms"}}}, addr: "10.0.0.1:8081",
			cluster: "outbound|8081||a.vm.internal", reg: "current",
			envoy: Verdict{In: true, Used: true, Reason: "DEGRADED: used only while too few HEALTHY endpoints remain"},
			grpc:  Verdict{In: true, Reason: "DEGRADED: grpc-go uses only HEALTHY endpoints"},
			se:    Verdict{In: true, Used: true, Reason: "listed in ServiceEntry meshfed/a.vm.internal (istiod sends it to its proxies as healthy)"}},
		{name: "port not served", eps: []model.Endpoint{{Address: "10.0.0.1", Ports: map[string]uint32{"grpc": 0}, Source: model.Source{Registry: "vms"}}},
			addr: "10.0.0.1", cluster: "outbound|8080||a.vm.internal", reg: "current",
			envoy: Verdict{Reason: "it does not serve port grpc"}, grpc: Verdict{Reason: "it does not serve port grpc"},
			se: Verdict{Reason: "it does not serve port grpc (a ServiceEntry endpoint serves every port)"}},
		{name: "duplicate address and port", addr: "10.0.0.1:9000", cluster: "outbound|8080||a.vm.internal", reg: "current",
			eps: []model.Endpoint{
				{Address: "10.0.0.1", Ports: map[string]uint32{"grpc": 9000, "http": 9001}, Source: model.Source{Registry: "vms"}},
				{Address: "10.0.0.1", Ports: map[string]uint32{"grpc": 9000, "http": 9002}, Health: model.Draining, Source: model.Source{Registry: "other"}},
			},
			envoy: Verdict{In: true, Used: true, Reason: "HEALTHY: load balanced"}, grpc: Verdict{In: true, Used: true, Reason: "HEALTHY: load balanced"},
			se: Verdict{In: true, Used: true, Reason: "listed in ServiceEntry meshfed/a.vm.internal (istiod sends it to its proxies as healthy)"}},
		{name: "outside a subset", eps: []model.Endpoint{{Address: "10.0.0.1", Source: model.Source{Registry: "vms"}}}, rules: subsetRule,
			addr: "10.0.0.1", cluster: "outbound|8080|v1|a.vm.internal", reg: "current",
			envoy: Verdict{Reason: "outside subset v1: its labels do not carry version=v1"}, grpc: Verdict{Reason: "outside subset v1: its labels do not carry version=v1"},
			se: Verdict{In: true, Used: true, Reason: "listed in ServiceEntry meshfed/a.vm.internal (istiod sends it to its proxies as healthy)"}},
		{name: "draining in a subset, registry held", rules: subsetRule, addr: "10.0.0.1", cluster: "outbound|8081|v1|a.vm.internal",
			eps:  []model.Endpoint{{Address: "10.0.0.1", Labels: v1, Health: model.Draining, Source: model.Source{Registry: "vms"}}},
			regs: []aggregate.RegistryStatus{{Name: "vms", State: aggregate.Held, HeldDown: true, Hold: &aggregate.HoldStatus{Since: time.Now(), Served: 1}}},
			reg:  "held back by the hold-down", envoy: Verdict{In: true, Reason: "DRAINING: listed, sent no new calls"},
			grpc: Verdict{In: true, Reason: "DRAINING: grpc-go uses only HEALTHY endpoints"},
			se:   Verdict{Reason: "health DRAINING: istiod would send it to proxies as healthy"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := Explain(input(t, tt.eps, tt.rules, tt.regs...), "a.vm.internal", tt.addr)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Endpoints) == 0 || r.Scope.Note != "not scoped: every proxy" {
				t.Fatalf("report %+v", r)
			}
			v := r.Endpoints[0]
			if !strings.Contains(v.Registry.Note, tt.reg) {
				t.Errorf("registry note %q, want it to say %q", v.Registry.Note, tt.reg)
			}
			if v.ServiceEntry != tt.se {
				t.Errorf("istiod: %+v, want %+v", v.ServiceEntry, tt.se)
			}
			for _, c := range v.Clusters {
				if c.Cluster != tt.cluster {
					continue
				}
				if c.Envoy != tt.envoy || c.GRPC != tt.grpc {
					t.Errorf("%s: envoy %+v grpc %+v, want %+v and %+v", c.Cluster, c.Envoy, c.GRPC, tt.envoy, tt.grpc)
				}
				return
			}
			t.Errorf("no cluster %s in %+v", tt.cluster, v.Clusters)
		})
	}
}

// TestExplainEndpointDuplicateSecond: the second endpoint at an
// address:port is not in the CLA, and the report says so.
func TestExplainEndpointDuplicateSecond(t *testing.T) {
	t.Parallel()
	eps := []model.Endpoint{
		{Address: "10.0.0.1", Ports: map[string]uint32{"grpc": 9000, "http": 9001}, Source: model.Source{Registry: "vms"}},
		{Address: "10.0.0.1", Ports: map[string]uint32{"grpc": 9000, "http": 9002}, Source: model.Source{Registry: "vms"}},
	}
	r, err := Explain(input(t, eps, ""), "a.vm.internal", "10.0.0.1:9002")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Endpoints) != 1 || len(r.Endpoints[0].Clusters) != 1 || r.Endpoints[0].Clusters[0].EndpointPort != 9002 {
		t.Fatalf("10.0.0.1:9002: %+v", r.Endpoints)
	}
	r, err = Explain(input(t, eps, ""), "a.vm.internal", "10.0.0.1:9000")
	if err != nil || len(r.Endpoints) != 2 {
		t.Fatalf("10.0.0.1:9000: %v %+v", err, r)
	}
	c := r.Endpoints[1].Clusters[0]
	if c.Envoy.In || c.Envoy.Reason != "an earlier endpoint has the same address and port (the first one is served)" {
		t.Errorf("second endpoint at 10.0.0.1:9000: %+v", c)
	}
}

// TestExplainEndpointNotFound: an address the host does not serve is a
// NotFoundError naming its addresses and the nearest; one only
// quarantined is explained; a host whose resources failed is not served.
func TestExplainEndpointNotFound(t *testing.T) {
	t.Parallel()
	eps := []model.Endpoint{{Address: "10.0.0.1", Source: model.Source{Registry: "vms"}}, {Address: "10.0.0.20", Source: model.Source{Registry: "vms"}}}
	in := input(t, eps, "", aggregate.RegistryStatus{Name: "vms", State: aggregate.Held, Hold: &aggregate.HoldStatus{Pending: 3}})
	_, err := Explain(in, "a.vm.internal", "10.0.0.2")
	var nf *NotFoundError
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), `no endpoint 10.0.0.2 of a.vm.internal is served (did you mean "10.0.0.1"?); its addresses: 10.0.0.1, 10.0.0.20; registry vms holds an update back (3 endpoints pending)`) {
		t.Errorf("unknown address: %v", err)
	}
	if _, err := Explain(in, "b.vm.internal", "10.0.0.1"); !errors.As(err, &nf) || !strings.Contains(err.Error(), `no service "b.vm.internal" is served`) {
		t.Errorf("unknown host: %v", err)
	}

	in.Conflicts = []aggregate.Conflict{
		{Rejection: model.Rejection{Registry: "vms", Host: "a.vm.internal", Subject: "10.0.0.2 (s.yaml:9)", Reason: "endpoint dropped: port override x"}, Category: aggregate.CategoryInvalid},
		{Rejection: model.Rejection{Host: "a.vm.internal", Reason: "cluster outbound|8080||a.vm.internal: invalid"}, Category: "xds-invalid"},
	}
	r, err := Explain(in, "a.vm.internal", "10.0.0.2")
	if err != nil || len(r.Quarantined) != 1 || len(r.Endpoints) != 0 {
		t.Errorf("quarantined: %v %+v", err, r)
	}
	r, err = Explain(in, "a.vm.internal", "10.0.0.1")
	if err != nil || r.Endpoints[0].Clusters[0].Envoy.In || !strings.HasPrefix(r.Endpoints[0].Clusters[0].Envoy.Reason, "the host is not served: ") {
		t.Errorf("host not served: %v %+v", err, r)
	}
}

// TestDescribePolicies: a subset's policy is listed for what it changes,
// on every port when the same, and the port-level settings per port.
func TestDescribePolicies(t *testing.T) {
	t.Parallel()
	in := input(t, nil, `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: a, namespace: ns}
spec:
  host: a.vm.internal
  trafficPolicy:
    loadBalancer: {simple: LEAST_REQUEST}
    tls: {mode: SIMPLE, caCertificates: /ca.pem}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy:
      portLevelSettings: [{port: {number: 8081}, tls: {mode: DISABLE}}]
`)
	d, err := Describe(in, "a.vm.internal")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range d.Traffic.Policies {
		got = append(got, p.Kind+" "+p.Summary+" ("+p.Rule+" "+p.Scope+")")
	}
	want := []string{"loadBalancer LEAST_REQUEST (ns/a )", "tls SIMPLE, ca /ca.pem (ns/a )", "tls DISABLE (ns/a subset v1 port 8081)"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("policies:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
