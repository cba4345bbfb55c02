package translate

import (
	"math"
	"slices"
	"strconv"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	commonfault "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	fault "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/model"
)

// Traffic management for proxyless gRPC clients (docs/architecture.md
// §3.6): the VirtualService and DestinationRule in force for a host shape
// that host's gRPC route configurations and clusters.
// Only what grpc-go's xDS client implements is produced (its xdsresource
// validation): route matching on path and headers, weighted clusters,
// max stream duration, retries on gRPC status codes, the HTTP fault
// filter, ring-hash consistent hashing by header, circuit-breaking max
// requests and outlier detection; what is left out is listed by
// TrafficNotes (grpcnotes.go). Envoy's translation is in envoyroutes.go
// and envoyclusters.go.

// hostConfig is the traffic config of one host: the VirtualService whose
// hosts name it (and that applies to the mesh), and the DestinationRule of
// the host. A host's resources are rebuilt when either pointer changes.
type hostConfig struct {
	vs, dr *model.ConfigObject
}

func (hc hostConfig) virtualService() *networking.VirtualService {
	if hc.vs == nil {
		return nil
	}
	vs, _ := hc.vs.Spec.(*networking.VirtualService)
	return vs
}

func (hc hostConfig) destinationRule() *networking.DestinationRule {
	if hc.dr == nil {
		return nil
	}
	dr, _ := hc.dr.Spec.(*networking.DestinationRule)
	return dr
}

// SubsetClusterName is the cluster of a DestinationRule subset, as Istio
// names it: outbound|<port>|<subset>|<host>.
func SubsetClusterName(host string, port uint32, subset string) string {
	return "outbound|" + uitoa(port) + "|" + subset + "|" + host
}

func uitoa(v uint32) string {
	if v == 0 {
		return "0"
	}
	var b [10]byte
	i := len(b)
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return string(b[i:])
}

// portOf tells the single port of a service when it has exactly one; a
// destination without a port uses it, as Istio does.
type portOf func(host string) (uint32, bool)

// grpcRoutes translates the http routes of vs that apply to port into
// gRPC routes, and reports whether any route injects a fault (the
// listener then needs the fault filter). hashOf gives the hash policy of
// a destination (its host's DestinationRule, merged for its subset and
// port, as Istio's hashForVirtualService).
// host's DestinationRule (nil for none).
//
// Destinations that name no cluster are left out (chk); a route with
// none left is left out and reported in dropped.
func grpcRoutes(vs *networking.VirtualService, host string, port uint32, ns string, ports portOf, hashOf func(*networking.Destination) []*route.RouteAction_HashPolicy, chk *destChecker) (routes []*route.Route, usesFault, dropped bool) {
	for i, hr := range vs.GetHttp() {
		action := &route.RouteAction{Timeout: durationpb.New(0)}
		name := hr.GetName()
		if name == "" {
			name = "http-" + uitoa(uint32(i))
		}
		all := hr.GetRoute()
		dests := validDests(all, ns, name, chk)
		if len(all) > 0 && dropRoute(all, dests, name, chk) {
			dropped = true
			continue
		}
		for _, d := range dests {
			action.HashPolicy = appendHash(action.HashPolicy, hashOf(resolveDest(d.GetDestination(), ns)))
		}
		if len(all) == 1 {
			action.ClusterSpecifier = &route.RouteAction_Cluster{Cluster: destCluster(resolveDest(dests[0].GetDestination(), ns), host, port, ports)}
		} else {
			wc := &route.WeightedCluster{}
			for _, d := range dests {
				wc.Clusters = append(wc.Clusters, &route.WeightedCluster_ClusterWeight{
					Name:   destCluster(resolveDest(d.GetDestination(), ns), host, port, ports),
					Weight: wrapperspb.UInt32(uint32(max(d.GetWeight(), 0))),
				})
			}
			action.ClusterSpecifier = &route.RouteAction_WeightedClusters{WeightedClusters: wc}
		}
		if t := hr.GetTimeout(); t != nil && t.AsDuration() > 0 {
			action.MaxStreamDuration = &route.RouteAction_MaxStreamDuration{MaxStreamDuration: durationpb.New(t.AsDuration())}
		}
		action.RetryPolicy = grpcRetry(hr.GetRetries())
		var perFilter map[string]*anypb.Any
		if f := hr.GetFault(); f != nil {
			perFilter = map[string]*anypb.Any{wellknown.Fault: mustAny(httpFault(f))}
			usesFault = true
		}
		matches := hr.GetMatch()
		if len(matches) == 0 {
			matches = []*networking.HTTPMatchRequest{nil}
		}
		for _, m := range matches {
			if m.GetPort() != 0 && m.GetPort() != port {
				continue
			}
			if unsupportedMatch(m) {
				continue // dropping a condition would widen the match: leave it out, as grpc-go does with query matchers
			}
			r := &route.Route{
				Name:                 name,
				Match:                routeMatch(m),
				Action:               &route.Route_Route{Route: action},
				TypedPerFilterConfig: perFilter,
			}
			// grpc-go fails the calls a redirect or direct-response route
			// matches (an unsupported action), which keeps the match from
			// falling through to the routes after it.
			if rd := hr.GetRedirect(); rd != nil {
				r.Action = redirectAction(rd, port)
			} else if d := hr.GetDirectResponse(); d != nil {
				r.Action = &route.Route_DirectResponse{DirectResponse: &route.DirectResponseAction{Status: d.GetStatus()}}
			}
			routes = append(routes, r)
		}
	}
	return routes, usesFault, dropped
}

func destCluster(d *networking.Destination, host string, port uint32, ports portOf) string {
	p := destPort(d, host, port, ports)
	if d.GetSubset() != "" {
		return SubsetClusterName(d.GetHost(), p, d.GetSubset())
	}
	return ClusterName(d.GetHost(), p)
}

// destPort is the port of a destination: its own, else the route's port
// for the same host, else the destination's only port, else the route's
// port (Istio's GetDestinationCluster).
func destPort(d *networking.Destination, host string, port uint32, ports portOf) uint32 {
	if p := d.GetPort().GetNumber(); p != 0 {
		return p
	}
	if d.GetHost() != host {
		if only, ok := ports(d.GetHost()); ok {
			return only
		}
	}
	return port
}

// unsupportedMatch reports whether m has a condition gRPC routes cannot
// express here: method, authority, scheme, query parameters, headers that
// must be absent, source labels or namespace, or gateways.
func unsupportedMatch(m *networking.HTTPMatchRequest) bool {
	return m != nil && (m.GetMethod() != nil || m.GetAuthority() != nil || m.GetScheme() != nil ||
		len(m.GetQueryParams()) > 0 || len(m.GetWithoutHeaders()) > 0 || len(m.GetSourceLabels()) > 0 ||
		m.GetSourceNamespace() != "" || len(m.GetGateways()) > 0)
}

// routeMatch translates one Istio match (nil: everything).
func routeMatch(m *networking.HTTPMatchRequest) *route.RouteMatch {
	rm := &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}}
	if m == nil {
		return rm
	}
	switch u := m.GetUri().GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		rm.PathSpecifier = &route.RouteMatch_Path{Path: u.Exact}
	case *networking.StringMatch_Prefix:
		rm.PathSpecifier = &route.RouteMatch_Prefix{Prefix: u.Prefix}
	case *networking.StringMatch_Regex:
		rm.PathSpecifier = &route.RouteMatch_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: u.Regex}}
	}
	if m.GetIgnoreUriCase() {
		rm.CaseSensitive = wrapperspb.Bool(false)
	}
	names := make([]string, 0, len(m.GetHeaders()))
	for k := range m.GetHeaders() {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		hm := &route.HeaderMatcher{Name: k}
		switch v := m.GetHeaders()[k].GetMatchType().(type) {
		case *networking.StringMatch_Exact:
			hm.HeaderMatchSpecifier = &route.HeaderMatcher_StringMatch{StringMatch: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: v.Exact}}}
		case *networking.StringMatch_Prefix:
			hm.HeaderMatchSpecifier = &route.HeaderMatcher_StringMatch{StringMatch: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: v.Prefix}}}
		case *networking.StringMatch_Regex:
			hm.HeaderMatchSpecifier = &route.HeaderMatcher_StringMatch{StringMatch: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: v.Regex}}}}
		default: // {} : the header is present
			hm.HeaderMatchSpecifier = &route.HeaderMatcher_PresentMatch{PresentMatch: true}
		}
		rm.Headers = append(rm.Headers, hm)
	}
	return rm
}

// percentOf is a percentage as a fraction of a million.
func percentOf(v float64) *typev3.FractionalPercent {
	return &typev3.FractionalPercent{Numerator: uint32(math.Round(v * 10000)), Denominator: typev3.FractionalPercent_MILLION}
}

// faultPercent is the share of requests a fault applies to, as Istio's
// TranslateFault: percentage if set, else the deprecated integer percent
// (delay only; 0 when unset). Unset means no request is delayed or
// aborted, as Istio's API documents it.
func faultPercent(p *networking.Percent, deprecated int32) *typev3.FractionalPercent {
	if p != nil {
		return percentOf(p.GetValue())
	}
	return percentOf(float64(deprecated))
}

// eachMirror calls f for every mirror of hr, the deprecated single
// mirror first, with its share (ok false: an explicit 0%, nothing copied).
func eachMirror(hr *networking.HTTPRoute, f func(d *networking.Destination, p *typev3.FractionalPercent, ok bool)) {
	if m := hr.GetMirror(); m != nil {
		//lint:ignore SA1019 deprecated in Istio, still honoured by it
		p, ok := mirrorPercent(hr.GetMirrorPercentage(), hr.GetMirrorPercent())
		f(m, p, ok)
	}
	for _, m := range hr.GetMirrors() {
		p, ok := mirrorPercent(m.GetPercentage(), nil)
		f(m.GetDestination(), p, ok)
	}
}

// mirrorPercent is the share of requests a mirror copies, as Istio's
// MirrorPercent: percentage if set, else the deprecated integer
// mirror_percent, else 100%. An explicit 0 mirrors nothing: ok is false.
func mirrorPercent(p *networking.Percent, deprecated *wrapperspb.UInt32Value) (_ *typev3.FractionalPercent, ok bool) {
	switch {
	case p != nil:
		return percentOf(p.GetValue()), p.GetValue() > 0
	case deprecated != nil:
		return percentOf(float64(deprecated.GetValue())), deprecated.GetValue() > 0
	default:
		return percentOf(100), true
	}
}

// httpFault is the per-route config of the HTTP fault filter.
func httpFault(f *networking.HTTPFaultInjection) *fault.HTTPFault {
	out := &fault.HTTPFault{}
	if d := f.GetDelay(); d != nil && d.GetFixedDelay() != nil {
		out.Delay = &commonfault.FaultDelay{
			FaultDelaySecifier: &commonfault.FaultDelay_FixedDelay{FixedDelay: durationpb.New(d.GetFixedDelay().AsDuration())},
			//lint:ignore SA1019 deprecated in Istio, still honoured by it
			Percentage: faultPercent(d.GetPercentage(), d.GetPercent()),
		}
	}
	if a := f.GetAbort(); a != nil {
		ab := &fault.FaultAbort{Percentage: faultPercent(a.GetPercentage(), 0)}
		switch e := a.GetErrorType().(type) {
		case *networking.HTTPFaultInjection_Abort_HttpStatus:
			ab.ErrorType = &fault.FaultAbort_HttpStatus{HttpStatus: uint32(e.HttpStatus)}
		case *networking.HTTPFaultInjection_Abort_GrpcStatus:
			code, _ := grpcCode(e.GrpcStatus) // validated by the config source
			ab.ErrorType = &fault.FaultAbort_GrpcStatus{GrpcStatus: code}
		}
		out.Abort = ab
	}
	return out
}

// faultFilter is the HTTP fault filter with no fault of its own: routes
// turn it on through their per-filter config.
func faultFilter() *hcm.HttpFilter {
	return &hcm.HttpFilter{
		Name:       wellknown.Fault,
		ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: mustAny(&fault.HTTPFault{})},
	}
}

// hashPolicy is the gRPC route hash policy of a traffic policy's
// consistentHash by header (nil otherwise: grpc-go hashes by header only).
func hashPolicy(tp *networking.TrafficPolicy) []*route.RouteAction_HashPolicy {
	h := tp.GetLoadBalancer().GetConsistentHash().GetHttpHeaderName()
	if h == "" {
		return nil
	}
	return []*route.RouteAction_HashPolicy{{
		PolicySpecifier: &route.RouteAction_HashPolicy_Header_{Header: &route.RouteAction_HashPolicy_Header{HeaderName: strings.ToLower(h)}},
	}}
}

// applyPolicy sets the parts of an Istio traffic policy (merged for the
// port and subset) grpc-go implements on a gRPC cluster: consistentHash
// by header → RING_HASH (the route carries the hash policy),
// LEAST_REQUEST, connectionPool.http.http2MaxRequests → circuit-breaking
// max requests, and outlier detection (grpcOutlier).
// ROUND_ROBIN and unset stay ROUND_ROBIN; RANDOM and PASSTHROUGH, which
// grpc-go does not implement, fall back to ROUND_ROBIN.
func applyPolicy(c *cluster.Cluster, tp *networking.TrafficPolicy) {
	if tp == nil {
		return
	}
	lb := tp.GetLoadBalancer()
	if ch := lb.GetConsistentHash(); ch != nil && ch.GetHttpHeaderName() != "" {
		c.LbPolicy = cluster.Cluster_RING_HASH
		rh := &cluster.Cluster_RingHashLbConfig{HashFunction: cluster.Cluster_RingHashLbConfig_XX_HASH}
		if n := ringSize(ch); n > 0 {
			rh.MinimumRingSize = wrapperspb.UInt64(n)
		}
		c.LbConfig = &cluster.Cluster_RingHashLbConfig_{RingHashLbConfig: rh}
	} else if lb.GetSimple() == networking.LoadBalancerSettings_LEAST_REQUEST {
		c.LbPolicy = cluster.Cluster_LEAST_REQUEST
	}
	if n := tp.GetConnectionPool().GetHttp().GetHttp2MaxRequests(); n > 0 {
		c.CircuitBreakers = &cluster.CircuitBreakers{Thresholds: []*cluster.CircuitBreakers_Thresholds{{
			Priority:    core.RoutingPriority_DEFAULT,
			MaxRequests: wrapperspb.UInt32(uint32(n)),
		}}}
	}
	if od := tp.GetOutlierDetection(); od != nil {
		c.OutlierDetection = grpcOutlier(od)
	}
}

// subsetEndpoints are the endpoints of svc carrying every label of the
// subset.
func subsetEndpoints(svc *model.Service, labels map[string]string) []model.Endpoint {
	var out []model.Endpoint
	for _, e := range svc.Endpoints {
		if model.Selects(labels, e.Labels) {
			out = append(out, e)
		}
	}
	return out
}

// grpcCode parses a gRPC status name ("UNAVAILABLE") as grpc-go does.
func grpcCode(name string) (uint32, bool) {
	var c codes.Code
	if err := c.UnmarshalJSON([]byte(strconv.Quote(name))); err != nil {
		return 0, false
	}
	return uint32(c), true
}
