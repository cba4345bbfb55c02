package translate

import (
	"math"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/model"
)

// DestinationRule → clusters (docs/architecture.md §3.6), for Envoy in
// full and for proxyless gRPC in what grpc-go implements. Policies merge
// as Istio merges them (pilot/pkg/networking/core/cluster.go,
// MergeTrafficPolicy): the rule's policy, overridden field by field
// (loadBalancer, connectionPool, outlierDetection, tls) by its
// portLevelSettings for the port; a subset's policy overrides the result
// field by field, then the subset's own portLevelSettings.

// portPolicy is tp with its portLevelSettings for port applied (nil
// stays nil).
func portPolicy(tp *networking.TrafficPolicy, port uint32) *networking.TrafficPolicy {
	if tp == nil {
		return nil
	}
	var pl *networking.TrafficPolicy_PortTrafficPolicy
	for _, s := range tp.GetPortLevelSettings() {
		if s.GetPort().GetNumber() == port {
			pl = s
			break
		}
	}
	return overlayPolicy(tp, pl)
}

// mergedPolicy is the policy of a subset on a port (Istio's
// MergeTrafficPolicy).
func mergedPolicy(rule, subset *networking.TrafficPolicy, port uint32) *networking.TrafficPolicy {
	base := portPolicy(rule, port)
	if subset == nil {
		return base
	}
	sp := portPolicy(subset, port)
	if base == nil {
		return sp
	}
	return overlayPolicy(base, sp)
}

// policyParts are the four policies a TrafficPolicy and its
// portLevelSettings both carry.
type policyParts interface {
	GetLoadBalancer() *networking.LoadBalancerSettings
	GetConnectionPool() *networking.ConnectionPoolSettings
	GetOutlierDetection() *networking.OutlierDetection
	GetTls() *networking.ClientTLSSettings
}

// overlayPolicy is base's four policies, each overridden by over's where
// over sets it (over may be a nil pointer: nothing overrides).
func overlayPolicy(base, over policyParts) *networking.TrafficPolicy {
	out := &networking.TrafficPolicy{LoadBalancer: base.GetLoadBalancer(), ConnectionPool: base.GetConnectionPool(),
		OutlierDetection: base.GetOutlierDetection(), Tls: base.GetTls()}
	if over.GetLoadBalancer() != nil {
		out.LoadBalancer = over.GetLoadBalancer()
	}
	if over.GetConnectionPool() != nil {
		out.ConnectionPool = over.GetConnectionPool()
	}
	if over.GetOutlierDetection() != nil {
		out.OutlierDetection = over.GetOutlierDetection()
	}
	if over.GetTls() != nil {
		out.Tls = over.GetTls()
	}
	return out
}

// envoyHashPolicy is the route hash policy of a consistentHash load
// balancer: by header, cookie (Envoy generates it with the ttl when
// absent), source IP, or query parameter. nil without consistent hashing.
func envoyHashPolicy(tp *networking.TrafficPolicy) []*route.RouteAction_HashPolicy {
	ch := tp.GetLoadBalancer().GetConsistentHash()
	if ch == nil {
		return nil
	}
	hp := &route.RouteAction_HashPolicy{}
	switch k := ch.GetHashKey().(type) {
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		hp.PolicySpecifier = &route.RouteAction_HashPolicy_Header_{Header: &route.RouteAction_HashPolicy_Header{HeaderName: strings.ToLower(k.HttpHeaderName)}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		c := &route.RouteAction_HashPolicy_Cookie{Name: k.HttpCookie.GetName(), Path: k.HttpCookie.GetPath()}
		if t := k.HttpCookie.GetTtl(); t != nil {
			c.Ttl = durationpb.New(t.AsDuration())
		}
		for _, a := range k.HttpCookie.GetAttributes() {
			c.Attributes = append(c.Attributes, &route.RouteAction_HashPolicy_CookieAttribute{Name: a.GetName(), Value: a.GetValue()})
		}
		hp.PolicySpecifier = &route.RouteAction_HashPolicy_Cookie_{Cookie: c}
	case *networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp:
		hp.PolicySpecifier = &route.RouteAction_HashPolicy_ConnectionProperties_{ConnectionProperties: &route.RouteAction_HashPolicy_ConnectionProperties{SourceIp: true}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		hp.PolicySpecifier = &route.RouteAction_HashPolicy_QueryParameter_{QueryParameter: &route.RouteAction_HashPolicy_QueryParameter{Name: k.HttpQueryParameterName}}
	default:
		return nil
	}
	return []*route.RouteAction_HashPolicy{hp}
}

// applyEnvoyPolicy sets a traffic policy (already merged for the port and
// subset) on an Envoy cluster of port p.
func applyEnvoyPolicy(c *cluster.Cluster, host string, p model.Port, tp *networking.TrafficPolicy) {
	if tp == nil {
		return
	}
	lb := tp.GetLoadBalancer()
	if ch := lb.GetConsistentHash(); ch != nil {
		if m := ch.GetMaglev(); m != nil {
			c.LbPolicy = cluster.Cluster_MAGLEV
			if m.GetTableSize() > 0 {
				c.LbConfig = &cluster.Cluster_MaglevLbConfig_{MaglevLbConfig: &cluster.Cluster_MaglevLbConfig{TableSize: wrapperspb.UInt64(m.GetTableSize())}}
			}
		} else {
			c.LbPolicy = cluster.Cluster_RING_HASH
			rh := &cluster.Cluster_RingHashLbConfig{}
			if n := ringSize(ch); n > 0 {
				rh.MinimumRingSize = wrapperspb.UInt64(n)
			}
			c.LbConfig = &cluster.Cluster_RingHashLbConfig_{RingHashLbConfig: rh}
		}
	} else {
		switch lb.GetSimple() {
		case networking.LoadBalancerSettings_LEAST_REQUEST:
			c.LbPolicy = cluster.Cluster_LEAST_REQUEST
		case networking.LoadBalancerSettings_RANDOM:
			c.LbPolicy = cluster.Cluster_RANDOM
		}
	}
	applyEnvoyPool(c, p, tp.GetConnectionPool())
	if od := tp.GetOutlierDetection(); od != nil {
		c.OutlierDetection = envoyOutlier(od)
		// Istio: minHealthPercent is the panic threshold (0 turns panic
		// routing off).
		c.CommonLbConfig = &cluster.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: float64(od.GetMinHealthPercent())}}
	}
	if ts := clusterTLS(tp.GetTls(), host, p); ts != nil {
		c.TransportSocket = ts
	}
}

// ringSize is the minimum ring size of a consistent hash (the ringHash
// block, or the deprecated minimumRingSize).
func ringSize(ch *networking.LoadBalancerSettings_ConsistentHashLB) uint64 {
	if n := ch.GetRingHash().GetMinimumRingSize(); n > 0 {
		return n
	}
	//lint:ignore SA1019 deprecated in Istio, still accepted by it
	return ch.GetMinimumRingSize()
}

// applyEnvoyPool translates a connection pool: circuit breakers (Istio
// raises Envoy's 1024 defaults to unlimited for what the pool does not
// set), connect timeout, TCP keepalive, and HTTP protocol options.
func applyEnvoyPool(c *cluster.Cluster, p model.Port, cp *networking.ConnectionPoolSettings) {
	if cp == nil {
		return
	}
	t, h := cp.GetTcp(), cp.GetHttp()
	limit := func(v int32) *wrapperspb.UInt32Value {
		if v > 0 {
			return wrapperspb.UInt32(uint32(v))
		}
		return wrapperspb.UInt32(math.MaxUint32)
	}
	c.CircuitBreakers = &cluster.CircuitBreakers{Thresholds: []*cluster.CircuitBreakers_Thresholds{{
		Priority:           core.RoutingPriority_DEFAULT,
		MaxConnections:     limit(t.GetMaxConnections()),
		MaxPendingRequests: limit(h.GetHttp1MaxPendingRequests()),
		MaxRequests:        limit(h.GetHttp2MaxRequests()),
		MaxRetries:         limit(h.GetMaxRetries()),
		TrackRemaining:     true,
	}}}
	if ct := t.GetConnectTimeout(); ct != nil {
		c.ConnectTimeout = durationpb.New(ct.AsDuration())
	}
	if ka := t.GetTcpKeepalive(); ka != nil {
		k := &core.TcpKeepalive{}
		if ka.GetProbes() > 0 {
			k.KeepaliveProbes = wrapperspb.UInt32(ka.GetProbes())
		}
		if d := ka.GetTime(); d != nil {
			k.KeepaliveTime = wrapperspb.UInt32(uint32(d.AsDuration().Seconds()))
		}
		if d := ka.GetInterval(); d != nil {
			k.KeepaliveInterval = wrapperspb.UInt32(uint32(d.AsDuration().Seconds()))
		}
		c.UpstreamConnectionOptions = &cluster.UpstreamConnectionOptions{TcpKeepalive: k}
	}
	if !p.Protocol.IsHTTP() {
		return
	}
	common := &core.HttpProtocolOptions{}
	set := false
	if d := h.GetIdleTimeout(); d != nil {
		common.IdleTimeout, set = durationpb.New(d.AsDuration()), true
	}
	if n := h.GetMaxRequestsPerConnection(); n > 0 {
		common.MaxRequestsPerConnection, set = wrapperspb.UInt32(uint32(n)), true
	}
	if d := t.GetMaxConnectionDuration(); d != nil {
		common.MaxConnectionDuration, set = durationpb.New(d.AsDuration()), true
	}
	h2 := p.Protocol == model.ProtocolHTTP2 || p.Protocol == model.ProtocolGRPC
	streams := h.GetMaxConcurrentStreams()
	if !set && (!h2 || streams == 0) {
		return
	}
	opts := &upstreamhttp.HttpProtocolOptions{
		UpstreamProtocolOptions: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &core.Http1ProtocolOptions{}},
		}},
	}
	if h2 {
		h2opts := &core.Http2ProtocolOptions{}
		if streams > 0 {
			h2opts.MaxConcurrentStreams = wrapperspb.UInt32(uint32(streams))
		}
		opts.UpstreamProtocolOptions = &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: h2opts},
		}}
	}
	if set {
		opts.CommonHttpProtocolOptions = common
	}
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpProtocolOptionsKey: mustAny(opts)}
}

// envoyOutlier is Istio's outlier detection for Envoy: consecutive 5xx,
// gateway and local-origin errors; success-rate ejection off.
func envoyOutlier(od *networking.OutlierDetection) *cluster.OutlierDetection {
	out := &cluster.OutlierDetection{EnforcingSuccessRate: wrapperspb.UInt32(0)}
	enforce := func(v uint32) *wrapperspb.UInt32Value {
		if v > 0 {
			return wrapperspb.UInt32(100)
		}
		return wrapperspb.UInt32(0)
	}
	if e := od.GetConsecutive_5XxErrors(); e != nil {
		out.Consecutive_5Xx, out.EnforcingConsecutive_5Xx = wrapperspb.UInt32(e.GetValue()), enforce(e.GetValue())
	} else if n := deprecatedConsecutiveErrors(od); n > 0 {
		out.Consecutive_5Xx, out.EnforcingConsecutive_5Xx = wrapperspb.UInt32(uint32(n)), enforce(uint32(n))
	}
	if e := od.GetConsecutiveGatewayErrors(); e != nil {
		out.ConsecutiveGatewayFailure, out.EnforcingConsecutiveGatewayFailure = wrapperspb.UInt32(e.GetValue()), enforce(e.GetValue())
	}
	if od.GetSplitExternalLocalOriginErrors() {
		out.SplitExternalLocalOriginErrors = true
		if e := od.GetConsecutiveLocalOriginFailures(); e != nil {
			out.ConsecutiveLocalOriginFailure, out.EnforcingConsecutiveLocalOriginFailure = wrapperspb.UInt32(e.GetValue()), enforce(e.GetValue())
		}
	}
	setEjection(out, od)
	return out
}

// envoyDefaultConsecutive5xx is Envoy's (and so Istio's) consecutive_5xx
// when an outlier detection does not set it.
const envoyDefaultConsecutive5xx = 5

// grpcFailureThreshold: grpc-go ejects an endpoint whose failure
// percentage is above it.
const grpcFailureThreshold = 99

// grpcOutlier is outlier detection in the form grpc-go implements (gRFC
// A50: success-rate and failure-percentage ejection; it ignores the
// consecutive-error counters). Istio's "eject after N consecutive errors"
// becomes failure-percentage ejection of a backend that failed more than
// 99 % of its calls in an interval, given at least N calls (grpc-go
// ejects above the threshold, so 99 means "all of them" for up to 100
// calls; request volume N, minimum hosts 1); success-rate ejection stays
// off, as Istio sets it. consecutive5xxErrors: 0 turns ejection off.
func grpcOutlier(od *networking.OutlierDetection) *cluster.OutlierDetection {
	out := &cluster.OutlierDetection{EnforcingSuccessRate: wrapperspb.UInt32(0)}
	n := uint32(envoyDefaultConsecutive5xx)
	if e := od.GetConsecutive_5XxErrors(); e != nil {
		n = e.GetValue()
	} else if c := deprecatedConsecutiveErrors(od); c > 0 {
		n = uint32(c)
	}
	if n > 0 {
		out.EnforcingFailurePercentage = wrapperspb.UInt32(100)
		out.FailurePercentageThreshold = wrapperspb.UInt32(grpcFailureThreshold)
		out.FailurePercentageRequestVolume = wrapperspb.UInt32(n)
		out.FailurePercentageMinimumHosts = wrapperspb.UInt32(1)
	}
	setEjection(out, od)
	return out
}

// setEjection sets the ejection timing of od on out: the interval, the
// base ejection time and the max ejection percent, those od sets.
func setEjection(out *cluster.OutlierDetection, od *networking.OutlierDetection) {
	if d := od.GetInterval(); d != nil {
		out.Interval = durationpb.New(d.AsDuration())
	}
	if d := od.GetBaseEjectionTime(); d != nil {
		out.BaseEjectionTime = durationpb.New(d.AsDuration())
	}
	if p := od.GetMaxEjectionPercent(); p > 0 {
		out.MaxEjectionPercent = wrapperspb.UInt32(uint32(p))
	}
}

// deprecatedConsecutiveErrors is Istio's deprecated consecutiveErrors
// (5xx only), still accepted by Istio.
func deprecatedConsecutiveErrors(od *networking.OutlierDetection) int32 {
	//lint:ignore SA1019 deprecated in Istio, still accepted by it
	return od.GetConsecutiveErrors()
}

// buildSubsets adds the clusters of a DestinationRule's subsets on port p
// (docs/architecture.md §3.6): outbound|<port>|<subset>|<host> for Envoy
// on every port and for gRPC on HTTP ports, each with its own CLA of the
// endpoints carrying every label of the subset (incremental, like the
// port's: prev states in old.subs), and the subset's merged policy. A DNS
// service's subset clusters carry their endpoints inline, as its port's
// cluster does.
func (t *Translator) buildSubsets(svc *model.Service, p model.Port, dr *networking.DestinationRule, old *svcState,
	add func(Kind, types.Resource), subs *map[string]*claState, notes *[]TrafficNote) error {
	for _, sub := range dr.GetSubsets() {
		sname := SubsetClusterName(svc.Hostname, p.Number, sub.GetName())
		var prev *claState
		if old != nil {
			prev = old.subs[sname]
		}
		ss, err := t.meta.rebuildCLA(sname, subsetEndpoints(svc, sub.GetLabels()), p, prev)
		if err != nil {
			return err
		}
		if *subs == nil {
			*subs = map[string]*claState{}
		}
		(*subs)[sname] = ss
		sp := mergedPolicy(dr.GetTrafficPolicy(), sub.GetTrafficPolicy(), p.Number)
		var inline *endpoint.ClusterLoadAssignment
		if svc.Resolution == model.ResolutionDNS {
			inline = ss.res.message()
		}
		esc := envoyCluster(sname, svc, p, inline)
		applyEnvoyPolicy(esc, svc.Hostname, p, sp)
		to := distributeOf(sp)
		var dist *endpoint.ClusterLoadAssignment
		if to != nil && inline == nil {
			d, ok, dn := distributed(sname, ss.res.message(), to)
			if ok {
				dist = d
			}
			*notes = append(*notes, distributeNotes(dn, p.Protocol.IsHTTP())...)
		}
		switch {
		case inline != nil:
		case dist != nil:
			add(KindOf(ClassEnvoy, EndpointType), dist)
			localityWeighted(esc)
		case len(failoverOf(sp)) > 0:
			add(KindOf(ClassEnvoy, EndpointType), &failoverCLA{claResource: ss.res, failover: failoverOf(sp)})
		default:
			add(KindOf(ClassEnvoy, EndpointType), ss.res)
		}
		add(KindOf(ClassEnvoy, ClusterType), esc)
		if !p.Protocol.IsHTTP() {
			continue
		}
		sc, useEDS := grpcCluster(sname, svc, inline)
		applyPolicy(sc, sp)
		add(KindOf(ClassGRPC, ClusterType), sc)
		if useEDS && inline != nil {
			add(KindOf(ClassGRPC, EndpointType), ss.res) // a DNS subset without endpoints
		}
		for _, n := range grpcOmitted(sp) {
			*notes = append(*notes, grpcNote(sname+": "+n))
		}
	}
	return nil
}
