package translate

import (
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	fault "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/istioconfig/drmerge"
	"github.com/meshfed/meshfed/model"
)

// The functions here answer, for one host, what the translator applies,
// with the translator's own rules (docs/architecture.md §3.6): package
// explain builds `meshfed describe`, /debug/describez and the host page
// from them, so an explanation cannot drift from what is served.

// HostRules is the traffic config the translator applies to a host.
type HostRules struct {
	// VirtualService is the one in force for the host (the most specific
	// host wins), nil without.
	VirtualService *model.ConfigObject
	// DestinationRule is its rule, merged when several name the host
	// (Merge.Spec is then its spec), nil without.
	DestinationRule *model.ConfigObject
	// Merge is how the DestinationRules for the host were merged
	// (drmerge); Merge.From lists them, oldest first.
	Merge drmerge.Result
}

// RulesFor returns the rules the translator applies to host in cfg (nil:
// none): the same host index (configByHost) and merge. When the rules
// in force failed to build, the translator keeps the last rules that
// built; that case is listed as an xds-invalid conflict of the host.
func RulesFor(cfg *model.ConfigSnapshot, host string) HostRules {
	if cfg == nil {
		return HostRules{}
	}
	idx := configByHost(cfg, nil)
	hc := idx.lookup(host)
	r := HostRules{VirtualService: hc.vs, DestinationRule: hc.dr}
	if hc.dr == nil {
		return r
	}
	for _, m := range idx.merged {
		if m.obj == hc.dr {
			r.Merge = drmerge.Merge(m.from)
			return r
		}
	}
	r.Merge = drmerge.Merge([]*model.ConfigObject{hc.dr})
	return r
}

// MergedPolicy is the policy in force on the cluster of a subset (nil:
// the port's own cluster) on port: the rule's policy with its
// portLevelSettings, overridden field by field by the subset's (Istio's
// MergeTrafficPolicy), as the clusters are built.
func MergedPolicy(rule, subset *networking.TrafficPolicy, port uint32) *networking.TrafficPolicy {
	return mergedPolicy(rule, subset, port)
}

// LocalityRules are the locality settings of a merged policy that change
// a cluster's endpoints per client: Failover (per-client priorities, only
// with outlier detection, as Istio) and Distribute (the locality weights
// of `from: "*"`). Both nil when none applies.
func LocalityRules(tp *networking.TrafficPolicy) (failover []*networking.LocalityLoadBalancerSetting_Failover, distribute map[string]uint32) {
	return failoverOf(tp), distributeOf(tp)
}

// EDSMember reports whether endpoint i of eps is in the
// ClusterLoadAssignment built from eps for service port p, on which port,
// and if not, why: the rule of rebuildCLA (claPort).
func EDSMember(eps []model.Endpoint, i int, p model.Port) (port uint32, why string) {
	seen := make(map[epKey]bool, i)
	for j := range eps[:i] {
		claPort(&eps[j], p, seen)
	}
	port, ok := eps[i].PortFor(p)
	if !ok {
		return 0, "it does not serve port " + p.Name
	}
	if _, ok := claPort(&eps[i], p, seen); !ok {
		return port, "an earlier endpoint has the same address and port (the first one is served)"
	}
	return port, ""
}

// ServiceEntryOmission says why the ServiceEntry served to istiod over MCP
// leaves endpoint e of a service with ports out, "" when it lists it
// (workloadEntry).
func ServiceEntryOmission(e *model.Endpoint, ports []model.Port) string {
	if e.Health == model.Unhealthy || e.Health == model.Draining {
		return "health " + e.Health.String() + ": istiod would send it to proxies as healthy"
	}
	for _, p := range ports {
		if _, ok := e.PortFor(p); !ok {
			return "it does not serve port " + p.Name + " (a ServiceEntry endpoint serves every port)"
		}
	}
	return ""
}

// RoutePolicies are the policies of an http route as Envoy is sent them
// (envoyroutes.go): its retry policy (Istio's default when the route
// sets none; nil when retries are off), its fault (nil: none) and its
// mirrors with the share of requests each copies (explicit 0 % mirrors
// are left out, as they are from the route).
type RoutePolicies struct {
	Retry   *route.RetryPolicy
	Fault   *fault.HTTPFault
	Mirrors []Mirror
}

// Mirror is one mirror of a route.
type Mirror struct {
	Destination *networking.Destination
	Percent     float64 // of requests, 0..100
}

// RoutePoliciesOf returns the policies of hr (see RoutePolicies).
func RoutePoliciesOf(hr *networking.HTTPRoute) RoutePolicies {
	out := RoutePolicies{Retry: envoyRetry(hr.GetRetries(), false)}
	if f := hr.GetFault(); f != nil {
		out.Fault = httpFault(f)
	}
	eachMirror(hr, func(d *networking.Destination, p *typev3.FractionalPercent, ok bool) {
		if ok {
			out.Mirrors = append(out.Mirrors, Mirror{Destination: d, Percent: float64(p.GetNumerator()) / 10000})
		}
	})
	return out
}
