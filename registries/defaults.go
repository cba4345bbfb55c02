package registries

import (
	"slices"

	"github.com/meshfed/meshfed/model"
)

// EndpointDefaults returns e with the defaults every endpoint of the
// registry is served with (docs/architecture.md §3.4, normalization gate):
// weight 0 becomes 1, Source.Registry is the registry's name, an empty
// Source.Cluster is the registry's name, a zero Locality is the registry's
// default locality, and empty Labels are nil. The aggregator's gate
// applies it to what it normalizes, and the Publisher (FillDefaults)
// before the gate sees a state, so that the gate finds nothing to change
// and shares the registry's endpoints instead of copying them.
func (c Common) EndpointDefaults(e model.Endpoint) model.Endpoint {
	if e.Weight == 0 {
		e.Weight = 1
	}
	e.Source.Registry = c.Name
	if e.Source.Cluster == "" {
		e.Source.Cluster = c.Name
	}
	if e.Locality.IsZero() {
		e.Locality = c.Locality
	}
	if len(e.Labels) == 0 {
		e.Labels = nil
	}
	return e
}

// hasDefaults reports whether EndpointDefaults leaves e unchanged (it
// compares the fields EndpointDefaults writes, so the two cannot drift).
func (c Common) hasDefaults(e *model.Endpoint) bool {
	d := c.EndpointDefaults(*e)
	return d.Weight == e.Weight && d.Source == e.Source && d.Locality == e.Locality && (d.Labels == nil) == (e.Labels == nil)
}

// FillDefaults returns eps with EndpointDefaults applied to each: eps
// itself when every endpoint has them already, otherwise a copy (eps is
// never modified: it may be published).
func (c Common) FillDefaults(eps []model.Endpoint) []model.Endpoint {
	for i := range eps {
		if !c.hasDefaults(&eps[i]) {
			out := slices.Clone(eps)
			for j := i; j < len(out); j++ {
				out[j] = c.EndpointDefaults(out[j])
			}
			return out
		}
	}
	return eps
}

// fillDefaults returns cv with FillDefaults applied to every service's
// endpoints, copying what it changes (cv's slices are not modified).
func (c Common) fillDefaults(cv Converted) Converted {
	var services []model.Service
	for i := range cv.Services {
		eps := c.FillDefaults(cv.Services[i].Endpoints)
		if len(eps) > 0 && &eps[0] == &cv.Services[i].Endpoints[0] {
			continue
		}
		if services == nil {
			services = slices.Clone(cv.Services)
		}
		services[i].Endpoints = eps
	}
	if services != nil {
		cv.Services = services
	}
	return cv
}
