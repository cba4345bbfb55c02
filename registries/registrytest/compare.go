package registrytest

import (
	"cmp"
	"maps"
	"slices"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// Published returns services as a Publisher of c stores and publishes
// them: each endpoint with its defaults filled in
// (registries.Common.FillDefaults). services is not modified.
func Published(c registries.Common, services []model.Service) []model.Service {
	out := slices.Clone(services)
	for i := range out {
		out[i].Endpoints = c.FillDefaults(out[i].Endpoints)
	}
	return out
}

// CloneServices returns a deep copy of services, keeping nil slices and maps
// nil.
func CloneServices(services []model.Service) []model.Service {
	if services == nil {
		return nil
	}
	out := make([]model.Service, len(services))
	for i, s := range services {
		s.Ports = slices.Clone(s.Ports)
		s.Sources = slices.Clone(s.Sources)
		if s.Endpoints != nil {
			eps := make([]model.Endpoint, len(s.Endpoints))
			for j, e := range s.Endpoints {
				e.Ports = maps.Clone(e.Ports)
				e.Labels = maps.Clone(e.Labels)
				eps[j] = e
			}
			s.Endpoints = eps
		}
		out[i] = s
	}
	return out
}

// Sorted returns a deep copy of services in a canonical order: services by
// hostname, their ports by name then number, endpoints by address then
// origin.
func Sorted(services []model.Service) []model.Service {
	out := CloneServices(services)
	slices.SortFunc(out, func(a, b model.Service) int { return cmp.Compare(a.Hostname, b.Hostname) })
	for i := range out {
		slices.SortFunc(out[i].Ports, comparePorts)
		slices.SortFunc(out[i].Endpoints, compareEndpoints)
		slices.Sort(out[i].Sources)
	}
	return out
}

func comparePorts(a, b model.Port) int {
	return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Number, b.Number), cmp.Compare(a.Protocol, b.Protocol))
}

func compareEndpoints(a, b model.Endpoint) int {
	return cmp.Or(cmp.Compare(a.Address, b.Address), cmp.Compare(a.Origin, b.Origin),
		cmp.Compare(a.Source.Cluster, b.Source.Cluster))
}

// cmpOptions ignore the order of services, ports, endpoints and sources, and
// treat nil and empty slices and maps alike.
var cmpOptions = gocmp.Options{
	cmpopts.EquateEmpty(),
	cmpopts.SortSlices(func(a, b model.Service) bool { return a.Hostname < b.Hostname }),
	cmpopts.SortSlices(func(a, b model.Port) bool { return comparePorts(a, b) < 0 }),
	cmpopts.SortSlices(func(a, b model.Endpoint) bool { return compareEndpoints(a, b) < 0 }),
	cmpopts.SortSlices(func(a, b string) bool { return a < b }),
	cmpopts.SortSlices(func(a, b model.Rejection) bool { return a.String() < b.String() }),
}

// DiffServices returns a readable diff between want and got (empty if they
// are equal), ignoring order and nil-versus-empty.
func DiffServices(want, got []model.Service) string {
	return gocmp.Diff(want, got, cmpOptions)
}

// EqualServices reports whether a and b hold the same services, ignoring
// order and nil-versus-empty.
func EqualServices(a, b []model.Service) bool { return gocmp.Equal(a, b, cmpOptions) }

// AssertServices fails t with a diff if got differs from want (order
// ignored).
func AssertServices(t testing.TB, got, want []model.Service) {
	t.Helper()
	if d := DiffServices(want, got); d != "" {
		t.Errorf("services differ (-want +got):\n%s", d)
	}
}

// DiffRejections is DiffServices for rejection lists.
func DiffRejections(want, got []model.Rejection) string {
	return gocmp.Diff(want, got, cmpOptions)
}

// Hostnames returns the services' hostnames, sorted.
func Hostnames(services []model.Service) []string {
	out := make([]string, 0, len(services))
	for _, s := range services {
		out = append(out, s.Hostname)
	}
	slices.Sort(out)
	return out
}

// Find returns the service with the given hostname.
func Find(services []model.Service, host string) (model.Service, bool) {
	for _, s := range services {
		if s.Hostname == host {
			return s, true
		}
	}
	return model.Service{}, false
}
