package explain

// Why one endpoint of a host is or is not in each kind of client's EDS,
// from the rules the translator builds the resources with
// (translate.EDSMember, ServiceEntryOmission, MergedPolicy, LocalityRules)
// and how each client uses what it is sent (docs/architecture.md §5,
// "Explain").

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/translate"
	"github.com/meshfed/meshfed/yamlconf/yamlpath"
)

// EndpointReport explains one address of a host
// (/debug/describez?host=H&endpoint=ADDR, `meshfed describe HOST
// --endpoint ADDR -o json`).
type EndpointReport struct {
	Host string `json:"host"`
	// Query is ADDR as asked: an IP or IP:port.
	Query string `json:"query"`
	// Endpoints are the host's served endpoints at the address (one per
	// registry, or per port it serves with IP:port).
	Endpoints []EndpointVerdict `json:"endpoints"`
	// Quarantined are the conflicts naming the address: an endpoint the
	// normalization gate dropped (it is then in no client's EDS), or a
	// label it dropped.
	Quarantined []aggregate.Conflict `json:"quarantined"`
	// Scope says which proxies are sent the host at all.
	Scope Scope `json:"scope"`
}

// Scope is which proxies are sent a host. There is no Sidecar scoping
// yet (issue 23): every proxy is sent every host.
type Scope struct {
	// Scoped: some proxies are not sent the host.
	Scoped bool `json:"scoped"`
	// Note says who is sent it.
	Note string `json:"note"`
}

// everyProxy is the scope of every host while meshfed has no Sidecar
// scoping.
var everyProxy = Scope{Note: "not scoped: every proxy"}

// EndpointVerdict is one served endpoint and, per cluster and client
// kind, whether it is in the EDS and used.
type EndpointVerdict struct {
	Endpoint EndpointInfo `json:"endpoint"`
	// Registry is the state of the registry it comes from, and what that
	// means for it (held, stale, restored).
	Registry RegistryNote `json:"registry"`
	// Clusters are the host's clusters: one per port and per port and
	// subset.
	Clusters []ClusterVerdict `json:"clusters"`
	// ServiceEntry is istiod's (over MCP): whether the endpoint is listed
	// in the host's ServiceEntry meshfed/<host>, from which istiod builds
	// its proxies' EDS (subsets included).
	ServiceEntry Verdict `json:"serviceEntry"`
}

// RegistryNote is the state of an endpoint's registry.
type RegistryNote struct {
	Name  string `json:"name"`
	State string `json:"state"`
	Note  string `json:"note"`
}

// ClusterVerdict is one cluster of the host and the endpoint in it.
type ClusterVerdict struct {
	Cluster string `json:"cluster"`
	Port    uint32 `json:"port"`
	Subset  string `json:"subset,omitempty"`
	// EndpointPort is the port the endpoint is served on (0: not served).
	EndpointPort uint32 `json:"endpointPort,omitempty"`
	// Envoy is Envoy's, SotW and delta streams alike (both read the same
	// ClusterLoadAssignment); GRPC is proxyless gRPC's.
	Envoy Verdict `json:"envoy"`
	GRPC  Verdict `json:"grpc"`
	// Locality says whether clients get this cluster's endpoints in a
	// per-locality variant (failover priorities, distribute weights).
	Locality string `json:"locality"`
}

// Verdict is one client kind's view of the endpoint.
type Verdict struct {
	// In: the endpoint is in the resource the client is sent.
	In bool `json:"in"`
	// Used: the client picks it for new calls (when In).
	Used bool `json:"used"`
	// Reason says why.
	Reason string `json:"reason"`
}

// Explain explains address addr (an IP or IP:port) of host. An address that is neither served nor
// quarantined for the host is a *NotFoundError listing its addresses.
func Explain(in Input, host, addr string) (*EndpointReport, error) {
	svc, ok := in.Snapshot.Service(host)
	if !ok {
		_, err := Describe(in, host)
		return nil, err
	}
	ip, port := addr, uint32(0)
	if h, p, err := net.SplitHostPort(addr); err == nil {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return nil, &NotFoundError{fmt.Sprintf("endpoint %q: the port is not a number", addr)}
		}
		ip, port = h, uint32(n)
	}
	r := &EndpointReport{Host: host, Query: addr, Endpoints: []EndpointVerdict{}, Quarantined: []aggregate.Conflict{}, Scope: everyProxy}
	for _, c := range in.Conflicts {
		if c.Host == host && (c.Subject == ip || strings.HasPrefix(c.Subject, ip+" ")) {
			r.Quarantined = append(r.Quarantined, c)
		}
	}
	notServed := ""
	for _, c := range in.Conflicts {
		// The translator's invalid services (gateway.CategoryXDSInvalid)
		// are not served at all; kept or left-out rules are.
		if c.Host == host && c.Category == "xds-invalid" && !strings.HasPrefix(c.Reason, "traffic config") {
			notServed = "the host is not served: " + c.Reason
		}
	}
	rules := translate.RulesFor(in.Snapshot.Config, host)
	var subsets []*networking.Subset
	var top *networking.TrafficPolicy
	if dr := rules.Merge.Spec; dr != nil {
		subsets, top = dr.GetSubsets(), dr.GetTrafficPolicy()
	}
	var addrs []string
	for i := range svc.Endpoints {
		e := &svc.Endpoints[i]
		addrs = append(addrs, e.Address)
		if e.Address != ip {
			continue
		}
		var ports []model.Port
		for _, p := range svc.Ports {
			if n, ok := e.PortFor(p); ok && (port == 0 || n == port) {
				ports = append(ports, p)
			}
		}
		if port != 0 && len(ports) == 0 {
			continue
		}
		if port == 0 {
			ports = svc.Ports // also the ports it does not serve: say so
		}
		v := EndpointVerdict{Endpoint: endpointInfo(svc, e), Registry: registryNote(in.Registries, e.Source.Registry), Clusters: []ClusterVerdict{}}
		for _, p := range ports {
			v.Clusters = append(v.Clusters, clusterVerdict(svc, i, p, "", nil, top, notServed))
			for _, ss := range subsets {
				v.Clusters = append(v.Clusters, clusterVerdict(svc, i, p, ss.GetName(), ss, top, notServed))
			}
		}
		v.ServiceEntry = serviceEntryVerdict(svc, e, notServed)
		r.Endpoints = append(r.Endpoints, v)
	}
	if len(r.Endpoints) > 0 || len(r.Quarantined) > 0 {
		return r, nil
	}
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	msg := fmt.Sprintf("no endpoint %s of %s is served", addr, host)
	if port != 0 && slices.Contains(addrs, ip) {
		msg += fmt.Sprintf("; %s serves it on other ports (give the IP alone to see them)", ip)
	} else {
		msg += yamlpath.Suggest(ip, addrs)
	}
	if len(addrs) > 0 {
		shown := addrs[:min(len(addrs), 20)]
		msg += "; its addresses: " + strings.Join(shown, ", ")
		if len(addrs) > len(shown) {
			msg += fmt.Sprintf(" (and %d more)", len(addrs)-len(shown))
		}
	} else {
		msg += "; it has no endpoints"
	}
	for _, reg := range in.Registries {
		if reg.Hold != nil && slices.Contains(svc.Sources, reg.Name) {
			msg += fmt.Sprintf("; registry %s holds an update back (%d endpoints pending): an endpoint only in it is not served until it is released (meshfed release %s)",
				reg.Name, reg.Hold.Pending, reg.Name)
		}
	}
	return nil, &NotFoundError{msg}
}

// clusterVerdict is endpoint i of svc in the cluster of port p (subset
// ss, nil for the port's own cluster).
func clusterVerdict(svc *model.Service, i int, p model.Port, subset string, ss *networking.Subset, top *networking.TrafficPolicy, notServed string) ClusterVerdict {
	e := &svc.Endpoints[i]
	cv := ClusterVerdict{Cluster: translate.ClusterName(svc.Hostname, p.Number), Port: p.Number, Subset: subset}
	eps, idx := svc.Endpoints, i
	if ss != nil {
		cv.Cluster = translate.SubsetClusterName(svc.Hostname, p.Number, subset)
		if !model.Selects(ss.GetLabels(), e.Labels) {
			why := "outside subset " + subset + ": its labels do not carry " + LabelString(ss.GetLabels())
			cv.Envoy, cv.GRPC = Verdict{Reason: why}, Verdict{Reason: why}
			return cv
		}
		// The subset's CLA is built from the endpoints it selects.
		eps, idx = nil, 0
		for j := range svc.Endpoints {
			if model.Selects(ss.GetLabels(), svc.Endpoints[j].Labels) {
				if j == i {
					idx = len(eps)
				}
				eps = append(eps, svc.Endpoints[j])
			}
		}
	}
	if notServed != "" {
		cv.Envoy, cv.GRPC = Verdict{Reason: notServed}, Verdict{Reason: notServed}
		return cv
	}
	port, why := translate.EDSMember(eps, idx, p)
	if why != "" {
		cv.Envoy, cv.GRPC = Verdict{Reason: why}, Verdict{Reason: why}
		return cv
	}
	cv.EndpointPort = port
	cv.Envoy, cv.GRPC = healthVerdicts(e.Health)
	if svc.Resolution == model.ResolutionDNS {
		note := " (DNS resolution: in the cluster's own load assignment, which Envoy resolves)"
		cv.Envoy.Reason += note
		cv.GRPC.Reason += note
	}
	var tp *networking.TrafficPolicy
	if ss != nil {
		tp = ss.GetTrafficPolicy()
	}
	cv.Locality = localityNote(e, translate.MergedPolicy(top, tp, p.Number))
	return cv
}

// healthVerdicts is how Envoy and grpc-go use an endpoint of each health
// meshfed sends them: Envoy balances over HEALTHY ones, takes DEGRADED
// ones only when too few are healthy, and sends UNHEALTHY and DRAINING
// ones no new calls; grpc-go drops every endpoint that is not HEALTHY
// (or UNKNOWN, which meshfed never sends).
func healthVerdicts(h model.Health) (envoy, grpc Verdict) {
	switch h {
	case model.Healthy:
		return Verdict{In: true, Used: true, Reason: "HEALTHY: load balanced"},
			Verdict{In: true, Used: true, Reason: "HEALTHY: load balanced"}
	case model.Degraded:
		return Verdict{In: true, Used: true, Reason: "DEGRADED: used only while too few HEALTHY endpoints remain"},
			Verdict{In: true, Reason: "DEGRADED: grpc-go uses only HEALTHY endpoints"}
	case model.Draining:
		return Verdict{In: true, Reason: "DRAINING: listed, sent no new calls"},
			Verdict{In: true, Reason: "DRAINING: grpc-go uses only HEALTHY endpoints"}
	}
	return Verdict{In: true, Reason: h.String() + ": listed, sent no calls"},
		Verdict{In: true, Reason: h.String() + ": grpc-go uses only HEALTHY endpoints"}
}

// localityNote says whether the cluster's endpoints vary per client
// locality under tp, its merged policy (translate.LocalityRules).
func localityNote(e *model.Endpoint, tp *networking.TrafficPolicy) string {
	failover, distribute := translate.LocalityRules(tp)
	loc := e.Locality.String()
	if loc == "" {
		loc = "no locality"
	}
	switch {
	case failover != nil:
		return "per-client variant (localityLbSetting failover with outlierDetection): priority 0 for clients in " + loc +
			", higher (tried later) for clients elsewhere; clients without a locality get every endpoint at priority 0"
	case distribute != nil:
		return "locality weights from localityLbSetting.distribute (from \"*\"), the same for every client; the endpoint's locality is " + loc
	}
	return "one assignment for every client (no locality failover or distribute)"
}

// serviceEntryVerdict is whether istiod's ServiceEntry of svc lists e.
func serviceEntryVerdict(svc *model.Service, e *model.Endpoint, notServed string) Verdict {
	if notServed != "" {
		return Verdict{Reason: notServed}
	}
	if why := translate.ServiceEntryOmission(e, svc.Ports); why != "" {
		return Verdict{Reason: why}
	}
	return Verdict{In: true, Used: true, Reason: "listed in ServiceEntry meshfed/" + svc.Hostname + " (istiod sends it to its proxies as healthy)"}
}

// registryNote says what the state of registry name means for its
// endpoints.
func registryNote(regs []aggregate.RegistryStatus, name string) RegistryNote {
	i := slices.IndexFunc(regs, func(r aggregate.RegistryStatus) bool { return r.Name == name })
	if i < 0 {
		return RegistryNote{Name: name, Note: "no such registry now"}
	}
	r := regs[i]
	n := RegistryNote{Name: name, State: r.State.String()}
	switch {
	case r.Hold != nil || r.HeldDown:
		n.Note = "an update is held back by the hold-down (maxDeleteRatio): this is the state before it, which the held update may change or remove (meshfed release " + name + ")"
	case r.State == aggregate.Stale:
		n.Note = "stale: served from the registry's last good state, not confirmed since " + r.Since.UTC().Format("2006-01-02 15:04:05 UTC")
	case r.State == aggregate.Degraded:
		n.Note = "degraded: served from the registry's last good state (" + r.LastError + ")"
	case r.Restored:
		n.Note = "restored from state.dir at start, not yet confirmed by the registry"
	case r.State == aggregate.Synced:
		n.Note = "current"
	default:
		n.Note = strings.ToLower(r.State.String())
	}
	return n
}
