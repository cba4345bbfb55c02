package istioconfig

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// Checks of the VirtualService actions and DestinationRule policies that
// Envoy translation uses (docs/architecture.md §3.6): what Istio's
// validation refuses, and what meshfed cannot translate, refused with the
// reason so that no proxy is sent half a rule.

// MaxDirectResponseBodyBytes bounds a directResponse body (Istio's limit,
// 1 MiB). Envoy refuses a route configuration whose direct response bodies
// exceed its max_direct_response_body_size_bytes (4 KiB unless set), so the
// translation sets that field to this value on every Envoy route
// configuration.
const MaxDirectResponseBodyBytes = 1 << 20

// cookieUnsafe are the characters a Set-Cookie path or attribute value
// must not hold: they would end the attribute or the header.
const cookieUnsafe = ";\r\n\x00"

// headerNameRE: an HTTP header name (RFC 9110 token characters).
var headerNameRE = regexp.MustCompile("^[!#$%&'*+\\-.^_`|~0-9A-Za-z]+$")

// httpMethods Istio accepts in a CORS policy's allowMethods.
var httpMethods = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "DELETE": true,
	"CONNECT": true, "OPTIONS": true, "TRACE": true, "PATCH": true}

// validateHTTPActions checks rewrite, redirect, directResponse, headers,
// mirror and CORS of one http route; errors start with the field path
// below the route.
func validateHTTPActions(r *networking.HTTPRoute) error {
	if r.GetRedirect() != nil && r.GetDirectResponse() != nil {
		return errors.New(": redirect and directResponse are exclusive")
	}
	if (r.GetRedirect() != nil || r.GetDirectResponse() != nil) && len(r.GetRoute()) > 0 {
		return errors.New(": a route with redirect or directResponse must not have route destinations")
	}
	for name, v := range map[string]string{"redirect.uri": r.GetRedirect().GetUri(), "redirect.authority": r.GetRedirect().GetAuthority(),
		"rewrite.uri": r.GetRewrite().GetUri(), "rewrite.authority": r.GetRewrite().GetAuthority(),
		"rewrite.uriRegexRewrite.rewrite": r.GetRewrite().GetUriRegexRewrite().GetRewrite()} {
		if strings.ContainsAny(v, "\r\n\x00") {
			return fmt.Errorf(".%s: must not hold CR, LF or NUL", name)
		}
	}
	if rd := r.GetRedirect(); rd != nil {
		if rd.GetUri() == "" && rd.GetAuthority() == "" && rd.GetScheme() == "" && rd.GetRedirectPort() == nil {
			return errors.New(".redirect: one of uri, authority, scheme or port is required")
		}
		switch rd.GetRedirectCode() {
		case 0, 301, 302, 303, 307, 308:
		default:
			return fmt.Errorf(".redirect.redirectCode %d: want 301, 302, 303, 307 or 308", rd.GetRedirectCode())
		}
		if p, ok := rd.GetRedirectPort().(*networking.HTTPRedirect_Port); ok && (p.Port == 0 || p.Port > 65535) {
			return fmt.Errorf(".redirect.port %d: want 1-65535", p.Port)
		}
		if s := rd.GetScheme(); s != "" && s != "http" && s != "https" {
			return fmt.Errorf(".redirect.scheme %q: want http or https", s)
		}
	}
	if dr := r.GetDirectResponse(); dr != nil {
		if dr.GetStatus() < 200 || dr.GetStatus() > 599 {
			return fmt.Errorf(".directResponse.status %d: want 200-599", dr.GetStatus())
		}
		if len(dr.GetBody().GetString_())+len(dr.GetBody().GetBytes()) > MaxDirectResponseBodyBytes {
			return errors.New(".directResponse.body: larger than 1 MiB")
		}
	}
	if rw := r.GetRewrite(); rw != nil {
		if rw.GetUri() != "" && rw.GetUriRegexRewrite() != nil {
			return errors.New(".rewrite: uri and uriRegexRewrite are exclusive")
		}
		if rr := rw.GetUriRegexRewrite(); rr != nil {
			if rr.GetMatch() == "" {
				return fmt.Errorf(".rewrite.uriRegexRewrite.match %q: not a valid RE2 regex", rr.GetMatch())
			}
			if err := checkRegex(rr.GetMatch()); err != nil {
				return fmt.Errorf(".rewrite.uriRegexRewrite.match %q: not a valid RE2 regex: %v", rr.GetMatch(), err)
			}
		}
		if rw.GetUri() == "" && rw.GetAuthority() == "" && rw.GetUriRegexRewrite() == nil {
			return errors.New(".rewrite: uri, uriRegexRewrite or authority is required")
		}
		if r.GetRedirect() != nil {
			return errors.New(".rewrite: not allowed with redirect")
		}
	}
	if err := checkHeaders(r.GetHeaders()); err != nil {
		return fmt.Errorf(".headers%s", err)
	}
	if m := r.GetMirror(); m != nil {
		if err := checkDestination(m); err != nil {
			return fmt.Errorf(".mirror%s", err)
		}
	}
	if err := checkPercent(r.GetMirrorPercentage()); err != nil {
		return fmt.Errorf(".mirrorPercentage.value %v", err)
	}
	//lint:ignore SA1019 deprecated in Istio, still honoured by it (when mirrorPercentage is unset)
	if p := r.GetMirrorPercent(); p != nil && p.GetValue() > 100 {
		return fmt.Errorf(".mirrorPercent %d: want 0-100", p.GetValue())
	}
	for i, m := range r.GetMirrors() {
		if m.GetDestination() == nil {
			return fmt.Errorf(".mirrors[%d].destination: is required", i)
		}
		if err := checkDestination(m.GetDestination()); err != nil {
			return fmt.Errorf(".mirrors[%d].destination%s", i, err)
		}
		if err := checkPercent(m.GetPercentage()); err != nil {
			return fmt.Errorf(".mirrors[%d].percentage.value %v", i, err)
		}
	}
	if c := r.GetCorsPolicy(); c != nil {
		for i, o := range c.GetAllowOrigins() {
			if err := checkValueMatch(o, false); err != nil {
				return fmt.Errorf(".corsPolicy.allowOrigins[%d]: %v", i, err)
			}
		}
		for _, m := range c.GetAllowMethods() {
			if !httpMethods[m] {
				return fmt.Errorf(".corsPolicy.allowMethods %q: not an HTTP method", m)
			}
		}
		for _, h := range append(append([]string(nil), c.GetAllowHeaders()...), c.GetExposeHeaders()...) {
			if !headerNameRE.MatchString(h) {
				return fmt.Errorf(".corsPolicy: %q is not a header name", h)
			}
		}
		if ma := c.GetMaxAge(); ma != nil {
			if err := ma.CheckValid(); err != nil || ma.AsDuration() < 0 || ma.GetNanos() != 0 {
				return fmt.Errorf(".corsPolicy.maxAge %v: want whole seconds", ma.AsDuration())
			}
		}
	}
	return nil
}

// checkHeaders: every header name set, added or removed is a header name.
func checkHeaders(h *networking.Headers) error {
	for part, ops := range map[string]*networking.Headers_HeaderOperations{"request": h.GetRequest(), "response": h.GetResponse()} {
		for op, m := range map[string]map[string]string{"set": ops.GetSet(), "add": ops.GetAdd()} {
			for k, v := range m {
				if strings.EqualFold(k, ":authority") {
					continue // an authority rewrite, as Istio reads it
				}
				if !headerNameRE.MatchString(k) {
					return fmt.Errorf(".%s.%s %q: not a header name", part, op, k)
				}
				if strings.ContainsAny(v, "\r\n\x00") {
					return fmt.Errorf(".%s.%s[%q]: value must not hold CR, LF or NUL", part, op, k)
				}
			}
		}
		for _, k := range ops.GetRemove() {
			if !headerNameRE.MatchString(k) {
				return fmt.Errorf(".%s.remove %q: not a header name", part, k)
			}
			if strings.EqualFold(k, "host") {
				return fmt.Errorf(".%s.remove %q: host cannot be removed", part, k)
			}
		}
	}
	return nil
}

func checkPercent(p *networking.Percent) error {
	if p != nil && (p.GetValue() < 0 || p.GetValue() > 100) {
		return fmt.Errorf("%v: want 0-100", p.GetValue())
	}
	return nil
}

// checkDestination: host (no wildcard), subset, port; errors start with
// the field path below the destination.
func checkDestination(dst *networking.Destination) error {
	switch {
	case dst.GetHost() == "":
		return errors.New(".host: is required")
	case !validHost(dst.GetHost()) || strings.Contains(dst.GetHost(), "*"):
		return fmt.Errorf(".host %q: not a valid host name (no wildcards)", dst.GetHost())
	case dst.GetSubset() != "" && !dns1123Label(dst.GetSubset()):
		return fmt.Errorf(".subset %q: want a DNS-1123 label", dst.GetSubset())
	case dst.GetPort() != nil && (dst.GetPort().GetNumber() == 0 || dst.GetPort().GetNumber() > 65535):
		return fmt.Errorf(".port.number %d: want 1-65535", dst.GetPort().GetNumber())
	}
	return nil
}

// checkDestinations checks the destinations and weights of an http or tcp
// route.
func checkDestinations[D any](ds []D, get func(D) (*networking.Destination, int32)) error {
	var total int64
	for i, d := range ds {
		dst, w := get(d)
		if dst == nil {
			return fmt.Errorf(".route[%d].destination: is required", i)
		}
		if err := checkDestination(dst); err != nil {
			return fmt.Errorf(".route[%d].destination%s", i, err)
		}
		if w < 0 {
			return fmt.Errorf(".route[%d].weight %d: must not be negative", i, w)
		}
		total += int64(w)
	}
	if len(ds) > 1 && total == 0 {
		return errors.New(".route: weights of several destinations must not all be 0")
	}
	if total > math.MaxUint32 {
		// grpc-go NACKs a route whose weighted clusters sum above this.
		return fmt.Errorf(".route: weights sum to %d; want at most %d", total, uint64(math.MaxUint32))
	}
	return nil
}

// validateTCPRoute checks one tcp route.
func validateTCPRoute(r *networking.TCPRoute) error {
	for i, m := range r.GetMatch() {
		if m.GetPort() > 65535 {
			return fmt.Errorf(".match[%d].port %d: want 1-65535", i, m.GetPort())
		}
	}
	if len(r.GetRoute()) == 0 {
		return errors.New(".route: at least one destination is required")
	}
	return checkDestinations(r.GetRoute(), func(d *networking.RouteDestination) (*networking.Destination, int32) {
		return d.GetDestination(), d.GetWeight()
	})
}

// maxMaglevTableSize is Envoy's upper bound on a Maglev table (a prime).
const maxMaglevTableSize = 5000011

func isPrime(n uint64) bool {
	if n < 2 {
		return false
	}
	for d := uint64(2); d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}

// validatePolicyMore checks the parts of a traffic policy that only Envoy
// translation reads, and refuses what meshfed does not translate.
func validatePolicyMore(path string, tp *networking.TrafficPolicy) error {
	var errs []error
	if tp.GetTunnel() != nil || tp.GetProxyProtocol() != nil || tp.GetRetryBudget() != nil {
		errs = append(errs, fmt.Errorf("%s: tunnel, proxyProtocol and retryBudget are not supported", path))
	}
	errs = append(errs, checkLB(path+".loadBalancer", tp.GetLoadBalancer()), checkPool(path+".connectionPool", tp.GetConnectionPool()),
		checkOutlier(path+".outlierDetection", tp.GetOutlierDetection()), checkTLS(path+".tls", tp.GetTls()))
	seen := map[uint32]bool{}
	for i, pl := range tp.GetPortLevelSettings() {
		p := fmt.Sprintf("%s.portLevelSettings[%d]", path, i)
		n := pl.GetPort().GetNumber()
		if n == 0 || n > 65535 {
			errs = append(errs, fmt.Errorf("%s.port.number %d: want 1-65535", p, n))
		} else if seen[n] {
			errs = append(errs, fmt.Errorf("%s.port.number %d: port already has settings", p, n))
		}
		seen[n] = true
		errs = append(errs, validatePolicy(p, &networking.TrafficPolicy{LoadBalancer: pl.GetLoadBalancer(),
			ConnectionPool: pl.GetConnectionPool(), OutlierDetection: pl.GetOutlierDetection(), Tls: pl.GetTls()}))
	}
	return errors.Join(errs...) // nil when every check passed
}

func checkLB(path string, lb *networking.LoadBalancerSettings) error {
	if lb == nil {
		return nil
	}
	if lb.GetSimple() == networking.LoadBalancerSettings_PASSTHROUGH {
		return fmt.Errorf("%s.simple PASSTHROUGH: not supported (meshfed serves EDS clusters, not original-destination ones)", path)
	}
	if err := checkLocality(path+".localityLbSetting", lb.GetLocalityLbSetting()); err != nil {
		return err
	}
	if lb.GetZoneAwareLbSetting() != nil || lb.GetWarmup() != nil || lb.GetWarmupDurationSecs() != nil {
		return fmt.Errorf("%s: zoneAwareLbSetting and warmup are not supported", path)
	}
	ch := lb.GetConsistentHash()
	if ch == nil {
		return nil
	}
	p := path + ".consistentHash"
	switch k := ch.GetHashKey().(type) {
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		if k.HttpCookie.GetName() == "" {
			return fmt.Errorf("%s.httpCookie.name: is required", p)
		}
		if !headerNameRE.MatchString(k.HttpCookie.GetName()) {
			return fmt.Errorf("%s.httpCookie.name %q: not a cookie name (token characters only)", p, k.HttpCookie.GetName())
		}
		if strings.ContainsAny(k.HttpCookie.GetPath(), cookieUnsafe) {
			return fmt.Errorf("%s.httpCookie.path %q: must not hold ';', CR, LF or NUL", p, k.HttpCookie.GetPath())
		}
		if t := k.HttpCookie.GetTtl(); t != nil && (t.CheckValid() != nil || t.AsDuration() < 0) {
			return fmt.Errorf("%s.httpCookie.ttl: not a valid duration", p)
		}
		for i, a := range k.HttpCookie.GetAttributes() {
			if !headerNameRE.MatchString(a.GetName()) {
				return fmt.Errorf("%s.httpCookie.attributes[%d].name %q: not an attribute name (non-empty, token characters only)", p, i, a.GetName())
			}
			if strings.ContainsAny(a.GetValue(), cookieUnsafe) || len(a.GetValue()) > 16384 {
				return fmt.Errorf("%s.httpCookie.attributes[%d].value %q: must not hold ';', CR, LF or NUL (at most 16384 bytes)", p, i, a.GetValue())
			}
		}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		if !headerNameRE.MatchString(k.HttpHeaderName) {
			return fmt.Errorf("%s.httpHeaderName %q: not a header name", p, k.HttpHeaderName)
		}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		if k.HttpQueryParameterName == "" {
			return fmt.Errorf("%s.httpQueryParameterName: must not be empty", p)
		}
	}
	//lint:ignore SA1019 deprecated in Istio, still accepted by it
	if n := ch.GetMinimumRingSize(); n > maxRingSize {
		return fmt.Errorf("%s.minimumRingSize %d: want at most %d", p, n, maxRingSize)
	}
	if m := ch.GetMaglev(); m != nil && m.GetTableSize() != 0 && (!isPrime(m.GetTableSize()) || m.GetTableSize() > maxMaglevTableSize) {
		return fmt.Errorf("%s.maglev.tableSize %d: want a prime at most %d", p, m.GetTableSize(), maxMaglevTableSize)
	}
	return nil
}

func checkPool(path string, cp *networking.ConnectionPoolSettings) error {
	t, h := cp.GetTcp(), cp.GetHttp()
	for name, v := range map[string]int32{"tcp.maxConnections": t.GetMaxConnections(), "http.http1MaxPendingRequests": h.GetHttp1MaxPendingRequests(),
		"http.maxRequestsPerConnection": h.GetMaxRequestsPerConnection(), "http.maxRetries": h.GetMaxRetries(), "http.maxConcurrentStreams": h.GetMaxConcurrentStreams()} {
		if v < 0 {
			return fmt.Errorf("%s.%s %d: must not be negative", path, name, v)
		}
	}
	if err := checkDuration(t.GetConnectTimeout(), false); err != nil {
		return fmt.Errorf("%s.tcp.connectTimeout: %v", path, err)
	}
	if err := checkDuration(h.GetIdleTimeout(), false); err != nil {
		return fmt.Errorf("%s.http.idleTimeout: %v", path, err)
	}
	if err := checkDuration(t.GetIdleTimeout(), false); err != nil {
		return fmt.Errorf("%s.tcp.idleTimeout: %v", path, err)
	}
	if err := checkDuration(t.GetMaxConnectionDuration(), false); err != nil {
		return fmt.Errorf("%s.tcp.maxConnectionDuration: %v", path, err)
	}
	if ka := t.GetTcpKeepalive(); ka != nil {
		if err := checkDuration(ka.GetTime(), false); err != nil {
			return fmt.Errorf("%s.tcp.tcpKeepalive.time: %v", path, err)
		}
		if err := checkDuration(ka.GetInterval(), false); err != nil {
			return fmt.Errorf("%s.tcp.tcpKeepalive.interval: %v", path, err)
		}
	}
	return nil
}

func checkOutlier(path string, od *networking.OutlierDetection) error {
	if od == nil {
		return nil
	}
	//lint:ignore SA1019 deprecated in Istio, still accepted by it
	if n := od.GetConsecutiveErrors(); n < 0 {
		return fmt.Errorf("%s.consecutiveErrors %d: must not be negative", path, n)
	}
	if p := od.GetMinHealthPercent(); p < 0 || p > 100 {
		return fmt.Errorf("%s.minHealthPercent %d: want 0-100", path, p)
	}
	return nil
}

// checkTLS: TLS origination from files on the proxy's host. ISTIO_MUTUAL
// and credentialName need certificates that istiod's SDS hands out.
func checkTLS(path string, t *networking.ClientTLSSettings) error {
	if t == nil {
		return nil
	}
	switch t.GetMode() {
	case networking.ClientTLSSettings_ISTIO_MUTUAL:
		return fmt.Errorf("%s.mode ISTIO_MUTUAL: needs Istio workload certificates (SDS from istiod), which meshfed does not issue; "+
			"use SIMPLE or MUTUAL with caCertificates, clientCertificate and privateKey files", path)
	case networking.ClientTLSSettings_DISABLE:
		return nil
	}
	if t.GetCredentialName() != "" {
		return fmt.Errorf("%s.credentialName: secrets by name need SDS, which meshfed does not serve; name the files (caCertificates, clientCertificate, privateKey)", path)
	}
	if len(t.GetSni()) > 255 {
		return fmt.Errorf("%s.sni: longer than 255 bytes", path)
	}
	if t.GetMode() == networking.ClientTLSSettings_MUTUAL && (t.GetClientCertificate() == "" || t.GetPrivateKey() == "") {
		return fmt.Errorf("%s: mode MUTUAL needs clientCertificate and privateKey", path)
	}
	if t.GetMode() == networking.ClientTLSSettings_SIMPLE && (t.GetClientCertificate() != "" || t.GetPrivateKey() != "") {
		return fmt.Errorf("%s: clientCertificate and privateKey are for mode MUTUAL", path)
	}
	for name, f := range map[string]string{"caCertificates": t.GetCaCertificates(), "clientCertificate": t.GetClientCertificate(), "privateKey": t.GetPrivateKey(), "caCrl": t.GetCaCrl()} {
		if f != "" && !strings.HasPrefix(f, "/") {
			return fmt.Errorf("%s.%s %q: want an absolute path (read by the proxy on its host)", path, name, f)
		}
	}
	if t.GetCaCertificates() == "" && !t.GetInsecureSkipVerify().GetValue() {
		return fmt.Errorf("%s.caCertificates: is required to verify the server (or set insecureSkipVerify: true)", path)
	}
	return nil
}

// checkLocality: distribute from "*" (every client) with weights summing
// to 100, or failover between regions (per-locality EDS,
// docs/architecture.md §3.6), not both, as Istio requires.
// failoverPriority (by client labels) and distribute from one locality
// are not served yet.
func checkLocality(path string, ls *networking.LocalityLoadBalancerSetting) error {
	if ls == nil || (ls.GetEnabled() != nil && !ls.GetEnabled().GetValue()) {
		return nil
	}
	if len(ls.GetFailoverPriority()) > 0 {
		return fmt.Errorf("%s.failoverPriority: not supported yet (it orders endpoints by each client's labels)", path)
	}
	if len(ls.GetFailover()) > 0 && len(ls.GetDistribute()) > 0 {
		return fmt.Errorf("%s: failover and distribute are mutually exclusive", path)
	}
	from := map[string]bool{}
	for i, f := range ls.GetFailover() {
		p := fmt.Sprintf("%s.failover[%d]", path, i)
		switch {
		case f.GetFrom() == "" || f.GetTo() == "":
			return fmt.Errorf("%s: from and to regions are required", p)
		case strings.Contains(f.GetFrom(), "/") || strings.Contains(f.GetTo(), "/") || f.GetFrom() == "*" || f.GetTo() == "*":
			return fmt.Errorf("%s: from and to are region names (no zones, no \"*\")", p)
		case f.GetFrom() == f.GetTo():
			return fmt.Errorf("%s: from and to are the same region %q", p, f.GetFrom())
		case from[f.GetFrom()]:
			return fmt.Errorf("%s.from %q: region already has a failover rule", p, f.GetFrom())
		}
		from[f.GetFrom()] = true
	}
	for i, d := range ls.GetDistribute() {
		p := fmt.Sprintf("%s.distribute[%d]", path, i)
		if d.GetFrom() != "*" {
			return fmt.Errorf("%s.from %q: only \"*\" (every client) is supported "+
				"(a per-locality rule depends on each client's locality; meshfed serves one EDS to every client)", p, d.GetFrom())
		}
		if i > 0 {
			return fmt.Errorf("%s: only one distribute rule from \"*\"", p)
		}
		var sum uint64
		for k, w := range d.GetTo() {
			if k == "" || strings.Count(k, "/") > 2 {
				return fmt.Errorf("%s.to %q: want region[/zone[/subzone]], parts may be \"*\"", p, k)
			}
			if w == 0 {
				return fmt.Errorf("%s.to[%q]: weight must be positive", p, k)
			}
			sum += uint64(w)
		}
		if sum != 100 {
			return fmt.Errorf("%s.to: weights sum to %d; want 100", p, sum)
		}
	}
	return nil
}

// checkValueMatch is checkStringMatch for header, query parameter,
// method, authority, scheme and origin matches, where Envoy also needs a
// prefix to be non-empty.
func checkValueMatch(s *networking.StringMatch, emptyOK bool) error {
	if err := checkStringMatch(s, emptyOK); err != nil {
		return err
	}
	if p, ok := s.GetMatchType().(*networking.StringMatch_Prefix); ok && p.Prefix == "" {
		return errors.New("prefix must not be empty")
	}
	return nil
}
