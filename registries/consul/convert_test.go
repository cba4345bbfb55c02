package consul

import (
	"reflect"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// instance is one health entry; status maintenance puts its node in
// maintenance mode, as `consul maint` does.
func instance(node, nodeAddr, id, addr string, port int, status string) *api.ServiceEntry {
	check := &api.HealthCheck{CheckID: "c-" + id, Status: status}
	if status == api.HealthMaint {
		check = &api.HealthCheck{CheckID: api.NodeMaint, Status: api.HealthCritical}
	}
	return &api.ServiceEntry{
		Node:    &api.Node{Node: node, Address: nodeAddr, Datacenter: "dc1"},
		Service: &api.AgentService{ID: id, Service: "orders", Address: addr, Port: port, Weights: api.AgentWeights{Passing: 3, Warning: 1}},
		Checks:  api.HealthChecks{check},
	}
}

func TestConvert(t *testing.T) {
	t.Parallel()
	common := registries.Common{Name: "dc1", Kind: "consul", Domain: "dc1.consul"}
	src := model.Source{Registry: "dc1", Cluster: "dc1"}
	for _, tc := range []struct {
		name         string
		service      string
		entries      []*api.ServiceEntry
		wantOK       bool
		wantPort     model.Port
		wantEps      []model.Endpoint
		wantRejected []string // subjects
		wantRes      model.Resolution
	}{
		{
			name:    "service address, falling back to the node address; health and weights",
			service: "Orders",
			entries: []*api.ServiceEntry{
				instance("n1", "10.0.0.1", "a", "", 80, api.HealthPassing),
				instance("n2", "10.0.0.2", "b", "10.1.0.2", 80, api.HealthWarning),
				instance("n3", "10.0.0.3", "c", "", 81, api.HealthCritical),
				instance("n4", "10.0.0.4", "d", "", 80, api.HealthMaint),
			},
			wantOK:   true,
			wantPort: model.Port{Name: "tcp", Number: 80, Protocol: model.ProtocolTCP},
			wantEps: []model.Endpoint{
				{Address: "10.0.0.1", Locality: model.Locality{Region: "dc1"}, Weight: 3, Health: model.Healthy, Source: src, Origin: "n1/a"},
				{Address: "10.1.0.2", Locality: model.Locality{Region: "dc1"}, Weight: 1, Health: model.Degraded, Source: src, Origin: "n2/b"},
				{Address: "10.0.0.3", Ports: map[string]uint32{"tcp": 81}, Locality: model.Locality{Region: "dc1"}, Health: model.Unhealthy, Source: src, Origin: "n3/c"},
				{Address: "10.0.0.4", Locality: model.Locality{Region: "dc1"}, Health: model.Draining, Source: src, Origin: "n4/d"},
			},
		},
		{
			name:    "malformed instances are quarantined alone",
			service: "orders",
			entries: []*api.ServiceEntry{
				instance("n1", "10.0.0.1", "good", "", 80, api.HealthPassing),
				instance("n2", "10.0.0.2", "noport", "", 0, api.HealthPassing),
				instance("n3", "", "noaddr", "", 80, api.HealthPassing),
				instance("n4", "10.0.0.4", "host", "db.example.com", 80, api.HealthPassing),
			},
			wantOK:       true,
			wantPort:     model.Port{Name: "tcp", Number: 80, Protocol: model.ProtocolTCP},
			wantEps:      []model.Endpoint{{Address: "10.0.0.1", Locality: model.Locality{Region: "dc1"}, Weight: 3, Source: src, Origin: "n1/good"}},
			wantRejected: []string{"n2/noport", "n3/noaddr", "n4/host"},
		},
		{
			name:    "hostnames only: DNS resolution",
			service: "ext",
			entries: []*api.ServiceEntry{instance("n1", "10.0.0.1", "x", "db.example.com", 5432, api.HealthPassing)},
			wantOK:  true, wantRes: model.ResolutionDNS,
			wantPort: model.Port{Name: "tcp", Number: 5432, Protocol: model.ProtocolTCP},
			wantEps:  []model.Endpoint{{Address: "db.example.com", Locality: model.Locality{Region: "dc1"}, Weight: 3, Source: src, Origin: "n1/x"}},
		},
		{
			name:         "a name that is no DNS label is rejected whole",
			service:      "under_score",
			entries:      []*api.ServiceEntry{instance("n1", "10.0.0.1", "x", "", 80, api.HealthPassing)},
			wantRejected: []string{"service under_score"},
		},
		{
			name:    "no instance: no service",
			service: "orders",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Convert(common, "", tc.service, tc.entries)
			if got.OK() != tc.wantOK {
				t.Fatalf("ok = %v, want %v (rejected %v)", got.OK(), tc.wantOK, got.Rejected)
			}
			var subjects []string
			for _, r := range got.Rejected {
				subjects = append(subjects, r.Subject)
				if r.Registry != "dc1" || r.Reason == "" {
					t.Errorf("rejection %+v lacks registry or reason", r)
				}
			}
			if !reflect.DeepEqual(subjects, tc.wantRejected) {
				t.Errorf("rejected %v, want %v", subjects, tc.wantRejected)
			}
			if !tc.wantOK {
				return
			}
			if got.Service().Hostname != "orders.dc1.consul" && got.Service().Hostname != tc.service+".dc1.consul" {
				t.Errorf("hostname = %q", got.Service().Hostname)
			}
			if len(got.Service().Ports) != 1 || got.Service().Ports[0] != tc.wantPort {
				t.Errorf("ports = %+v, want %+v", got.Service().Ports, tc.wantPort)
			}
			if got.Service().Resolution != tc.wantRes {
				t.Errorf("resolution = %v, want %v", got.Service().Resolution, tc.wantRes)
			}
			if !reflect.DeepEqual(got.Service().Endpoints, tc.wantEps) {
				t.Errorf("endpoints:\n got %+v\nwant %+v", got.Service().Endpoints, tc.wantEps)
			}
		})
	}
}

func TestLabelsAndLocality(t *testing.T) {
	t.Parallel()
	got := labels([]string{"primary", "version=v2", "=odd", "env=prod"}, map[string]string{"env": "staging", "protocol": "grpc"})
	want := map[string]string{"primary": "", "version": "v2", "=odd": "", "env": "staging"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("labels = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		name string
		def  model.Locality
		meta map[string]string
		want model.Locality
	}{
		{name: "datacenter is the region", want: model.Locality{Region: "dc1"}},
		{name: "registry default wins over the datacenter", def: model.Locality{Region: "eu", Zone: "a"}, want: model.Locality{Region: "eu", Zone: "a"}},
		{name: "node meta wins", def: model.Locality{Region: "eu"}, meta: map[string]string{"zone": "z1", "subzone": "rack4"}, want: model.Locality{Region: "eu", Zone: "z1", SubZone: "rack4"}},
		{name: "node meta region", meta: map[string]string{"region": "us-east"}, want: model.Locality{Region: "us-east"}},
	} {
		if got := locality(tc.def, "dc1", tc.meta); got != tc.want {
			t.Errorf("%s: locality = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestNextIndex(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ old, got, want uint64 }{
		{old: 0, got: 0, want: 1},
		{old: 5, got: 9, want: 9},
		{old: 9, got: 9, want: 9},
		{old: 9, got: 3, want: 0}, // went backwards: start over
	} {
		if got := nextIndex(tc.old, tc.got); got != tc.want {
			t.Errorf("nextIndex(%d, %d) = %d, want %d", tc.old, tc.got, got, tc.want)
		}
	}
}
