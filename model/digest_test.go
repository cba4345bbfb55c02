package model

import (
	"testing"
)

func digestSnapshot(mut func(svcs []*Service)) Digest {
	svcs := []*Service{
		{Hostname: "orders.vm.internal", Ports: []Port{{Name: "grpc", Number: 8080, Protocol: ProtocolGRPC}, {Name: "http", Number: 80, Protocol: ProtocolHTTP}},
			Sources: []string{"vms"},
			Endpoints: []Endpoint{
				{Address: "10.0.0.1", Labels: map[string]string{"a": "1", "b": "2"}, Source: Source{Registry: "vms", Cluster: "vms"}, Origin: "s.yaml:3"},
				{Address: "10.0.0.2", Weight: 2, Source: Source{Registry: "vms", Cluster: "vms"}},
			}},
		{Hostname: "web.shop.svc.cluster.local", Ports: []Port{{Name: "http", Number: 80, Protocol: ProtocolHTTP}},
			Sources: []string{"east", "west"},
			Endpoints: []Endpoint{
				{Address: "10.1.0.1", Source: Source{Registry: "east", Cluster: "east"}},
				{Address: "10.2.0.1", Source: Source{Registry: "west", Cluster: "west"}},
			}},
	}
	if mut != nil {
		mut(svcs)
	}
	return DigestOf(NewSnapshot(7, svcs))
}

func TestDigestIgnoresOrderVersionAndOrigin(t *testing.T) {
	t.Parallel()
	base := digestSnapshot(nil)
	same := map[string]func([]*Service){
		"endpoints reversed": func(s []*Service) { e := s[0].Endpoints; e[0], e[1] = e[1], e[0] },
		"ports reversed":     func(s []*Service) { p := s[0].Ports; p[0], p[1] = p[1], p[0] },
		"services reversed":  func(s []*Service) { s[0], s[1] = s[1], s[0] },
		"origin changed":     func(s []*Service) { s[0].Endpoints[0].Origin = "other" },
		"weight 0 is 1":      func(s []*Service) { s[0].Endpoints[0].Weight = 1 },
	}
	for name, mut := range same {
		if d := digestSnapshot(mut); d.Overall != base.Overall || !equalMaps(d.Registries, base.Registries) {
			t.Errorf("%s: digest changed: %+v, was %+v", name, d, base)
		}
	}
	if DigestOf(NewSnapshot(99, nil)).Overall != EmptyDigest || DigestOf(nil).Overall != EmptyDigest {
		t.Error("a snapshot without services does not have EmptyDigest")
	}
}

func TestDigestChangesWithServedContent(t *testing.T) {
	t.Parallel()
	base := digestSnapshot(nil)
	if len(base.Registries) != 3 {
		t.Fatalf("registries = %v, want vms, east, west", base.Registries)
	}
	tests := []struct {
		name    string
		mut     func([]*Service)
		changed string // the one registry whose digest changes
	}{
		{"health", func(s []*Service) { s[0].Endpoints[1].Health = Draining }, "vms"},
		{"label value", func(s []*Service) { s[0].Endpoints[0].Labels["b"] = "3" }, "vms"},
		{"endpoint port", func(s []*Service) { s[0].Endpoints[0].Ports = map[string]uint32{"grpc": 9090} }, "vms"},
		{"locality", func(s []*Service) { s[0].Endpoints[0].Locality = Locality{Region: "r"} }, "vms"},
		{"address", func(s []*Service) { s[1].Endpoints[1].Address = "10.2.0.2" }, "west"},
		{"network", func(s []*Service) { s[1].Endpoints[0].Source.Network = "n1" }, "east"},
		{"endpoint removed", func(s []*Service) { s[1].Endpoints = s[1].Endpoints[:1] }, "west"},
	}
	for _, tt := range tests {
		d := digestSnapshot(tt.mut)
		if d.Overall == base.Overall {
			t.Errorf("%s: overall digest unchanged", tt.name)
		}
		for reg, h := range d.Registries {
			if changed := h != base.Registries[reg]; changed != (reg == tt.changed) {
				t.Errorf("%s: registry %s changed=%v, want only %s to change", tt.name, reg, changed, tt.changed)
			}
		}
	}
	// A port change touches every registry contributing the service.
	d := digestSnapshot(func(s []*Service) { s[1].Ports[0].Number = 81 })
	if d.Registries["east"] == base.Registries["east"] || d.Registries["west"] == base.Registries["west"] || d.Registries["vms"] != base.Registries["vms"] {
		t.Errorf("port change of the east/west service: %v, was %v", d.Registries, base.Registries)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
