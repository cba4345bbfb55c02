package translate

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	cors "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	fault "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/model"
)

// Envoy traffic management (docs/architecture.md §3.6): the VirtualService
// in force for a host becomes the routes of the host's virtual host in the
// per-port route configuration <port> (HTTP) or the tcp_proxy of the
// port's outbound listener (TCP), translated as Istio's sidecar
// translation does (pilot/pkg/networking/core/route). Each service's part
// of a port is built and validated with the service (envoyPort), so a
// rule change rebuilds only the ports of the hosts it names.

// envoyPort is what one service port contributes to the Envoy listener
// and route configuration of its port number.
type envoyPort struct {
	// vhost is the virtual host of an HTTP port.
	vhost *route.VirtualHost
	// fault and cors: routes of vhost use that HTTP filter, which the
	// port's listener must then carry.
	fault, cors bool
	// tcp is the tcp_proxy of a TCP port.
	tcp *tcpproxy.TcpProxy
	// notes: destinations and routes left out because they name no
	// cluster (destChecker).
	notes []TrafficNote
}

func (e *envoyPort) equal(o *envoyPort) bool {
	if e == nil || o == nil {
		return e == o
	}
	return e.fault == o.fault && e.cors == o.cors && proto.Equal(e.vhost, o.vhost) && proto.Equal(e.tcp, o.tcp)
}

// envoyPortOf builds a service port's Envoy part from the host's traffic
// config: the virtual host (default route, or the VirtualService's http
// routes for the port; the default route carries the port's consistent
// hash) or the tcp_proxy (the default cluster, or the first tcp route
// for the port). Short destination hosts resolve in the VirtualService's
// namespace.
func (b *build) envoyPortOf(svc *model.Service, p model.Port, hc hostConfig) *envoyPort {
	vs := hc.virtualService()
	dr := hc.destinationRule()
	chk := &destChecker{b: b, host: svc.Hostname, port: p.Number, client: ClassEnvoy}
	if !p.Protocol.IsHTTP() {
		name := ClusterName(svc.Hostname, p.Number)
		tp := &tcpproxy.TcpProxy{StatPrefix: name, ClusterSpecifier: &tcpproxy.TcpProxy_Cluster{Cluster: name}}
		if r := tcpRouteFor(vs, p.Number, b.client); r != nil {
			b.setTCPClusters(tp, r, svc.Hostname, p.Number, hc.namespace(), chk)
		}
		return &envoyPort{tcp: tp, notes: chk.notes}
	}
	hash := envoyHashPolicy(portPolicy(dr.GetTrafficPolicy(), p.Number))
	vh := virtualHost(svc.Hostname, p.Number)
	vh.Routes[0].GetRoute().HashPolicy = hash
	vh.Routes[0].GetRoute().RetryPolicy = envoyRetry(nil, len(hash) > 0)
	out := &envoyPort{vhost: vh}
	if vs != nil {
		routes, dropped := b.envoyRoutes(vs, svc.Hostname, p.Number, hc.namespace(), chk)
		vh.Routes = withDefault(routes, dropped, vh.Routes[0])
		out.notes = chk.notes
	}
	for _, r := range vh.Routes {
		pf := r.GetTypedPerFilterConfig()
		out.fault = out.fault || pf[wellknown.Fault] != nil
		out.cors = out.cors || pf[wellknown.CORS] != nil
	}
	return out
}

// tcpRouteFor is the first tcp route of vs that applies to port on every
// client: one of its matches names no port or this port and has no
// condition meshfed cannot evaluate for a shared listener (destination
// subnets, gateways without mesh; source labels or namespace unless
// client, the proxy a scoped view is built for, meets them).
func tcpRouteFor(vs *networking.VirtualService, port uint32, client *Proxy) *networking.TCPRoute {
	for _, r := range vs.GetTcp() {
		if len(r.GetMatch()) == 0 {
			return r
		}
		for _, m := range r.GetMatch() {
			if m.GetPort() != 0 && m.GetPort() != port {
				continue
			}
			if len(m.GetDestinationSubnets()) > 0 || !client.meets(m.GetSourceLabels(), m.GetSourceNamespace()) ||
				(len(m.GetGateways()) > 0 && !slices.Contains(m.GetGateways(), meshGateway)) {
				continue
			}
			return r
		}
	}
	return nil
}

// meshGateway is the gateway name of every sidecar (Istio's "mesh").
const meshGateway = "mesh"

// setTCPClusters points tp at the destinations of a tcp route that name
// a cluster (chk); with none, tp keeps its default cluster.
func (b *build) setTCPClusters(tp *tcpproxy.TcpProxy, r *networking.TCPRoute, host string, port uint32, ns string, chk *destChecker) {
	all := r.GetRoute()
	ds := validDests(all, ns, "tcp", chk)
	if dropRoute(all, ds, "tcp", chk) {
		return
	}
	if len(all) == 1 {
		tp.ClusterSpecifier = &tcpproxy.TcpProxy_Cluster{Cluster: destCluster(resolveDest(ds[0].GetDestination(), ns), host, port, b.singlePort)}
		return
	}
	wc := &tcpproxy.TcpProxy_WeightedCluster{}
	for _, d := range ds {
		if d.GetWeight() == 0 {
			continue // Istio leaves out 0-weight destinations of a split
		}
		wc.Clusters = append(wc.Clusters, &tcpproxy.TcpProxy_WeightedCluster_ClusterWeight{
			Name:   destCluster(resolveDest(d.GetDestination(), ns), host, port, b.singlePort),
			Weight: uint32(d.GetWeight()),
		})
	}
	tp.ClusterSpecifier = &tcpproxy.TcpProxy_WeightedClusters{WeightedClusters: wc}
}

// meshMatch reports whether an http match applies to the sidecars the
// routes are built for: its gateways (if any) include mesh, and its
// source labels and namespace, if any, are met by client, the proxy of a
// scoped view (docs/architecture.md §3.7). Routes shared by every Envoy
// client (client nil) leave such a match out rather than apply it to all.
func meshMatch(m *networking.HTTPMatchRequest, client *Proxy) bool {
	if m == nil {
		return true
	}
	if len(m.GetGateways()) > 0 && !slices.Contains(m.GetGateways(), meshGateway) {
		return false
	}
	return client.meets(m.GetSourceLabels(), m.GetSourceNamespace())
}

// meets reports whether the proxy p meets a match's sourceLabels and
// sourceNamespace; a nil p (routes shared by all) meets only none.
func (p *Proxy) meets(labels map[string]string, ns string) bool {
	if len(labels) == 0 && ns == "" {
		return true
	}
	return p != nil && (ns == "" || ns == p.Namespace) && model.Selects(labels, p.Labels)
}

// envoyRoutes translates the http routes of vs that apply to port, in
// order, stopping after a catch-all as Istio does. Routes whose
// destinations all name no cluster are left out (dropped reports any).
func (b *build) envoyRoutes(vs *networking.VirtualService, host string, port uint32, ns string, chk *destChecker) (out []*route.Route, dropped bool) {
	for i, hr := range vs.GetHttp() {
		matches := hr.GetMatch()
		if len(matches) == 0 {
			matches = []*networking.HTTPMatchRequest{nil}
		}
		for _, m := range matches {
			if m.GetPort() != 0 && m.GetPort() != port || !meshMatch(m, b.client) {
				continue
			}
			r := b.envoyRoute(hr, m, i, host, port, ns, chk)
			if r == nil {
				dropped = true
				continue
			}
			out = append(out, r)
			if catchAll(r) {
				return out, dropped
			}
		}
	}
	return out, dropped
}

// withDefault is the routes of a virtual host: routes, or def when there
// are none; when a route was left out (dropped) and none of routes
// matches everything, def is appended so what the dropped route matched
// goes to the host rather than nowhere.
func withDefault(routes []*route.Route, dropped bool, def *route.Route) []*route.Route {
	if len(routes) == 0 {
		return []*route.Route{def}
	}
	if dropped && !slices.ContainsFunc(routes, catchAll) {
		routes = append(routes, def)
	}
	return routes
}

// weightedDest is a destination of an http or tcp route.
type weightedDest interface {
	GetDestination() *networking.Destination
	GetWeight() int32
}

// anyWeight reports whether one of ds has a positive weight.
func anyWeight[D weightedDest](ds []D) bool {
	return slices.ContainsFunc(ds, func(d D) bool { return d.GetWeight() > 0 })
}

// validDests is the destinations of an http or tcp route that name a
// cluster (chk); the others are noted.
func validDests[D weightedDest](ds []D, ns, route string, chk *destChecker) []D {
	out := ds
	for i, d := range ds {
		if chk.ok(resolveDest(d.GetDestination(), ns), route) {
			if len(out) < len(ds) {
				out = append(out, d)
			}
			continue
		}
		if len(out) == len(ds) {
			out = slices.Clone(ds[:i])
		}
	}
	return out
}

func catchAll(r *route.Route) bool {
	m := r.GetMatch()
	return m.GetPrefix() == "/" && len(m.GetHeaders()) == 0 && len(m.GetQueryParameters()) == 0 && m.GetCaseSensitive() == nil
}

// envoyRoute translates one match of an http route; nil when the route
// has destinations and none names a cluster.
func (b *build) envoyRoute(hr *networking.HTTPRoute, m *networking.HTTPMatchRequest, i int, host string, port uint32, ns string, chk *destChecker) *route.Route {
	name := hr.GetName()
	if name == "" {
		name = "http-" + strconv.Itoa(i)
	}
	if m.GetName() != "" {
		name += "." + m.GetName()
	}
	r := &route.Route{Name: name, Match: envoyRouteMatch(m)}
	ops := headerOps(hr.GetHeaders())
	r.RequestHeadersToAdd, r.RequestHeadersToRemove = ops.reqAdd, ops.reqRemove
	r.ResponseHeadersToAdd, r.ResponseHeadersToRemove = ops.respAdd, ops.respRemove
	switch {
	case hr.GetRedirect() != nil:
		r.Action = redirectAction(hr.GetRedirect(), port)
	case hr.GetDirectResponse() != nil:
		dr := &route.DirectResponseAction{Status: hr.GetDirectResponse().GetStatus()}
		switch body := hr.GetDirectResponse().GetBody().GetSpecifier().(type) {
		case *networking.HTTPBody_String_:
			dr.Body = &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: body.String_}}
		case *networking.HTTPBody_Bytes:
			dr.Body = &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: body.Bytes}}
		}
		r.Action = &route.Route_DirectResponse{DirectResponse: dr}
	default:
		a := b.envoyAction(hr, r, name, ops.authority, host, port, ns, chk)
		if a == nil {
			return nil
		}
		r.Action = &route.Route_Route{Route: a}
	}
	if f := hr.GetFault(); f != nil {
		r.TypedPerFilterConfig = map[string]*anypb.Any{wellknown.Fault: mustAny(httpFault(f))}
	}
	if c := hr.GetCorsPolicy(); c != nil {
		if r.TypedPerFilterConfig == nil {
			r.TypedPerFilterConfig = map[string]*anypb.Any{}
		}
		r.TypedPerFilterConfig[wellknown.CORS] = mustAny(corsPolicy(c))
	}
	return r
}

// envoyAction is the route action of an http route with destinations:
// clusters (weighted), timeout, rewrite, mirrors, retries, and the hash
// policies of the destinations' DestinationRules. Destinations and
// mirrors that name no cluster are left out (chk); nil when no
// destination is left.
func (b *build) envoyAction(hr *networking.HTTPRoute, r *route.Route, name, authority, host string, port uint32, ns string, chk *destChecker) *route.RouteAction {
	all := hr.GetRoute()
	dests := validDests(all, ns, name, chk)
	if len(all) > 0 && dropRoute(all, dests, name, chk) {
		return nil
	}
	a := &route.RouteAction{Timeout: durationpb.New(0)}
	if to := hr.GetTimeout(); to != nil {
		a.Timeout = durationpb.New(to.AsDuration())
	}
	if rw := hr.GetRewrite(); rw != nil {
		if rr := rw.GetUriRegexRewrite(); rr != nil {
			a.RegexRewrite = &matcher.RegexMatchAndSubstitute{Pattern: &matcher.RegexMatcher{Regex: rr.GetMatch()}, Substitution: rr.GetRewrite()}
		} else if rw.GetUri() != "" {
			a.PrefixRewrite = rw.GetUri()
		}
		if rw.GetAuthority() != "" {
			authority = rw.GetAuthority()
		}
	}
	if authority != "" {
		a.HostRewriteSpecifier = &route.RouteAction_HostRewriteLiteral{HostRewriteLiteral: authority}
	}
	eachMirror(hr, func(d *networking.Destination, p *typev3.FractionalPercent, ok bool) {
		if !ok {
			return // an explicit 0% mirrors nothing
		}
		if !chk.ok(resolveDest(d, ns), name+" mirror") {
			return
		}
		a.RequestMirrorPolicies = append(a.RequestMirrorPolicies, &route.RouteAction_RequestMirrorPolicy{
			Cluster:         destCluster(resolveDest(d, ns), host, port, b.singlePort),
			RuntimeFraction: &core.RuntimeFractionalPercent{DefaultValue: p},
		})
	})
	for _, d := range dests {
		if len(all) == 1 || d.GetWeight() > 0 {
			a.HashPolicy = appendHash(a.HashPolicy, b.destHash(resolveDest(d.GetDestination(), ns), host, port, false))
		}
	}
	if len(all) == 1 {
		d := dests[0]
		a.ClusterSpecifier = &route.RouteAction_Cluster{Cluster: destCluster(resolveDest(d.GetDestination(), ns), host, port, b.singlePort)}
		ops := headerOps(d.GetHeaders())
		r.RequestHeadersToAdd = append(r.RequestHeadersToAdd, ops.reqAdd...)
		r.RequestHeadersToRemove = append(r.RequestHeadersToRemove, ops.reqRemove...)
		r.ResponseHeadersToAdd = append(r.ResponseHeadersToAdd, ops.respAdd...)
		r.ResponseHeadersToRemove = append(r.ResponseHeadersToRemove, ops.respRemove...)
		if ops.authority != "" && a.HostRewriteSpecifier == nil {
			a.HostRewriteSpecifier = &route.RouteAction_HostRewriteLiteral{HostRewriteLiteral: ops.authority}
		}
	} else {
		wc := &route.WeightedCluster{}
		for _, d := range dests {
			if d.GetWeight() == 0 {
				continue // Istio leaves out 0-weight destinations of a split
			}
			ops := headerOps(d.GetHeaders())
			cw := &route.WeightedCluster_ClusterWeight{
				Name:                    destCluster(resolveDest(d.GetDestination(), ns), host, port, b.singlePort),
				Weight:                  wrapperspb.UInt32(uint32(d.GetWeight())),
				RequestHeadersToAdd:     ops.reqAdd,
				RequestHeadersToRemove:  ops.reqRemove,
				ResponseHeadersToAdd:    ops.respAdd,
				ResponseHeadersToRemove: ops.respRemove,
			}
			if ops.authority != "" {
				cw.HostRewriteSpecifier = &route.WeightedCluster_ClusterWeight_HostRewriteLiteral{HostRewriteLiteral: ops.authority}
			}
			wc.Clusters = append(wc.Clusters, cw)
		}
		a.ClusterSpecifier = &route.RouteAction_WeightedClusters{WeightedClusters: wc}
	}
	a.RetryPolicy = envoyRetry(hr.GetRetries(), len(a.HashPolicy) > 0)
	return a
}

// envoyRouteMatch is routeMatch (path and headers) plus what only Envoy
// matches: headers that must be absent, method, authority, scheme and
// query parameters.
func envoyRouteMatch(m *networking.HTTPMatchRequest) *route.RouteMatch {
	rm := routeMatch(m)
	if m == nil {
		return rm
	}
	for _, k := range slices.Sorted(maps.Keys(m.GetWithoutHeaders())) {
		hm := headerMatcher(k, m.GetWithoutHeaders()[k])
		hm.InvertMatch = true
		if !hm.GetPresentMatch() {
			hm.TreatMissingHeaderAsEmpty = true
		}
		rm.Headers = append(rm.Headers, hm)
	}
	slices.SortStableFunc(rm.Headers, func(a, b *route.HeaderMatcher) int { return strings.Compare(a.GetName(), b.GetName()) })
	for _, pseudo := range []struct {
		name string
		sm   *networking.StringMatch
	}{{":method", m.GetMethod()}, {":authority", m.GetAuthority()}, {":scheme", m.GetScheme()}} {
		if pseudo.sm != nil {
			rm.Headers = append(rm.Headers, headerMatcher(pseudo.name, pseudo.sm))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m.GetQueryParams())) {
		qm := &route.QueryParameterMatcher{Name: k}
		if sm := stringMatcher(m.GetQueryParams()[k]); sm != nil {
			qm.QueryParameterMatchSpecifier = &route.QueryParameterMatcher_StringMatch{StringMatch: sm}
		} else {
			qm.QueryParameterMatchSpecifier = &route.QueryParameterMatcher_PresentMatch{PresentMatch: true}
		}
		rm.QueryParameters = append(rm.QueryParameters, qm)
	}
	return rm
}

// stringMatcher translates an Istio string match (nil for "present").
func stringMatcher(s *networking.StringMatch) *matcher.StringMatcher {
	switch v := s.GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: v.Exact}}
	case *networking.StringMatch_Prefix:
		return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: v.Prefix}}
	case *networking.StringMatch_Regex:
		return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: v.Regex}}}
	}
	return nil
}

func headerMatcher(name string, s *networking.StringMatch) *route.HeaderMatcher {
	hm := &route.HeaderMatcher{Name: name}
	if sm := stringMatcher(s); sm != nil {
		hm.HeaderMatchSpecifier = &route.HeaderMatcher_StringMatch{StringMatch: sm}
	} else {
		hm.HeaderMatchSpecifier = &route.HeaderMatcher_PresentMatch{PresentMatch: true}
	}
	return hm
}

// headerOperations are an Istio Headers block in Envoy's terms; authority
// is a :authority or host value to rewrite to (never set as a header).
type headerOperations struct {
	reqAdd, respAdd       []*core.HeaderValueOption
	reqRemove, respRemove []string
	authority             string
}

func headerOps(h *networking.Headers) headerOperations {
	var out headerOperations
	var setAuth, addAuth string
	out.reqAdd, setAuth = headerValues(h.GetRequest().GetSet(), false)
	add, addAuth := headerValues(h.GetRequest().GetAdd(), true)
	out.reqAdd = append(out.reqAdd, add...)
	out.respAdd, _ = headerValues(h.GetResponse().GetSet(), false)
	add, _ = headerValues(h.GetResponse().GetAdd(), true)
	out.respAdd = append(out.respAdd, add...)
	out.authority = cmpOr(setAuth, addAuth)
	out.reqRemove = dropInternal(h.GetRequest().GetRemove())
	out.respRemove = dropInternal(h.GetResponse().GetRemove())
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// internalHeader: pseudo-headers and host, which Envoy does not let a
// route set or remove.
func internalHeader(k string) bool { return strings.HasPrefix(k, ":") || strings.EqualFold(k, "host") }

func dropInternal(keys []string) []string {
	var out []string
	for _, k := range keys {
		if !internalHeader(k) {
			out = append(out, k)
		}
	}
	return out
}

// headerValues: set overwrites, add appends; sorted by name.
func headerValues(m map[string]string, appendValue bool) ([]*core.HeaderValueOption, string) {
	var out []*core.HeaderValueOption
	var authority string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if strings.EqualFold(k, ":authority") || strings.EqualFold(k, "host") {
			authority = m[k]
		}
		if internalHeader(k) {
			continue
		}
		action := core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		if appendValue {
			action = core.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD
		}
		out = append(out, &core.HeaderValueOption{Header: &core.HeaderValue{Key: k, Value: m[k]}, AppendAction: action})
	}
	return out, authority
}

// redirectAction is Istio's ApplyRedirect for sidecars.
func redirectAction(rd *networking.HTTPRedirect, port uint32) *route.Route_Redirect {
	ra := &route.RedirectAction{HostRedirect: rd.GetAuthority()}
	if rd.GetUri() != "" {
		ra.PathRewriteSpecifier = &route.RedirectAction_PathRedirect{PathRedirect: rd.GetUri()}
	}
	if rd.GetScheme() != "" {
		ra.SchemeRewriteSpecifier = &route.RedirectAction_SchemeRedirect{SchemeRedirect: rd.GetScheme()}
	}
	if rd.GetRedirectPort() != nil {
		switch p := rd.GetRedirectPort().(type) {
		case *networking.HTTPRedirect_DerivePort:
			if p.DerivePort == networking.HTTPRedirect_FROM_REQUEST_PORT {
				ra.PortRedirect = port
			}
		case *networking.HTTPRedirect_Port:
			ra.PortRedirect = p.Port
		}
		scheme := cmpOr(rd.GetScheme(), "http")
		if ra.PortRedirect == 80 && scheme == "http" || ra.PortRedirect == 443 && scheme == "https" {
			ra.PortRedirect = 0
		}
	}
	switch rd.GetRedirectCode() {
	case 302:
		ra.ResponseCode = route.RedirectAction_FOUND
	case 303:
		ra.ResponseCode = route.RedirectAction_SEE_OTHER
	case 307:
		ra.ResponseCode = route.RedirectAction_TEMPORARY_REDIRECT
	case 308:
		ra.ResponseCode = route.RedirectAction_PERMANENT_REDIRECT
	default: // 0 and 301 (validated)
		ra.ResponseCode = route.RedirectAction_MOVED_PERMANENTLY
	}
	return &route.Route_Redirect{Redirect: ra}
}

// corsPolicy is Istio's TranslateCORSPolicy.
func corsPolicy(in *networking.CorsPolicy) *cors.CorsPolicy {
	out := &cors.CorsPolicy{
		AllowCredentials: in.GetAllowCredentials(),
		AllowHeaders:     strings.Join(in.GetAllowHeaders(), ","),
		AllowMethods:     strings.Join(in.GetAllowMethods(), ","),
		ExposeHeaders:    strings.Join(in.GetExposeHeaders(), ","),
		FilterEnabled: &core.RuntimeFractionalPercent{DefaultValue: &typev3.FractionalPercent{
			Numerator: 100, Denominator: typev3.FractionalPercent_HUNDRED,
		}},
		ForwardNotMatchingPreflights: wrapperspb.Bool(in.GetUnmatchedPreflights() != networking.CorsPolicy_IGNORE),
	}
	for _, o := range in.GetAllowOrigins() {
		if sm := stringMatcher(o); sm != nil {
			out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, sm)
		}
	}
	if ma := in.GetMaxAge(); ma != nil {
		out.MaxAge = strconv.FormatInt(ma.GetSeconds(), 10)
	}
	return out
}

// corsFilter is the CORS HTTP filter; routes carry their policies.
func corsFilter() *hcm.HttpFilter {
	return &hcm.HttpFilter{Name: wellknown.CORS, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: mustAny(&cors.Cors{})}}
}

// envoyHTTPListenerFor is envoyHTTPListener with the CORS and fault
// filters in front of the router when a route on the port uses them (the
// order Istio uses: cors, fault, router).
func envoyHTTPListenerFor(port uint32, withCORS, withFault bool) *listener.Listener {
	l := envoyHTTPListener(port)
	if !withCORS && !withFault {
		return l
	}
	var filters []*hcm.HttpFilter
	if withCORS {
		filters = append(filters, corsFilter())
	}
	if withFault {
		filters = append(filters, &hcm.HttpFilter{Name: wellknown.Fault, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: mustAny(&fault.HTTPFault{})}})
	}
	m := &hcm.HttpConnectionManager{}
	f := l.GetFilterChains()[0].GetFilters()[0]
	if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
		panic("xds: own listener does not unmarshal: " + err.Error())
	}
	m.HttpFilters = append(filters, m.HttpFilters...)
	f.ConfigType = &listener.Filter_TypedConfig{TypedConfig: mustAny(m)}
	return l
}

// envoyTCPListenerFor is the outbound listener of a TCP port with the
// given tcp_proxy.
func envoyTCPListenerFor(port uint32, tp *tcpproxy.TcpProxy) *listener.Listener {
	return &listener.Listener{
		Name:             EnvoyListenerName(port),
		Address:          SocketAddress("0.0.0.0", port),
		TrafficDirection: core.TrafficDirection_OUTBOUND,
		FilterChains: []*listener.FilterChain{{Filters: []*listener.Filter{{
			Name:       wellknown.TCPProxy,
			ConfigType: &listener.Filter_TypedConfig{TypedConfig: mustAny(tp)},
		}}}},
	}
}

// fqdn resolves a host named by a rule in namespace ns (short names, as
// Istio does; model.ConfigHost).
func fqdn(h, ns string) string { return model.ConfigHost(h, ns) }

// resolveDest returns d with its host resolved by fqdn (d itself when the
// host is complete).
func resolveDest(d *networking.Destination, ns string) *networking.Destination {
	if h := fqdn(d.GetHost(), ns); h != d.GetHost() {
		return &networking.Destination{Host: h, Subset: d.GetSubset(), Port: d.GetPort()}
	}
	return d
}

// destHash is the hash policy of a destination: the consistent hash of
// its host's DestinationRule, merged for its subset and port (Istio's
// hashForVirtualService). grpc: in the form grpc-go reads (header only).
func (b *build) destHash(d *networking.Destination, host string, port uint32, grpc bool) []*route.RouteAction_HashPolicy {
	dr := b.destRule(d.GetHost()).destinationRule()
	if dr == nil {
		return nil
	}
	var sub *networking.TrafficPolicy
	for _, s := range dr.GetSubsets() {
		if s.GetName() == d.GetSubset() {
			sub = s.GetTrafficPolicy()
			break
		}
	}
	tp := mergedPolicy(dr.GetTrafficPolicy(), sub, destPort(d, host, port, b.singlePort))
	if grpc {
		return hashPolicy(tp)
	}
	return envoyHashPolicy(tp)
}

// grpcHashOf is destHash for the gRPC routes of host's port.
func (b *build) grpcHashOf(host string, port uint32) func(*networking.Destination) []*route.RouteAction_HashPolicy {
	return func(d *networking.Destination) []*route.RouteAction_HashPolicy {
		return b.destHash(d, host, port, true)
	}
}

// appendHash appends the policies of add that hp does not hold yet.
func appendHash(hp, add []*route.RouteAction_HashPolicy) []*route.RouteAction_HashPolicy {
	for _, a := range add {
		if !slices.ContainsFunc(hp, func(h *route.RouteAction_HashPolicy) bool { return proto.Equal(h, a) }) {
			hp = append(hp, a)
		}
	}
	return hp
}

// destRules lists what the routes of the host's VirtualService need of
// each other host they name (route, mirror and tcp destinations): its
// DestinationRule its clusters are built with (destRule: the consistent
// hash and subsets) and its
// ports (the single-port default, whether the cluster exists), so a
// change of either rebuilds the host (Translate).
func (b *build) destRules(host string, hc hostConfig) map[string]destDep {
	vs := hc.virtualService()
	if vs == nil {
		return nil
	}
	var out map[string]destDep
	add := func(d *networking.Destination) {
		h := fqdn(d.GetHost(), hc.namespace())
		if h == host {
			return
		}
		if _, ok := out[h]; ok {
			return
		}
		if out == nil {
			out = map[string]destDep{}
		}
		out[h] = destDep{dr: b.destRule(h).dr, ports: b.portsKey(h)}
	}
	for _, hr := range vs.GetHttp() {
		for _, d := range hr.GetRoute() {
			add(d.GetDestination())
		}
		if m := hr.GetMirror(); m != nil {
			add(m)
		}
		for _, m := range hr.GetMirrors() {
			add(m.GetDestination())
		}
	}
	for _, r := range vs.GetTcp() {
		for _, d := range r.GetRoute() {
			add(d.GetDestination())
		}
	}
	return out
}
