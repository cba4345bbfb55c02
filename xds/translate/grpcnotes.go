package translate

import (
	"strconv"

	networking "istio.io/api/networking/v1alpha3"
)

// What a client kind is not sent (docs/architecture.md §3.6): grpc-go's
// xDS client implements only part of Envoy's API and NACKs or ignores the
// rest, so these parts of a rule in force reach Envoy only; and matches
// that depend on the calling workload reach no client, since one
// translation serves all. They are listed per host on /debug/configz
// (Translator.TrafficNotes).

// grpcOmitted lists what of a policy (merged for a port or subset) a gRPC
// cluster cannot carry, for TrafficNotes; empty when it carries all.
func grpcOmitted(tp *networking.TrafficPolicy) []string {
	var out []string
	if m := tp.GetTls().GetMode(); m == networking.ClientTLSSettings_SIMPLE || m == networking.ClientTLSSettings_MUTUAL {
		out = append(out, "tls "+m.String()+" (grpc-go reads certificates only from bootstrap certificate providers; use xds credentials in the client)")
	}
	switch tp.GetLoadBalancer().GetConsistentHash().GetHashKey().(type) {
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		out = append(out, "consistentHash httpCookie (grpc-go hashes by header only)")
	case *networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp:
		out = append(out, "consistentHash useSourceIp (grpc-go hashes by header only)")
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		out = append(out, "consistentHash httpQueryParameterName (grpc-go hashes by header only)")
	}
	if tp.GetLoadBalancer().GetSimple() == networking.LoadBalancerSettings_RANDOM {
		out = append(out, "loadBalancer RANDOM (grpc-go has no random policy; ROUND_ROBIN is used)")
	}
	return out
}

func grpcNote(s string) TrafficNote { return TrafficNote{Client: string(ClassGRPC), Note: s} }

// grpcRouteNotes lists what of a VirtualService gRPC routes leave out.
func grpcRouteNotes(vs *networking.VirtualService) []TrafficNote {
	var out []TrafficNote
	for i, hr := range vs.GetHttp() {
		var parts []string
		if hr.GetRewrite() != nil {
			parts = append(parts, "rewrite")
		}
		if hr.GetHeaders() != nil || hasDestHeaders(hr) {
			parts = append(parts, "headers")
		}
		if hr.GetMirror() != nil || len(hr.GetMirrors()) > 0 {
			parts = append(parts, "mirror")
		}
		if hr.GetCorsPolicy() != nil {
			parts = append(parts, "corsPolicy")
		}
		if hr.GetRedirect() != nil || hr.GetDirectResponse() != nil {
			parts = append(parts, "redirect/directResponse (matching calls fail UNAVAILABLE)")
		}
		for _, m := range hr.GetMatch() {
			if unsupportedMatch(m) {
				parts = append(parts, "matches on method, authority, scheme, query parameters, absent headers or source (those matches are left out)")
				break
			}
		}
		for _, p := range parts {
			out = append(out, grpcNote("http["+strconv.Itoa(i)+"] "+p))
		}
	}
	if len(vs.GetTcp()) > 0 {
		out = append(out, grpcNote("tcp routes"))
	}
	return out
}

// envoyRouteNotes lists the matches Envoy routes leave out because they
// depend on the client (source labels or namespace; routes are shared by
// every Envoy client, whose labels meshfed does not know).
func envoyRouteNotes(vs *networking.VirtualService) []TrafficNote {
	var out []TrafficNote
	note := func(s string) { out = append(out, TrafficNote{Client: string(ClassEnvoy), Note: s}) }
	for i, hr := range vs.GetHttp() {
		for j, m := range hr.GetMatch() {
			if len(m.GetSourceLabels()) > 0 || m.GetSourceNamespace() != "" {
				note("http[" + strconv.Itoa(i) + "].match[" + strconv.Itoa(j) + "]: sourceLabels/sourceNamespace (the match is left out)")
			}
		}
	}
	for i, r := range vs.GetTcp() {
		for j, m := range r.GetMatch() {
			if len(m.GetSourceLabels()) > 0 || m.GetSourceNamespace() != "" || len(m.GetDestinationSubnets()) > 0 {
				note("tcp[" + strconv.Itoa(i) + "].match[" + strconv.Itoa(j) + "]: sourceLabels/sourceNamespace/destinationSubnets (the match is left out)")
			}
		}
	}
	return out
}

func hasDestHeaders(hr *networking.HTTPRoute) bool {
	for _, d := range hr.GetRoute() {
		if d.GetHeaders() != nil {
			return true
		}
	}
	return false
}
