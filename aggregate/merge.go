package aggregate

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/meshfed/meshfed/model"
)

// contribution is one registry's normalized service for a hostname.
type contribution struct {
	name, kind, domain string
	multicluster       bool // the registry's kind merges same-domain services
	svc                *model.Service
}

// mergeHost merges the contributions for one hostname, sorted by registry
// name. It returns nil when there are none. prev is the service served for
// the hostname before; when the merge gives an equal service, prev is
// returned so that the pointer stays the same.
//
// Only registries of one multicluster kind (Kubernetes) that share a
// domain merge (a multicluster set): their endpoints are concatenated, the ports and
// resolution are those of the alphabetically first registry, and a registry
// whose ports differ is reported (port-mismatch) while its endpoints still
// serve the ports whose name matches; weights are scaled as in normalize
// when the merged endpoints' sum exceeds what clients accept. Any other registry publishing the
// same hostname is reported (duplicate) and not served; the first serves it.
func mergeHost(host string, cs []contribution, prev *model.Service) (*model.Service, []Conflict) {
	if len(cs) == 0 {
		return nil, nil
	}
	if len(cs) == 1 {
		return cs[0].svc, nil
	}
	first := cs[0]
	var conflicts []Conflict
	group := []contribution{first}
	for _, c := range cs[1:] {
		if first.multicluster && c.multicluster && first.kind == c.kind && first.domain == c.domain {
			group = append(group, c)
			continue
		}
		conflicts = append(conflicts, newConflict(CategoryDuplicate, c.name, host, host, fmt.Sprintf(
			"hostname is also published by registry %q, which serves it; only registries of one multicluster kind (kubernetes) sharing a domain merge",
			first.name)))
	}
	if len(group) == 1 {
		return first.svc, conflicts
	}

	out := &model.Service{
		Hostname:   host,
		Ports:      first.svc.Ports,
		Resolution: first.svc.Resolution,
		Sources:    make([]string, 0, len(group)),
		Namespace:  first.svc.Namespace,
		ExportTo:   first.svc.ExportTo,
	}
	n := 0
	for _, c := range group {
		n += len(c.svc.Endpoints)
	}
	out.Endpoints = make([]model.Endpoint, 0, n)
	for _, c := range group {
		out.Sources = append(out.Sources, c.name)
		if c.name == first.name {
			out.Endpoints = append(out.Endpoints, c.svc.Endpoints...)
			continue
		}
		if c.svc.Resolution != first.svc.Resolution {
			conflicts = append(conflicts, newConflict(CategoryResolutionMismatch, c.name, host, "resolution", fmt.Sprintf(
				"resolution %s differs from %s in registry %q; its endpoints are not served",
				c.svc.Resolution, first.svc.Resolution, first.name)))
			continue
		}
		if slices.Equal(c.svc.Ports, first.svc.Ports) {
			out.Endpoints = append(out.Endpoints, c.svc.Endpoints...)
			continue
		}
		common := 0
		for _, p := range first.svc.Ports {
			if _, ok := portNamed(c.svc.Ports, p.Name); ok {
				common++
			}
		}
		what := "its endpoints are merged for the ports whose name matches"
		if common == 0 {
			what = "no port name matches, so its endpoints are not served"
		}
		conflicts = append(conflicts, newConflict(CategoryPortMismatch, c.name, host, "ports", fmt.Sprintf(
			"ports [%s] differ from [%s] in registry %q; %s",
			formatPorts(c.svc.Ports), formatPorts(first.svc.Ports), first.name, what)))
		if common == 0 {
			continue
		}
		for _, e := range c.svc.Endpoints {
			out.Endpoints = append(out.Endpoints, remapPorts(e, c.svc.Ports, first.svc.Ports))
		}
	}
	sortEndpoints(out.Endpoints, out.Ports)
	// Each registry's weights fit (normalize); their concatenation may not.
	if sum, scaled := scaleWeights(out.Endpoints); scaled {
		conflicts = append(conflicts, scaledConflict(first.name, host, sum))
	}
	if prev != nil && equalService(prev, out) {
		return prev, conflicts
	}
	return out, conflicts
}

// remapPorts rewrites an endpoint's port overrides from its own service's
// ports to the served ports: for each served port it names the port the
// endpoint really listens on when that differs from the served number.
func remapPorts(e model.Endpoint, own, served []model.Port) model.Endpoint {
	ports := make(map[string]uint32)
	for _, p := range served {
		op, ok := portNamed(own, p.Name)
		if !ok {
			ports[p.Name] = model.NotServed // its cluster has no such port
			continue
		}
		if n, _ := e.PortFor(op); n != p.Number {
			ports[p.Name] = n
		}
	}
	e.Ports = nil
	if len(ports) > 0 {
		e.Ports = ports
	}
	return e
}

func portNamed(ports []model.Port, name string) (model.Port, bool) {
	for _, p := range ports {
		if p.Name == name {
			return p, true
		}
	}
	return model.Port{}, false
}

func formatPorts(ports []model.Port) string {
	parts := make([]string, len(ports))
	for i, p := range ports {
		parts[i] = fmt.Sprintf("%s:%d/%s", p.Name, p.Number, p.Protocol)
	}
	return strings.Join(parts, " ")
}

// reuse keeps the pointers of services in old that are equal to their
// replacement in next (next is changed in place) and returns the hostnames
// whose pointer changed, appeared or disappeared.
func reuse(old, next map[string]*model.Service) []string {
	var touched []string
	for h, s := range next {
		if o, ok := old[h]; ok && (o == s || equalService(o, s)) {
			next[h] = o
			continue
		}
		touched = append(touched, h)
	}
	for h := range old {
		if _, ok := next[h]; !ok {
			touched = append(touched, h)
		}
	}
	return touched
}

// equalService reports whether two services hold the same values (nil and
// empty slices and maps are equal).
func equalService(a, b *model.Service) bool {
	return a.Hostname == b.Hostname && a.Resolution == b.Resolution &&
		slices.Equal(a.Ports, b.Ports) && slices.Equal(a.Sources, b.Sources) &&
		a.Namespace == b.Namespace && slices.Equal(a.ExportTo, b.ExportTo) &&
		sameEndpoints(a.Endpoints, b.Endpoints)
}

// sameEndpoints reports whether two endpoint lists hold the same values;
// the same array (and length) is equal without a look.
func sameEndpoints(a, b []model.Endpoint) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true
	}
	for i := range a {
		if !sameEndpoint(&a[i], &b[i]) {
			return false
		}
	}
	return true
}

func sameEndpoint(a, b *model.Endpoint) bool {
	return a.Address == b.Address && a.Locality == b.Locality && a.Weight == b.Weight &&
		a.Health == b.Health && a.Source == b.Source && a.Origin == b.Origin &&
		sameMap(a.Ports, b.Ports) && sameMap(a.Labels, b.Labels)
}

func sameMap[V comparable](a, b map[string]V) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer() {
		return true
	}
	return maps.Equal(a, b)
}
