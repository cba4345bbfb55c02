// Package testfixture is the model the tests of xds and its packages
// translate and serve.
package testfixture

import (
	"testing"

	"google.golang.org/protobuf/proto"
	mcp "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/model"
)

// Orders is orders.vm.internal: one gRPC port served on another
// endpoint port by one of its endpoints, three endpoints (healthy,
// unhealthy, draining) in two zones.
func Orders() *model.Service {
	return &model.Service{
		Hostname: "orders.vm.internal",
		Ports:    []model.Port{{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}},
		Sources:  []string{"vms"},
		Endpoints: []model.Endpoint{
			{Address: "10.0.0.5", Ports: map[string]uint32{"grpc": 18080}, Labels: map[string]string{"version": "v1"},
				Locality: model.Locality{Region: "us-east", Zone: "us-east-1a"}, Weight: 2,
				Source: model.Source{Registry: "vms", Cluster: "vms"}},
			{Address: "10.0.0.6", Locality: model.Locality{Region: "us-east", Zone: "us-east-1b"}, Health: model.Unhealthy,
				Source: model.Source{Registry: "vms", Cluster: "vms", Network: "net1"}},
			{Address: "10.0.0.7", Locality: model.Locality{Region: "us-east", Zone: "us-east-1a"}, Health: model.Draining,
				Source: model.Source{Registry: "vms", Cluster: "vms"}},
		},
	}
}

// Services is the fixture model: Orders, an HTTP service on two ports
// with a duplicate endpoint, two TCP services on one port, a DNS service.
func Services() []*model.Service {
	return []*model.Service{
		Orders(),
		{
			Hostname: "web.vm.internal",
			Ports: []model.Port{
				{Name: "http", Number: 80, Protocol: model.ProtocolHTTP},
				{Name: "alt", Number: 8080, Protocol: model.ProtocolHTTP2},
			},
			Endpoints: []model.Endpoint{
				{Address: "10.0.1.1", Health: model.Degraded, Weight: 3},
				{Address: "10.0.1.1", Health: model.Healthy}, // duplicate: served once
			},
		},
		{
			Hostname:  "db.vm.internal",
			Ports:     []model.Port{{Name: "pg", Number: 5432, Protocol: model.ProtocolTCP}},
			Endpoints: []model.Endpoint{{Address: "10.0.2.1", Locality: model.Locality{Region: "eu"}}},
		},
		{
			Hostname:  "cache.vm.internal", // same TCP port as db: wins by name, db is skipped
			Ports:     []model.Port{{Name: "tcp", Number: 5432, Protocol: model.ProtocolTCP}},
			Endpoints: []model.Endpoint{{Address: "10.0.3.1"}},
		},
		{
			Hostname:   "api.ext.example",
			Resolution: model.ResolutionDNS,
			Ports:      []model.Port{{Name: "https", Number: 9090, Protocol: model.ProtocolHTTP2}},
			Endpoints: []model.Endpoint{
				{Address: "api2.example.com"},
				{Address: "api.example.com", Weight: 5},
			},
		},
	}
}

// Replace swaps (or with nil, drops) the service named host.
func Replace(svcs []*model.Service, host string, with *model.Service) []*model.Service {
	var out []*model.Service
	for _, s := range svcs {
		switch {
		case s.Hostname != host:
			out = append(out, s)
		case with != nil:
			out = append(out, with)
		}
	}
	return out
}

// ServiceEntryOf decodes an MCP Resource holding a ServiceEntry.
func ServiceEntryOf(t *testing.T, r proto.Message) (*mcp.Metadata, *networking.ServiceEntry) {
	t.Helper()
	res, ok := r.(*mcp.Resource)
	if !ok {
		t.Fatalf("resource is %T, want an MCP Resource", r)
	}
	se := &networking.ServiceEntry{}
	if err := res.GetBody().UnmarshalTo(se); err != nil {
		t.Fatalf("body of %s: %v", res.GetMetadata().GetName(), err)
	}
	return res.GetMetadata(), se
}
