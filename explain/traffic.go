package explain

// The traffic rules part of an explanation: the VirtualService and
// DestinationRules the translator applies to the host (translate.RulesFor,
// merged as drmerge merges them), read into a route table, subsets and
// the policies in force per port and subset (translate.MergedPolicy).

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/istioconfig/drmerge"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/translate"
)

// Traffic is the traffic rules of one host (Description.Traffic).
type Traffic struct {
	// VirtualServices holds the VirtualService in force for the host (the
	// most specific host wins; at most one).
	VirtualServices []RuleRef `json:"virtualServices"`
	// DestinationRules holds the rules merged for the host, oldest first.
	DestinationRules []RuleRef `json:"destinationRules"`
	// DroppedSubsets and IgnoredPolicies are what the merge left out.
	DroppedSubsets  []drmerge.DroppedSubset `json:"droppedSubsets,omitempty"`
	IgnoredPolicies []string                `json:"ignoredPolicies,omitempty"`
	Subsets         []SubsetInfo            `json:"subsets"`
	RouteTable      []Route                 `json:"routeTable"`
	Policies        []Policy                `json:"policies"`
	Rejected        []istioconfig.Rejection `json:"rejected"`
	NotForClients   []translate.TrafficNote `json:"notForClients"`
}

// RuleRef is an object in force and where it was read from: "file:line",
// or "namespace/name (cluster)" for a Kubernetes source.
type RuleRef struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Source    string `json:"source"`
}

// ID is namespace/name.
func (r RuleRef) ID() string { return r.Namespace + "/" + r.Name }

func ruleRef(o *model.ConfigObject) RuleRef {
	return RuleRef{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Source: o.Source}
}

// SubsetInfo is a DestinationRule subset and how many of the host's
// endpoints its labels select.
type SubsetInfo struct {
	Name      string            `json:"name"`
	Labels    map[string]string `json:"labels"`
	Endpoints int               `json:"endpoints"`
	Rule      string            `json:"rule"` // namespace/name of its DestinationRule
}

// Route is one route of a VirtualService: its matches (ORed; empty: every
// call), where it sends the calls, and its policies.
type Route struct {
	VirtualService string     `json:"virtualService"` // namespace/name
	Protocol       string     `json:"protocol"`       // http (also gRPC), tcp or tls
	Name           string     `json:"name,omitempty"`
	Match          []string   `json:"match"`
	Destinations   []Weighted `json:"destinations"`
	// Action is what an http route does instead of routing: a redirect or
	// a direct response.
	Action string `json:"action,omitempty"`
	// Timeout, Retries, Fault and Mirror are an http route's policies as
	// Envoy is sent them: Retries says "default: ..." for Istio's default
	// policy of a route without retries, "off" for attempts 0.
	Timeout string `json:"timeout,omitempty"`
	Retries string `json:"retries,omitempty"`
	Fault   string `json:"fault,omitempty"`
	Mirror  string `json:"mirror,omitempty"`
}

// Weighted is one destination of a route with its share in percent.
type Weighted struct {
	Host   string `json:"host"`
	Subset string `json:"subset,omitempty"`
	Port   uint32 `json:"port,omitempty"`
	Weight int32  `json:"weight"`
}

func (d Weighted) String() string {
	s := fmt.Sprintf("%d%% %s", d.Weight, d.Host)
	if d.Port != 0 {
		s += fmt.Sprintf(":%d", d.Port)
	}
	if d.Subset != "" {
		s += " subset " + d.Subset
	}
	return s
}

// Policy is one policy in force on some of the host's clusters, summarized.
type Policy struct {
	Rule string `json:"rule"` // namespace/name of the DestinationRule it comes from
	// Scope is the clusters it applies to: "" (every port of the host),
	// "port 8080", "subset v1", "subset v1 port 8080".
	Scope   string `json:"scope,omitempty"`
	Kind    string `json:"kind"` // loadBalancer, outlierDetection, connectionPool, tls
	Summary string `json:"summary"`
}

// traffic picks what applies to svc.
func traffic(in Input, svc *model.Service) Traffic {
	host := svc.Hostname
	t := Traffic{VirtualServices: []RuleRef{}, DestinationRules: []RuleRef{}, Subsets: []SubsetInfo{},
		RouteTable: []Route{}, Policies: []Policy{}, Rejected: []istioconfig.Rejection{}, NotForClients: []translate.TrafficNote{}}
	rules := translate.RulesFor(in.Snapshot.Config, host)
	inForce := map[string]bool{}
	if o := rules.VirtualService; o != nil {
		t.VirtualServices = append(t.VirtualServices, ruleRef(o))
		inForce[o.Key()] = true
		if vs, ok := o.Spec.(*networking.VirtualService); ok {
			t.RouteTable = append(t.RouteTable, routesOf(o.Namespace+"/"+o.Name, vs)...)
		}
	}
	for _, o := range rules.Merge.From {
		t.DestinationRules = append(t.DestinationRules, ruleRef(o))
		inForce[o.Key()] = true
	}
	t.DroppedSubsets, t.IgnoredPolicies = rules.Merge.DroppedSubsets, rules.Merge.IgnoredPolicies
	if dr := rules.Merge.Spec; dr != nil {
		owner := subsetOwners(rules.Merge)
		for _, ss := range dr.GetSubsets() {
			n := 0
			for _, e := range svc.Endpoints {
				if model.Selects(ss.GetLabels(), e.Labels) {
					n++
				}
			}
			t.Subsets = append(t.Subsets, SubsetInfo{Name: ss.GetName(), Labels: nonNilMap(ss.GetLabels()), Endpoints: n, Rule: owner[ss]})
		}
		t.Policies = policies(svc, rules.Merge, owner)
	}
	for _, r := range in.Rules.Rejected {
		if slices.ContainsFunc(r.Hosts, func(h string) bool { return hostMatches(h, host) }) ||
			(len(r.Hosts) == 0 && inForce[r.Kind+"/"+r.Namespace+"/"+r.Name]) {
			t.Rejected = append(t.Rejected, r)
		}
	}
	for _, n := range in.NotForClients {
		if n.Host == host {
			t.NotForClients = append(t.NotForClients, n)
		}
	}
	return t
}

// subsetOwners names, per subset of the merged rule, the rule defining it.
func subsetOwners(m drmerge.Result) map[*networking.Subset]string {
	out := map[*networking.Subset]string{}
	for _, o := range m.From {
		if dr, ok := o.Spec.(*networking.DestinationRule); ok {
			for _, ss := range dr.GetSubsets() {
				if _, taken := out[ss]; !taken {
					out[ss] = o.Namespace + "/" + o.Name
				}
			}
		}
	}
	return out
}

// policyOwner names the rule whose top-level trafficPolicy is in force.
func policyOwner(m drmerge.Result) string {
	for _, o := range m.From {
		if dr, ok := o.Spec.(*networking.DestinationRule); ok && dr.GetTrafficPolicy() != nil {
			return o.Namespace + "/" + o.Name
		}
	}
	return ""
}

// policies lists the policies in force on the host's clusters, merged as
// the clusters are built (translate.MergedPolicy): per port (one scope ""
// when every port has the same), then per subset what its own policy
// changes.
func policies(svc *model.Service, m drmerge.Result, owner map[*networking.Subset]string) []Policy {
	out := []Policy{}
	top := m.Spec.GetTrafficPolicy()
	topRule := policyOwner(m)
	base := map[uint32]*networking.TrafficPolicy{}
	same := true
	for i, p := range svc.Ports {
		base[p.Number] = translate.MergedPolicy(top, nil, p.Number)
		if i > 0 && !proto.Equal(base[p.Number], base[svc.Ports[0].Number]) {
			same = false
		}
	}
	for i, p := range svc.Ports {
		if same && i > 0 {
			break
		}
		scope := ""
		if !same {
			scope = fmt.Sprintf("port %d", p.Number)
		}
		out = append(out, policyLines(topRule, scope, base[p.Number], nil)...)
	}
	for _, ss := range m.Spec.GetSubsets() {
		if ss.GetTrafficPolicy() == nil {
			continue
		}
		var per [][]Policy
		for _, p := range svc.Ports {
			sub := translate.MergedPolicy(ss.GetTrafficPolicy(), nil, p.Number)
			merged := translate.MergedPolicy(top, ss.GetTrafficPolicy(), p.Number)
			per = append(per, policyLines(owner[ss], fmt.Sprintf("subset %s port %d", ss.GetName(), p.Number), merged, sub))
		}
		if len(per) > 0 && slices.IndexFunc(per, func(l []Policy) bool { return !sameSummaries(l, per[0]) }) < 0 {
			for _, l := range per[0] {
				l.Scope = "subset " + ss.GetName()
				out = append(out, l)
			}
			continue
		}
		for _, l := range per {
			out = append(out, l...)
		}
	}
	return out
}

func sameSummaries(a, b []Policy) bool {
	return slices.EqualFunc(a, b, func(x, y Policy) bool { return x.Kind == y.Kind && x.Summary == y.Summary })
}

// policyLines summarizes tp one line per policy. With only (a subset's
// own policy), a line is listed only for what only sets: the rest is the
// port's, listed already.
func policyLines(rule, scope string, tp, only *networking.TrafficPolicy) []Policy {
	var out []Policy
	add := func(kind string, set bool, parts []string) {
		if len(parts) > 0 && (only == nil || set) {
			out = append(out, Policy{Rule: rule, Scope: scope, Kind: kind, Summary: strings.Join(parts, ", ")})
		}
	}
	add("loadBalancer", only.GetLoadBalancer() != nil, lbSummary(tp.GetLoadBalancer()))
	add("outlierDetection", only.GetOutlierDetection() != nil, outlierSummary(tp.GetOutlierDetection()))
	add("connectionPool", only.GetConnectionPool() != nil, poolSummary(tp.GetConnectionPool()))
	add("tls", only.GetTls() != nil, tlsSummary(tp.GetTls()))
	return out
}

func lbSummary(lb *networking.LoadBalancerSettings) []string {
	if lb == nil {
		return nil
	}
	var p []string
	switch {
	case lb.GetConsistentHash() != nil:
		ch := lb.GetConsistentHash()
		on := "source IP"
		switch {
		case ch.GetHttpHeaderName() != "":
			on = "header " + ch.GetHttpHeaderName()
		case ch.GetHttpCookie() != nil:
			on = "cookie " + ch.GetHttpCookie().GetName()
		case ch.GetHttpQueryParameterName() != "":
			on = "query " + ch.GetHttpQueryParameterName()
		}
		p = append(p, "consistent hash on "+on)
	default:
		p = append(p, lb.GetSimple().String())
	}
	if ls := lb.GetLocalityLbSetting(); ls != nil {
		switch {
		case ls.GetEnabled() != nil && !ls.GetEnabled().GetValue():
			p = append(p, "locality-aware off")
		case len(ls.GetFailover()) > 0:
			var f []string
			for _, fo := range ls.GetFailover() {
				f = append(f, fo.GetFrom()+"→"+fo.GetTo())
			}
			p = append(p, "locality failover "+strings.Join(f, ","))
		case len(ls.GetDistribute()) > 0:
			p = append(p, "locality distribute")
		default:
			p = append(p, "locality-aware")
		}
	}
	return p
}

func outlierSummary(od *networking.OutlierDetection) []string {
	if od == nil {
		return nil
	}
	var p []string
	if n := od.GetConsecutive_5XxErrors(); n != nil {
		p = append(p, fmt.Sprintf("eject after %d consecutive 5xx", n.GetValue()))
	}
	if n := od.GetConsecutiveGatewayErrors(); n != nil {
		p = append(p, fmt.Sprintf("after %d consecutive gateway errors", n.GetValue()))
	}
	if d := od.GetInterval(); d != nil {
		p = append(p, "interval "+d.AsDuration().String())
	}
	if d := od.GetBaseEjectionTime(); d != nil {
		p = append(p, "base ejection "+d.AsDuration().String())
	}
	if n := od.GetMaxEjectionPercent(); n != 0 {
		p = append(p, fmt.Sprintf("max %d%% ejected", n))
	}
	if len(p) == 0 {
		p = []string{"defaults"}
	}
	return p
}

func poolSummary(cp *networking.ConnectionPoolSettings) []string {
	if cp == nil {
		return nil
	}
	var p []string
	if t := cp.GetTcp(); t != nil {
		if n := t.GetMaxConnections(); n != 0 {
			p = append(p, fmt.Sprintf("max %d connections", n))
		}
		if d := t.GetConnectTimeout(); d != nil {
			p = append(p, "connect timeout "+d.AsDuration().String())
		}
	}
	if h := cp.GetHttp(); h != nil {
		if n := h.GetHttp1MaxPendingRequests(); n != 0 {
			p = append(p, fmt.Sprintf("max %d pending requests", n))
		}
		if n := h.GetHttp2MaxRequests(); n != 0 {
			p = append(p, fmt.Sprintf("max %d requests", n))
		}
		if n := h.GetMaxRequestsPerConnection(); n != 0 {
			p = append(p, fmt.Sprintf("max %d requests per connection", n))
		}
		if n := h.GetMaxRetries(); n != 0 {
			p = append(p, fmt.Sprintf("max %d retries", n))
		}
		if d := h.GetIdleTimeout(); d != nil {
			p = append(p, "idle timeout "+d.AsDuration().String())
		}
	}
	if len(p) == 0 {
		p = []string{"defaults"}
	}
	return p
}

func tlsSummary(tls *networking.ClientTLSSettings) []string {
	if tls == nil {
		return nil
	}
	p := []string{tls.GetMode().String()}
	if s := tls.GetSni(); s != "" {
		p = append(p, "sni "+s)
	}
	if c := tls.GetCaCertificates(); c != "" {
		p = append(p, "ca "+c)
	}
	if c := tls.GetClientCertificate(); c != "" {
		p = append(p, "cert "+c)
	}
	return p
}

// hostMatches reports whether a rule's host pattern (a name, "*.suffix" or
// "*") covers host.
func hostMatches(pattern, host string) bool {
	if pattern == host || pattern == "*" {
		return true
	}
	suffix, ok := strings.CutPrefix(pattern, "*")
	return ok && strings.HasSuffix(host, suffix)
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// routesOf is the route table of vs.
func routesOf(vs string, v *networking.VirtualService) []Route {
	var out []Route
	for _, h := range v.GetHttp() {
		r := Route{VirtualService: vs, Protocol: "http", Name: h.GetName(), Match: []string{}, Destinations: []Weighted{}}
		for _, m := range h.GetMatch() {
			r.Match = append(r.Match, httpMatch(m))
		}
		for _, d := range h.GetRoute() {
			r.Destinations = append(r.Destinations, destination(d.GetDestination(), d.GetWeight()))
		}
		switch {
		case h.GetRedirect() != nil:
			rd := h.GetRedirect()
			r.Action = fmt.Sprintf("redirect to %s%s", rd.GetAuthority(), rd.GetUri())
		case h.GetDirectResponse() != nil:
			r.Action = fmt.Sprintf("direct response %d", h.GetDirectResponse().GetStatus())
		}
		routePolicies(&r, h)
		out = append(out, fixWeights(r))
	}
	for _, tr := range v.GetTcp() {
		r := Route{VirtualService: vs, Protocol: "tcp", Match: []string{}, Destinations: []Weighted{}}
		for _, m := range tr.GetMatch() {
			r.Match = append(r.Match, l4Match(m.GetPort(), m.GetDestinationSubnets(), m.GetSourceLabels(), m.GetSourceNamespace(), nil))
		}
		for _, d := range tr.GetRoute() {
			r.Destinations = append(r.Destinations, destination(d.GetDestination(), d.GetWeight()))
		}
		out = append(out, fixWeights(r))
	}
	for _, tr := range v.GetTls() {
		r := Route{VirtualService: vs, Protocol: "tls", Match: []string{}, Destinations: []Weighted{}}
		for _, m := range tr.GetMatch() {
			r.Match = append(r.Match, l4Match(m.GetPort(), m.GetDestinationSubnets(), m.GetSourceLabels(), m.GetSourceNamespace(), m.GetSniHosts()))
		}
		for _, d := range tr.GetRoute() {
			r.Destinations = append(r.Destinations, destination(d.GetDestination(), d.GetWeight()))
		}
		out = append(out, fixWeights(r))
	}
	return out
}

// routePolicies fills r's timeout, retries, fault and mirror from the
// policies Envoy is sent for h (translate.RoutePoliciesOf).
func routePolicies(r *Route, h *networking.HTTPRoute) {
	if h.GetRedirect() != nil || h.GetDirectResponse() != nil {
		return
	}
	if to := h.GetTimeout(); to != nil {
		r.Timeout = to.AsDuration().String()
	}
	rp := translate.RoutePoliciesOf(h)
	r.Retries = retrySummary(rp.Retry)
	if h.GetRetries() == nil {
		r.Retries = "default: " + r.Retries
	}
	if f := rp.Fault; f != nil {
		var p []string
		if d := f.GetDelay(); d != nil {
			p = append(p, fmt.Sprintf("delay %s for %s", d.GetFixedDelay().AsDuration(), percent(d.GetPercentage().GetNumerator())))
		}
		if a := f.GetAbort(); a != nil {
			code := fmt.Sprintf("http %d", a.GetHttpStatus())
			if a.GetHttpStatus() == 0 {
				code = fmt.Sprintf("grpc %d", a.GetGrpcStatus())
			}
			p = append(p, fmt.Sprintf("abort %s for %s", code, percent(a.GetPercentage().GetNumerator())))
		}
		r.Fault = strings.Join(p, ", ")
	}
	var m []string
	for _, mi := range rp.Mirrors {
		d := destination(mi.Destination, 0)
		s := d.Host
		if d.Subset != "" {
			s += " subset " + d.Subset
		}
		m = append(m, fmt.Sprintf("%s (%g%%)", s, mi.Percent))
	}
	r.Mirror = strings.Join(m, ", ")
}

func retrySummary(rp *route.RetryPolicy) string {
	if rp == nil {
		return "off"
	}
	s := fmt.Sprintf("%d retries on %s", rp.GetNumRetries().GetValue(), rp.GetRetryOn())
	if codes := rp.GetRetriableStatusCodes(); len(codes) > 0 {
		s += fmt.Sprintf(" %v", codes)
	}
	if pt := rp.GetPerTryTimeout(); pt != nil {
		s += ", per try " + pt.AsDuration().String()
	}
	return s
}

// percent writes a fraction of a million as a percentage.
func percent(millionths uint32) string {
	return fmt.Sprintf("%g%%", float64(millionths)/10000)
}

func destination(d *networking.Destination, weight int32) Weighted {
	return Weighted{Host: d.GetHost(), Subset: d.GetSubset(), Port: d.GetPort().GetNumber(), Weight: weight}
}

// fixWeights gives a lone destination without a weight its 100%, as Istio
// does.
func fixWeights(r Route) Route {
	if len(r.Destinations) == 1 && r.Destinations[0].Weight == 0 {
		r.Destinations[0].Weight = 100
	}
	return r
}

// httpMatch summarizes one match block (its conditions ANDed).
func httpMatch(m *networking.HTTPMatchRequest) string {
	var c []string
	if m.GetUri() != nil {
		c = append(c, "uri"+stringMatch(m.GetUri()))
	}
	if m.GetMethod() != nil {
		c = append(c, "method"+stringMatch(m.GetMethod()))
	}
	if m.GetAuthority() != nil {
		c = append(c, "authority"+stringMatch(m.GetAuthority()))
	}
	if m.GetScheme() != nil {
		c = append(c, "scheme"+stringMatch(m.GetScheme()))
	}
	for _, k := range slices.Sorted(maps.Keys(m.GetHeaders())) {
		c = append(c, "header "+k+stringMatch(m.GetHeaders()[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(m.GetWithoutHeaders())) {
		c = append(c, "no header "+k+stringMatch(m.GetWithoutHeaders()[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(m.GetQueryParams())) {
		c = append(c, "query "+k+stringMatch(m.GetQueryParams()[k]))
	}
	if p := m.GetPort(); p != 0 {
		c = append(c, fmt.Sprintf("port %d", p))
	}
	if len(m.GetSourceLabels()) > 0 {
		c = append(c, "source "+LabelString(m.GetSourceLabels()))
	}
	if ns := m.GetSourceNamespace(); ns != "" {
		c = append(c, "source namespace "+ns)
	}
	if len(c) == 0 {
		return "*"
	}
	return strings.Join(c, " and ")
}

// stringMatch is `="v"` (exact), `^="v"` (prefix), `~="v"` (regex), or
// " present" for a match of any value.
func stringMatch(s *networking.StringMatch) string {
	switch {
	case s.GetExact() != "":
		return fmt.Sprintf("=%q", s.GetExact())
	case s.GetPrefix() != "":
		return fmt.Sprintf("^=%q", s.GetPrefix())
	case s.GetRegex() != "":
		return fmt.Sprintf("~=%q", s.GetRegex())
	}
	return " present"
}

func l4Match(port uint32, subnets []string, labels map[string]string, ns string, sni []string) string {
	var c []string
	if len(sni) > 0 {
		c = append(c, "sni "+strings.Join(sni, ","))
	}
	if port != 0 {
		c = append(c, fmt.Sprintf("port %d", port))
	}
	if len(subnets) > 0 {
		c = append(c, "destination "+strings.Join(subnets, ","))
	}
	if len(labels) > 0 {
		c = append(c, "source "+LabelString(labels))
	}
	if ns != "" {
		c = append(c, "source namespace "+ns)
	}
	if len(c) == 0 {
		return "*"
	}
	return strings.Join(c, " and ")
}

// LabelString writes labels as k=v,k=v sorted by key.
func LabelString(m map[string]string) string {
	var l []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		l = append(l, k+"="+m[k])
	}
	return strings.Join(l, ",")
}
