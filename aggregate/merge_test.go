package aggregate

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshfed/meshfed/model"
)

func TestMergeHost(t *testing.T) {
	t.Parallel()
	http := func(n uint32) model.Port { return model.Port{Name: "http", Number: n, Protocol: model.ProtocolHTTP} }
	grpc := model.Port{Name: "grpc", Number: 9090, Protocol: model.ProtocolGRPC}
	mk := func(registry string, ports []model.Port, res model.Resolution, addrs ...string) *model.Service {
		s := &model.Service{Hostname: "a.svc", Ports: ports, Resolution: res, Sources: []string{registry}}
		for _, a := range addrs {
			s.Endpoints = append(s.Endpoints, model.Endpoint{Address: a, Weight: 1, Source: model.Source{Registry: registry, Cluster: registry}})
		}
		return s
	}
	ep := func(registry, addr string, ports map[string]uint32) model.Endpoint {
		return model.Endpoint{Address: addr, Weight: 1, Ports: ports, Source: model.Source{Registry: registry, Cluster: registry}}
	}
	kube := func(name string, s *model.Service) contribution {
		return contribution{name: name, kind: "kubernetes", multicluster: true, domain: "svc", svc: s}
	}
	tests := []struct {
		name          string
		cs            []contribution
		want          *model.Service
		wantConflicts []string // "category registry"
	}{{
		name: "kubernetes registries sharing a domain merge endpoints",
		cs: []contribution{
			kube("east", mk("east", []model.Port{http(80)}, model.ResolutionEDS, "10.0.0.2")),
			kube("west", mk("west", []model.Port{http(80)}, model.ResolutionEDS, "10.0.0.1", "10.0.0.2")),
		},
		want: &model.Service{Hostname: "a.svc", Ports: []model.Port{http(80)}, Sources: []string{"east", "west"},
			Endpoints: []model.Endpoint{ep("west", "10.0.0.1", nil), ep("east", "10.0.0.2", nil), ep("west", "10.0.0.2", nil)}},
	}, {
		name: "port mismatch is reported; endpoints keep their real port under the first registry's ports and do not serve ports their cluster lacks",
		cs: []contribution{
			kube("east", mk("east", []model.Port{http(80), grpc}, model.ResolutionEDS, "10.0.0.1")),
			kube("west", mk("west", []model.Port{http(8080)}, model.ResolutionEDS, "10.1.0.1")),
		},
		want: &model.Service{Hostname: "a.svc", Ports: []model.Port{http(80), grpc}, Sources: []string{"east", "west"},
			Endpoints: []model.Endpoint{ep("east", "10.0.0.1", nil), ep("west", "10.1.0.1", map[string]uint32{"http": 8080, "grpc": model.NotServed})}},
		wantConflicts: []string{"port-mismatch west"},
	}, {
		name: "no port name in common: reported, endpoints not served",
		cs: []contribution{
			kube("east", mk("east", []model.Port{http(80)}, model.ResolutionEDS, "10.0.0.1")),
			kube("west", mk("west", []model.Port{grpc}, model.ResolutionEDS, "10.1.0.1")),
		},
		want: &model.Service{Hostname: "a.svc", Ports: []model.Port{http(80)}, Sources: []string{"east", "west"},
			Endpoints: []model.Endpoint{ep("east", "10.0.0.1", nil)}},
		wantConflicts: []string{"port-mismatch west"},
	}, {
		name: "resolution mismatch is reported, endpoints not served",
		cs: []contribution{
			kube("east", mk("east", []model.Port{http(80)}, model.ResolutionEDS, "10.0.0.1")),
			kube("west", mk("west", []model.Port{http(80)}, model.ResolutionDNS, "db.example")),
		},
		want: &model.Service{Hostname: "a.svc", Ports: []model.Port{http(80)}, Sources: []string{"east", "west"},
			Endpoints: []model.Endpoint{ep("east", "10.0.0.1", nil)}},
		wantConflicts: []string{"resolution-mismatch west"},
	}, {
		name: "other kinds do not merge: the first registry serves, the other is reported",
		cs: []contribution{
			{name: "a", kind: "consul", domain: "svc", svc: mk("a", []model.Port{http(80)}, model.ResolutionEDS, "10.0.0.1")},
			kube("b", mk("b", []model.Port{http(80)}, model.ResolutionEDS, "10.0.0.2")),
		},
		want:          mk("a", []model.Port{http(80)}, model.ResolutionEDS, "10.0.0.1"),
		wantConflicts: []string{"duplicate b"},
	}, {
		name: "kubernetes registries with different domains do not merge",
		cs: []contribution{
			kube("east", mk("east", []model.Port{http(80)}, model.ResolutionEDS, "10.0.0.1")),
			{name: "west", kind: "kubernetes", multicluster: true, domain: "other", svc: mk("west", []model.Port{http(80)}, model.ResolutionEDS, "10.0.0.2")},
		},
		want:          mk("east", []model.Port{http(80)}, model.ResolutionEDS, "10.0.0.1"),
		wantConflicts: []string{"duplicate west"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, conflicts := mergeHost("a.svc", tt.cs, nil)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("merged (-want +got):\n%s", diff)
			}
			var gotC []string
			for _, c := range conflicts {
				gotC = append(gotC, c.Category+" "+c.Registry)
				if c.Host != "a.svc" || !strings.Contains(c.Reason, tt.cs[0].name) {
					t.Errorf("conflict %v should name the host and the serving registry %q", c, tt.cs[0].name)
				}
			}
			if diff := cmp.Diff(tt.wantConflicts, gotC); diff != "" {
				t.Errorf("conflicts (-want +got):\n%s", diff)
			}
			// Merging again with the result as prev keeps the pointer.
			if again, _ := mergeHost("a.svc", tt.cs, got); again != got {
				t.Errorf("an equal merge returned a new pointer")
			}
		})
	}
}

func TestPortMismatchReasonNamesBothPortLists(t *testing.T) {
	t.Parallel()
	east := &model.Service{Hostname: "a.svc", Ports: []model.Port{{Name: "http", Number: 80, Protocol: "HTTP"}}}
	west := &model.Service{Hostname: "a.svc", Ports: []model.Port{{Name: "http", Number: 80, Protocol: "TCP"}}}
	_, cs := mergeHost("a.svc", []contribution{
		{name: "east", kind: "kubernetes", multicluster: true, domain: "svc", svc: east},
		{name: "west", kind: "kubernetes", multicluster: true, domain: "svc", svc: west},
	}, nil)
	if len(cs) != 1 {
		t.Fatalf("conflicts = %v, want one", cs)
	}
	for _, s := range []string{"http:80/TCP", "http:80/HTTP", `"east"`} {
		if !strings.Contains(cs[0].Reason, s) {
			t.Errorf("reason %q does not mention %s", cs[0].Reason, s)
		}
	}
}
