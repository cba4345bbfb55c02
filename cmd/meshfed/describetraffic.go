package main

// The traffic rules part of `meshfed describe HOST`: what /debug/configz
// holds in force and rejected for the host, read into route tables,
// subsets and one-line policies.

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/translate"
)

// trafficInfo is the traffic rules of one host (description.Traffic).
type trafficInfo struct {
	VirtualServices  []ruleRef               `json:"virtualServices"`
	DestinationRules []ruleRef               `json:"destinationRules"`
	Subsets          []subsetInfo            `json:"subsets"`
	RouteTable       []vsRoute               `json:"routeTable"`
	Policies         []policyInfo            `json:"policies"`
	Rejected         []istioconfig.Rejection `json:"rejected"`
	NotForClients    []translate.TrafficNote `json:"notForClients"`
}

// ruleRef is an object in force and where it was read from: "file:line",
// or "namespace/name (cluster)" for a Kubernetes source.
type ruleRef struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Source    string `json:"source"`
}

func (r ruleRef) id() string { return r.Namespace + "/" + r.Name }

// subset is a DestinationRule subset and how many of the host's endpoints
// its labels select.
type subsetInfo struct {
	Name      string            `json:"name"`
	Labels    map[string]string `json:"labels"`
	Endpoints int               `json:"endpoints"`
	Rule      string            `json:"rule"` // namespace/name of its DestinationRule
}

// route is one route of a VirtualService: its matches (ORed; empty: every
// call) and where it sends the calls.
type vsRoute struct {
	VirtualService string     `json:"virtualService"` // namespace/name
	Protocol       string     `json:"protocol"`       // http (also gRPC), tcp or tls
	Name           string     `json:"name,omitempty"`
	Match          []string   `json:"match"`
	Destinations   []weighted `json:"destinations"`
	// Action is what an http route does instead of routing: a redirect or
	// a direct response.
	Action string `json:"action,omitempty"`
}

// weighted is one destination of a route with its share in percent.
type weighted struct {
	Host   string `json:"host"`
	Subset string `json:"subset,omitempty"`
	Port   uint32 `json:"port,omitempty"`
	Weight int32  `json:"weight"`
}

func (d weighted) String() string {
	s := fmt.Sprintf("%d%% %s", d.Weight, d.Host)
	if d.Port != 0 {
		s += fmt.Sprintf(":%d", d.Port)
	}
	if d.Subset != "" {
		s += " subset " + d.Subset
	}
	return s
}

// policy is one traffic policy in force, summarized.
type policyInfo struct {
	Rule    string `json:"rule"`            // namespace/name of its DestinationRule
	Scope   string `json:"scope,omitempty"` // "", "port 8080", "subset v1", "subset v1 port 8080"
	Kind    string `json:"kind"`            // loadBalancer, outlierDetection, connectionPool, tls
	Summary string `json:"summary"`
}

// readTraffic picks from /debug/configz what applies to host.
func readTraffic(cz admin.Configz, host string, eps []admin.EndpointInfo) trafficInfo {
	t := trafficInfo{VirtualServices: []ruleRef{}, DestinationRules: []ruleRef{}, Subsets: []subsetInfo{},
		RouteTable: []vsRoute{}, Policies: []policyInfo{}, Rejected: []istioconfig.Rejection{}, NotForClients: []translate.TrafficNote{}}
	specs := map[string]admin.ObjectSpec{}
	for _, s := range cz.Specs {
		specs[s.Kind+"/"+s.Namespace+"/"+s.Name] = s
	}
	inForce := map[string]bool{}
	for _, o := range cz.InForce {
		if !slices.ContainsFunc(o.Hosts, func(h string) bool { return hostMatches(h, host) }) {
			continue
		}
		ref := ruleRef{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Source: o.Source}
		inForce[o.Kind+"/"+o.Namespace+"/"+o.Name] = true
		sp, ok := specs[o.Kind+"/"+o.Namespace+"/"+o.Name]
		switch o.Kind {
		case istioconfig.KindVirtualService:
			t.VirtualServices = append(t.VirtualServices, ref)
			var vs networking.VirtualService
			if ok && unmarshalSpec(sp, &vs) {
				t.RouteTable = append(t.RouteTable, routesOf(ref.id(), &vs)...)
			}
		case istioconfig.KindDestinationRule:
			t.DestinationRules = append(t.DestinationRules, ref)
			var dr networking.DestinationRule
			if ok && unmarshalSpec(sp, &dr) {
				for _, ss := range dr.GetSubsets() {
					t.Subsets = append(t.Subsets, subsetInfo{Name: ss.GetName(), Labels: nonNilMap(ss.GetLabels()),
						Endpoints: selected(eps, ss.GetLabels()), Rule: ref.id()})
				}
				t.Policies = append(t.Policies, policiesOf(ref.id(), "", dr.GetTrafficPolicy())...)
				for _, ss := range dr.GetSubsets() {
					t.Policies = append(t.Policies, policiesOf(ref.id(), "subset "+ss.GetName(), ss.GetTrafficPolicy())...)
				}
			}
		}
	}
	for _, r := range cz.Rejected {
		if slices.ContainsFunc(r.Hosts, func(h string) bool { return hostMatches(h, host) }) ||
			(len(r.Hosts) == 0 && inForce[r.Kind+"/"+r.Namespace+"/"+r.Name]) {
			t.Rejected = append(t.Rejected, r)
		}
	}
	for _, n := range cz.NotForClients {
		if n.Host == host {
			t.NotForClients = append(t.NotForClients, n)
		}
	}
	return t
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

func unmarshalSpec(s admin.ObjectSpec, m proto.Message) bool {
	return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(s.Spec, m) == nil
}

// selected counts the endpoints carrying every label of labels.
func selected(eps []admin.EndpointInfo, labels map[string]string) int {
	n := 0
	for _, e := range eps {
		if model.Selects(labels, e.Labels) {
			n++
		}
	}
	return n
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// routesOf is the route table of vs.
func routesOf(vs string, v *networking.VirtualService) []vsRoute {
	var out []vsRoute
	for _, h := range v.GetHttp() {
		r := vsRoute{VirtualService: vs, Protocol: "http", Name: h.GetName(), Match: []string{}, Destinations: []weighted{}}
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
		out = append(out, fixWeights(r))
	}
	for _, tr := range v.GetTcp() {
		r := vsRoute{VirtualService: vs, Protocol: "tcp", Match: []string{}, Destinations: []weighted{}}
		for _, m := range tr.GetMatch() {
			r.Match = append(r.Match, l4Match(m.GetPort(), m.GetDestinationSubnets(), m.GetSourceLabels(), m.GetSourceNamespace(), nil))
		}
		for _, d := range tr.GetRoute() {
			r.Destinations = append(r.Destinations, destination(d.GetDestination(), d.GetWeight()))
		}
		out = append(out, fixWeights(r))
	}
	for _, tr := range v.GetTls() {
		r := vsRoute{VirtualService: vs, Protocol: "tls", Match: []string{}, Destinations: []weighted{}}
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

func destination(d *networking.Destination, weight int32) weighted {
	return weighted{Host: d.GetHost(), Subset: d.GetSubset(), Port: d.GetPort().GetNumber(), Weight: weight}
}

// fixWeights gives a lone destination without a weight its 100%, as Istio
// does.
func fixWeights(r vsRoute) vsRoute {
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
		c = append(c, "source "+labelString(m.GetSourceLabels()))
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
		c = append(c, "source "+labelString(labels))
	}
	if ns != "" {
		c = append(c, "source namespace "+ns)
	}
	if len(c) == 0 {
		return "*"
	}
	return strings.Join(c, " and ")
}

func labelString(m map[string]string) string {
	var l []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		l = append(l, k+"="+m[k])
	}
	return strings.Join(l, ",")
}

// policiesOf summarizes tp, and its port-level settings, one line each.
func policiesOf(rule, scope string, tp *networking.TrafficPolicy) []policyInfo {
	if tp == nil {
		return nil
	}
	out := policyLines(rule, scope, tp.GetLoadBalancer(), tp.GetOutlierDetection(), tp.GetConnectionPool(), tp.GetTls())
	for _, pl := range tp.GetPortLevelSettings() {
		s := strings.TrimSpace(fmt.Sprintf("%s port %d", scope, pl.GetPort().GetNumber()))
		out = append(out, policyLines(rule, s, pl.GetLoadBalancer(), pl.GetOutlierDetection(), pl.GetConnectionPool(), pl.GetTls())...)
	}
	return out
}

func policyLines(rule, scope string, lb *networking.LoadBalancerSettings, od *networking.OutlierDetection,
	cp *networking.ConnectionPoolSettings, tls *networking.ClientTLSSettings) []policyInfo {
	var out []policyInfo
	add := func(kind string, parts []string) {
		if len(parts) > 0 {
			out = append(out, policyInfo{Rule: rule, Scope: scope, Kind: kind, Summary: strings.Join(parts, ", ")})
		}
	}
	if lb != nil {
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
		if lb.GetLocalityLbSetting() != nil {
			p = append(p, "locality-aware")
		}
		add("loadBalancer", p)
	}
	if od != nil {
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
		add("outlierDetection", p)
	}
	if cp != nil {
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
		add("connectionPool", p)
	}
	if tls != nil {
		p := []string{tls.GetMode().String()}
		if s := tls.GetSni(); s != "" {
			p = append(p, "sni "+s)
		}
		add("tls", p)
	}
	return out
}

// writeTraffic is the traffic rules part of the describe table.
func writeTraffic(w io.Writer, p painter, t trafficInfo) {
	fmt.Fprintf(w, "\nTraffic rules: %d in force\n", len(t.VirtualServices)+len(t.DestinationRules))
	var rt table
	for _, r := range append(slices.Clone(t.VirtualServices), t.DestinationRules...) {
		rt.row("  "+r.Kind, r.id(), r.Source)
	}
	rt.write(w)

	if len(t.Subsets) > 0 {
		fmt.Fprintf(w, "\nSubsets:\n")
		var st table
		st.row("  NAME", "LABELS", "ENDPOINTS", "RULE")
		for _, s := range t.Subsets {
			i := st.row("  "+s.Name, labelString(s.Labels), fmt.Sprint(s.Endpoints), s.Rule)
			if s.Endpoints == 0 {
				st.color(i, 2, func(c string) string { return p.paint(yellow, c) })
			}
		}
		st.write(w)
	}

	if len(t.RouteTable) > 0 {
		fmt.Fprintf(w, "\nRoute table:\n")
		var tt table
		tt.row("  ROUTE", "MATCH", "DESTINATIONS", "VIRTUALSERVICE")
		for _, r := range t.RouteTable {
			name := r.Protocol
			if r.Name != "" {
				name += " " + r.Name
			}
			match := "*"
			if len(r.Match) > 0 {
				match = strings.Join(r.Match, " or ")
			}
			var dests []string
			for _, d := range r.Destinations {
				dests = append(dests, d.String())
			}
			if r.Action != "" {
				dests = append(dests, r.Action)
			}
			tt.row("  "+name, match, "→ "+strings.Join(dests, ", "), r.VirtualService)
		}
		tt.write(w)
	}

	if len(t.Policies) > 0 {
		fmt.Fprintf(w, "\nPolicies:\n")
		var pt table
		for _, pl := range t.Policies {
			scope := pl.Rule
			if pl.Scope != "" {
				scope += " " + pl.Scope
			}
			pt.row("  "+pl.Kind, pl.Summary, "("+scope+")")
		}
		pt.write(w)
	}

	if len(t.Rejected) > 0 {
		fmt.Fprintf(w, "\nRejected:    %d\n", len(t.Rejected))
		for _, r := range t.Rejected {
			kept := ""
			if r.KeptLastGood {
				kept = " (last good version kept in force)"
			}
			lines := strings.Split(r.String(), "\n")
			fmt.Fprintf(w, "  %s %s%s\n", p.paint(red, "REJECTED"), lines[0], kept)
			for _, l := range lines[1:] {
				fmt.Fprintf(w, "    %s\n", l)
			}
		}
	}

	if len(t.NotForClients) > 0 {
		fmt.Fprintf(w, "\nNot for clients:\n")
		for _, n := range t.NotForClients {
			fmt.Fprintf(w, "  %s: %s\n", n.Client, n.Note)
		}
	}
}
