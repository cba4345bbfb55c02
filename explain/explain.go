// Package explain holds the explanation of one served host: where it
// comes from, its endpoints, the traffic rules in force for it (the
// VirtualService and merged DestinationRule the translator applies, the
// route table, the policies as merged per port and subset), what was
// rejected for it, and why one endpoint is or is not in each kind of
// client's EDS (docs/architecture.md §5, "Explain").
//
// It is computed on the server from what the gateway holds (Input), with
// the translator's own functions (xds/translate's RulesFor, MergedPolicy,
// EDSMember, ServiceEntryOmission), and served as JSON on
// /debug/describez; `meshfed describe` prints it and the status page's
// host page renders it. One mechanism: the CLI and the page never compute
// an explanation themselves.
package explain

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/translate"
)

// Input is what an explanation reads of the running gateway.
type Input struct {
	// Snapshot is the model served now, with the traffic config in force
	// (Snapshot.Config) the translator applies.
	Snapshot *model.Snapshot
	// Registries is every registry's status (held, stale, restored).
	Registries []aggregate.RegistryStatus
	// Conflicts is everything kept from proxies (quarantine, duplicates,
	// the translator's skipped and invalid).
	Conflicts []aggregate.Conflict
	// Rules is the config sources' status: objects in force with their
	// sources, and those rejected.
	Rules istioconfig.Status
	// NotForClients is the translator's TrafficNotes.
	NotForClients []translate.TrafficNote
}

// ServiceInfo is one merged service (/debug/registryz).
type ServiceInfo struct {
	Host       string     `json:"host"`
	Resolution string     `json:"resolution"`
	Ports      []PortInfo `json:"ports"`
	Sources    []string   `json:"sources"`
	Endpoints  int        `json:"endpoints"`
	// Restored: some of its sources serve a state restored from state.dir
	// at start and have not synced since.
	Restored bool `json:"restored,omitempty"`
}

// PortInfo is a service port.
type PortInfo struct {
	Name     string `json:"name"`
	Port     uint32 `json:"port"`
	Protocol string `json:"protocol"`
}

// EndpointInfo is one endpoint of a service (/debug/endpointz).
type EndpointInfo struct {
	Address  string            `json:"address"`
	Ports    map[string]uint32 `json:"ports"` // by service port name
	Health   string            `json:"health"`
	Weight   uint32            `json:"weight"`
	Locality string            `json:"locality,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Registry string            `json:"registry"`
	Cluster  string            `json:"cluster,omitempty"`
	Network  string            `json:"network,omitempty"`
}

// Services lists the merged services of snap; restored names the
// registries serving a restored state.
func Services(snap *model.Snapshot, restored map[string]bool) []ServiceInfo {
	out := make([]ServiceInfo, 0, snap.Len())
	for _, s := range snap.Services() {
		out = append(out, serviceInfo(s, restored))
	}
	return out
}

func serviceInfo(s *model.Service, restored map[string]bool) ServiceInfo {
	info := ServiceInfo{
		Host:       s.Hostname,
		Resolution: s.Resolution.String(),
		Sources:    nonNil(s.Sources),
		Endpoints:  len(s.Endpoints),
		Restored:   slices.ContainsFunc(s.Sources, func(n string) bool { return restored[n] }),
		Ports:      []PortInfo{},
	}
	for _, p := range s.Ports {
		info.Ports = append(info.Ports, PortInfo{Name: p.Name, Port: p.Number, Protocol: string(p.Protocol)})
	}
	return info
}

// Endpoints lists the endpoints of svc, in the model's order.
func Endpoints(svc *model.Service) []EndpointInfo {
	out := make([]EndpointInfo, 0, len(svc.Endpoints))
	for i := range svc.Endpoints {
		out = append(out, endpointInfo(svc, &svc.Endpoints[i]))
	}
	return out
}

func endpointInfo(svc *model.Service, e *model.Endpoint) EndpointInfo {
	ports := make(map[string]uint32, len(svc.Ports))
	for _, p := range svc.Ports {
		if n, ok := e.PortFor(p); ok {
			ports[p.Name] = n
		}
	}
	return EndpointInfo{
		Address:  e.Address,
		Ports:    ports,
		Health:   e.Health.String(),
		Weight:   e.Weight,
		Locality: e.Locality.String(),
		Labels:   e.Labels,
		Registry: e.Source.Registry,
		Cluster:  e.Source.Cluster,
		Network:  e.Source.Network,
	}
}

// Description is the explanation of one host (/debug/describez?host=H,
// `meshfed describe HOST -o json`).
type Description struct {
	Service ServiceInfo `json:"service"`
	// Endpoints, sorted by locality, health and address.
	Endpoints []EndpointInfo `json:"endpoints"`
	// Conflicts naming the host.
	Conflicts []aggregate.Conflict `json:"conflicts"`
	// Routes: how each port is reached, per client class.
	Routes []RouteRef `json:"routes"`
	// Traffic is the traffic rules in force and rejected for the host.
	Traffic Traffic `json:"traffic"`
	// Endpoint explains one endpoint (with ?endpoint=ADDR).
	Endpoint *EndpointReport `json:"endpoint,omitempty"`
}

// RouteRef is how one service port is reached: the xDS names meshfed
// serves it under, per client class.
type RouteRef struct {
	Port         uint32 `json:"port"`
	Cluster      string `json:"cluster"`
	EnvoyRoute   string `json:"envoyRoute"`   // route configuration of the port's listener
	EnvoyDomains string `json:"envoyDomains"` // its virtual host's domains
	GRPCTarget   string `json:"grpcTarget"`   // what a proxyless client dials
}

// NotFoundError is a host or endpoint that is not served; its message
// says what is near (did you mean) or why it is not served.
type NotFoundError struct{ Msg string }

func (e *NotFoundError) Error() string { return e.Msg }

// Describe explains host. A host that is not served is a *NotFoundError
// naming the conflicts that name it, or the hosts near it.
func Describe(in Input, host string) (*Description, error) {
	d := &Description{Conflicts: []aggregate.Conflict{}, Routes: []RouteRef{}}
	for _, c := range in.Conflicts {
		if c.Host == host {
			d.Conflicts = append(d.Conflicts, c)
		}
	}
	svc, ok := in.Snapshot.Service(host)
	if !ok {
		msg := fmt.Sprintf("no service %q is served", host)
		if len(d.Conflicts) > 0 {
			msg += fmt.Sprintf("; %d conflicts name it (see /debug/conflictz):", len(d.Conflicts))
			for _, c := range d.Conflicts {
				msg += "\n  " + c.Category + ": " + c.Reason
			}
		} else if near := nearHosts(in.Snapshot, host); len(near) > 0 {
			msg += "; did you mean " + strings.Join(near, ", ") + "?"
		}
		return nil, &NotFoundError{msg}
	}
	restored := map[string]bool{}
	for _, r := range in.Registries {
		restored[r.Name] = r.Restored
	}
	d.Service = serviceInfo(svc, restored)
	d.Endpoints = Endpoints(svc)
	slices.SortFunc(d.Endpoints, func(a, b EndpointInfo) int {
		return cmp.Or(cmp.Compare(a.Locality, b.Locality), cmp.Compare(a.Health, b.Health), cmp.Compare(a.Address, b.Address))
	})
	for _, p := range svc.Ports {
		d.Routes = append(d.Routes, RouteRef{
			Port:         p.Number,
			Cluster:      translate.ClusterName(host, p.Number),
			EnvoyRoute:   translate.EnvoyRouteName(p.Number),
			EnvoyDomains: fmt.Sprintf("%s, %s:%d", host, host, p.Number),
			GRPCTarget:   "xds:///" + translate.GRPCListenerName(host, p.Number),
		})
	}
	d.Traffic = traffic(in, svc)
	return d, nil
}

// nearHosts suggests served hosts sharing the first label of host.
func nearHosts(snap *model.Snapshot, host string) []string {
	first, _, _ := strings.Cut(host, ".")
	var out []string
	for _, s := range snap.Services() {
		if f, _, _ := strings.Cut(s.Hostname, "."); f == first && len(out) < 5 {
			out = append(out, s.Hostname)
		}
	}
	return out
}

// nonNil makes empty lists encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
