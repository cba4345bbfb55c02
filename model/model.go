// Package model is meshfed's abstract service model: what every registry
// publishes and what xDS translation reads. It depends on the standard
// library only.
//
// Values handed across package boundaries are treated as immutable: a
// registry never changes a slice or map after publishing it, and the
// aggregator never changes a Service after putting it in a Snapshot.
// Consumers rely on it to share rather than copy: the aggregator's
// normalized services hold the registry's endpoints, ports and maps
// wherever normalization leaves them unchanged.
package model

import (
	"fmt"
	"strings"
)

// Protocol is the application protocol of a service port.
type Protocol string

// Protocols a port may carry.
const (
	ProtocolHTTP  Protocol = "HTTP"
	ProtocolHTTP2 Protocol = "HTTP2"
	ProtocolGRPC  Protocol = "GRPC"
	ProtocolTCP   Protocol = "TCP"
)

// ParseProtocol maps a protocol name, case-insensitively, to a Protocol.
func ParseProtocol(s string) (Protocol, error) {
	switch p := Protocol(strings.ToUpper(s)); p {
	case ProtocolHTTP, ProtocolHTTP2, ProtocolGRPC, ProtocolTCP:
		return p, nil
	}
	return "", fmt.Errorf("unknown protocol %q (want HTTP, HTTP2, GRPC or TCP)", s)
}

// IsHTTP reports whether traffic on the port is routed by HTTP host.
func (p Protocol) IsHTTP() bool { return p != ProtocolTCP && p != "" }

// Port is one port a service listens on.
type Port struct {
	Name     string
	Number   uint32
	Protocol Protocol
}

// Resolution says how clients find a service's endpoints.
type Resolution int

// Resolutions.
const (
	// ResolutionEDS: the endpoints are IP addresses served over EDS.
	ResolutionEDS Resolution = iota
	// ResolutionDNS: the endpoints are hostnames that the proxy resolves.
	ResolutionDNS
)

func (r Resolution) String() string {
	if r == ResolutionDNS {
		return "DNS"
	}
	return "EDS"
}

// Health is the health of one endpoint, as proxies should treat it.
type Health int

// Health values. The zero value is HEALTHY.
const (
	Healthy Health = iota
	Unhealthy
	Draining
	Degraded
)

var healthNames = [...]string{"HEALTHY", "UNHEALTHY", "DRAINING", "DEGRADED"}

func (h Health) String() string {
	if int(h) < len(healthNames) && h >= 0 {
		return healthNames[h]
	}
	return fmt.Sprintf("Health(%d)", int(h))
}

// ParseHealth maps HEALTHY, UNHEALTHY, DRAINING or DEGRADED
// (case-insensitively) to a Health; "" is HEALTHY.
func ParseHealth(s string) (Health, error) {
	if s == "" {
		return Healthy, nil
	}
	for i, n := range healthNames {
		if strings.EqualFold(s, n) {
			return Health(i), nil
		}
	}
	return 0, fmt.Errorf("unknown health %q (want HEALTHY, UNHEALTHY, DRAINING or DEGRADED)", s)
}

// Locality is where an endpoint runs.
type Locality struct {
	Region  string
	Zone    string
	SubZone string
}

// ParseLocality reads "region/zone/subzone"; trailing parts may be omitted.
func ParseLocality(s string) (Locality, error) {
	if s == "" {
		return Locality{}, nil
	}
	parts := strings.Split(s, "/")
	if len(parts) > 3 {
		return Locality{}, fmt.Errorf("locality %q has more than 3 parts (want region/zone/subzone)", s)
	}
	var l Locality
	for i, p := range parts {
		if p == "" && i < len(parts)-1 {
			return Locality{}, fmt.Errorf("locality %q has an empty part", s)
		}
		switch i {
		case 0:
			l.Region = p
		case 1:
			l.Zone = p
		case 2:
			l.SubZone = p
		}
	}
	return l, nil
}

func (l Locality) String() string {
	switch {
	case l.SubZone != "":
		return l.Region + "/" + l.Zone + "/" + l.SubZone
	case l.Zone != "":
		return l.Region + "/" + l.Zone
	}
	return l.Region
}

// IsZero reports whether no part of the locality is set.
func (l Locality) IsZero() bool { return l == Locality{} }

// Source says where an endpoint came from.
type Source struct {
	Registry string // registry name from clusters.yaml
	Cluster  string // Kubernetes cluster; for other kinds, the registry name
	Network  string // network the endpoint is reachable on; "" is the default network
}

// Endpoint is one instance of a service.
type Endpoint struct {
	// Address is an IP address, or a hostname for ResolutionDNS services.
	Address string
	// Ports maps a service port name to the port this endpoint listens on.
	// A port name missing here means the endpoint uses the service port; a
	// name mapped to 0 (NotServed) means the endpoint does not serve that
	// port at all (a Curator instance without sslPort, a Dubbo provider of
	// one protocol) and is left out of that port's endpoints.
	Ports    map[string]uint32
	Labels   map[string]string
	Locality Locality
	// Weight is the load-balancing weight; 0 means 1.
	Weight uint32
	Health Health
	Source Source
	// Origin names the item in its platform (a znode path, an instance id,
	// a file line) so that reports can point at it. It is not served.
	Origin string
}

// NotServed as an Endpoint.Ports value says the endpoint does not serve
// that service port.
const NotServed uint32 = 0

// PortFor returns the port the endpoint listens on for the service port p,
// and false if it does not serve p.
func (e *Endpoint) PortFor(p Port) (uint32, bool) {
	if n, ok := e.Ports[p.Name]; ok {
		return n, n != NotServed
	}
	return p.Number, true
}

// Service is one hostname with its ports and endpoints.
type Service struct {
	// Hostname is the fully qualified name clients use, e.g. orders.vm.internal.
	Hostname   string
	Ports      []Port
	Resolution Resolution
	Endpoints  []Endpoint
	// Sources lists the registries the service came from, sorted; set by the
	// aggregator.
	Sources []string
	// Namespace is the namespace the service belongs to for scoping
	// (docs/architecture.md §3.7): its Kubernetes namespace, its
	// ServiceEntry's namespace; for other registries the registry's name,
	// set by the aggregator when the registry leaves it empty.
	Namespace string
	// ExportTo lists the namespaces that may see the service, as Istio's
	// exportTo: "*" every namespace, "." its own, "~" none, or names.
	// Empty: every namespace.
	ExportTo []string
}

// Port returns the service port with the given number.
func (s *Service) Port(number uint32) (Port, bool) {
	for _, p := range s.Ports {
		if p.Number == number {
			return p, true
		}
	}
	return Port{}, false
}

// ShardKey names one registry's share of the model.
type ShardKey struct {
	Kind string // file, kubernetes, consul, eureka, zookeeper
	Name string // registry name, unique across clusters.yaml
}

func (k ShardKey) String() string { return k.Kind + "/" + k.Name }

// Rejection is one item kept out of the model, with the reason.
type Rejection struct {
	// Registry is the registry the item came from; "" for items the
	// aggregator rejected while merging.
	Registry string
	// Host is the service hostname the item belongs to, if known.
	Host string
	// Subject names the item: an endpoint address, a znode path, an
	// instance id, a port.
	Subject string
	Reason  string
}

func (r Rejection) String() string {
	var b strings.Builder
	if r.Registry != "" {
		b.WriteString(r.Registry)
		b.WriteString(": ")
	}
	if r.Host != "" {
		b.WriteString(r.Host)
		b.WriteString(": ")
	}
	if r.Subject != "" {
		b.WriteString(r.Subject)
		b.WriteString(": ")
	}
	b.WriteString(r.Reason)
	return b.String()
}

// Selects reports whether labels carry every value of selector (a key
// labels lack reads as ""; an empty selector selects everything), as
// subsets select endpoints.
func Selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
