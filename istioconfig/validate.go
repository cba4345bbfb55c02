package istioconfig

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"
)

// The checks here are the structural subset of Istio's own validation
// (istio.io/istio pkg/config/validation) that a proxy relies on; Istio's
// package is not imported (it pulls most of istiod). Each returns the
// first problem found, naming the field by its YAML path.

var (
	labelRE     = regexp.MustCompile(`^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?$`)
	subdomainRE = regexp.MustCompile(`^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*$`)
	hostRE      = regexp.MustCompile(`^(\*|\*\.)?[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?)*$`)
)

func dns1123Label(s string) bool     { return len(s) <= 63 && labelRE.MatchString(s) }
func dns1123Subdomain(s string) bool { return len(s) <= 253 && subdomainRE.MatchString(s) }

// validHost: a DNS name, optionally with a leading "*." wildcard, or "*".
func validHost(h string) bool { return h == "*" || (len(h) <= 253 && hostRE.MatchString(h)) }

// validateSpec validates a VirtualService or DestinationRule spec: every
// problem found, joined; nil for other messages.
func validateSpec(spec proto.Message) error {
	switch sp := spec.(type) {
	case *networking.VirtualService:
		return validateVirtualService(sp)
	case *networking.DestinationRule:
		return validateDestinationRule(sp)
	case *networking.Sidecar:
		return validateSidecar(sp)
	}
	return nil
}

// validateVirtualService checks what every route of vs needs.
// Every problem is reported (joined), at most one per part checked.
func validateVirtualService(vs *networking.VirtualService) error {
	var errs []error
	if len(vs.GetHosts()) == 0 {
		errs = append(errs, errors.New("spec.hosts: at least one host is required"))
	}
	for i, h := range vs.GetHosts() {
		if !validHost(h) {
			errs = append(errs, fmt.Errorf("spec.hosts[%d] %q: not a valid host name", i, h))
		}
	}
	if err := validateExportTo("spec.exportTo", vs.GetExportTo()); err != nil {
		errs = append(errs, err)
	}
	if len(vs.GetTls()) > 0 {
		errs = append(errs, errors.New("spec.tls: TLS (SNI) routes are not supported yet"))
	}
	if len(vs.GetHttp()) == 0 && len(vs.GetTcp()) == 0 && len(vs.GetTls()) == 0 {
		errs = append(errs, errors.New("spec.http/spec.tcp: at least one http or tcp route is required"))
	}
	for i, r := range vs.GetHttp() {
		if err := validateHTTPRoute(r); err != nil {
			errs = append(errs, prefixed(fmt.Sprintf("spec.http[%d]", i), err))
		}
	}
	for i, r := range vs.GetTcp() {
		if err := validateTCPRoute(r); err != nil {
			errs = append(errs, prefixed(fmt.Sprintf("spec.tcp[%d]", i), err))
		}
	}
	return errors.Join(errs...)
}

// validateHTTPRoute returns errors that start with the field path below
// the route (".route[0].weight: ..."), joined: every part of the route
// (matches, actions, destinations, timeout, retries, fault) is checked.
func validateHTTPRoute(r *networking.HTTPRoute) error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	for i, m := range r.GetMatch() {
		if err := validateMatch(m); err != nil {
			add(fmt.Errorf(".match[%d]%s", i, err))
		}
	}
	if r.GetDelegate() != nil {
		add(errors.New(".delegate: delegate VirtualServices are not supported yet"))
		return errors.Join(errs...)
	}
	add(validateHTTPActions(r))
	if r.GetRedirect() == nil && r.GetDirectResponse() == nil {
		if len(r.GetRoute()) == 0 {
			add(errors.New(".route: at least one destination is required"))
		}
		for i, d := range r.GetRoute() {
			if err := checkHeaders(d.GetHeaders()); err != nil {
				add(fmt.Errorf(".route[%d].headers%s", i, err))
			}
		}
	}
	add(checkDestinations(r.GetRoute(), func(d *networking.HTTPRouteDestination) (*networking.Destination, int32) {
		return d.GetDestination(), d.GetWeight()
	}))
	if err := checkDuration(r.GetTimeout(), true); err != nil {
		add(fmt.Errorf(".timeout: %v", err))
	}
	if rp := r.GetRetries(); rp != nil {
		if rp.GetAttempts() < 0 {
			add(fmt.Errorf(".retries.attempts %d: must not be negative", rp.GetAttempts()))
		}
		if err := checkDuration(rp.GetPerTryTimeout(), false); err != nil {
			add(fmt.Errorf(".retries.perTryTimeout: %v", err))
		}
		for _, on := range strings.Split(rp.GetRetryOn(), ",") {
			if on = strings.TrimSpace(on); on != "" && !knownRetryOn(on) {
				add(fmt.Errorf(".retries.retryOn %q: unknown retry condition", on))
			}
		}
	}
	add(validateFault(r.GetFault()))
	return errors.Join(errs...)
}

// validateFault checks a route's fault injection.
func validateFault(f *networking.HTTPFaultInjection) error {
	if f != nil {
		if f.GetDelay() == nil && f.GetAbort() == nil {
			return errors.New(".fault: delay or abort is required")
		}
		if d := f.GetDelay(); d != nil {
			if d.GetFixedDelay() == nil {
				return errors.New(".fault.delay.fixedDelay: is required")
			}
			if err := checkDuration(d.GetFixedDelay(), false); err != nil {
				return fmt.Errorf(".fault.delay.fixedDelay: %v", err)
			}
			if p := d.GetPercentage(); p != nil && (p.GetValue() < 0 || p.GetValue() > 100) {
				return fmt.Errorf(".fault.delay.percentage.value %v: want 0-100", p.GetValue())
			}
			//lint:ignore SA1019 deprecated in Istio, still honoured by it (when percentage is unset)
			if p := d.GetPercent(); p < 0 || p > 100 {
				return fmt.Errorf(".fault.delay.percent %d: want 0-100", p)
			}
		}
		if a := f.GetAbort(); a != nil {
			switch e := a.GetErrorType().(type) {
			case *networking.HTTPFaultInjection_Abort_HttpStatus:
				if e.HttpStatus < 200 || e.HttpStatus > 599 {
					return fmt.Errorf(".fault.abort.httpStatus %d: want 200-599", e.HttpStatus)
				}
			case *networking.HTTPFaultInjection_Abort_GrpcStatus:
				var c codes.Code
				if err := c.UnmarshalJSON([]byte(strconv.Quote(e.GrpcStatus))); err != nil {
					return fmt.Errorf(".fault.abort.grpcStatus %q: not a gRPC status name", e.GrpcStatus)
				}
			default:
				return errors.New(".fault.abort: httpStatus or grpcStatus is required")
			}
			if p := a.GetPercentage(); p != nil && (p.GetValue() < 0 || p.GetValue() > 100) {
				return fmt.Errorf(".fault.abort.percentage.value %v: want 0-100", p.GetValue())
			}
		}
	}
	return nil
}

func validateMatch(m *networking.HTTPMatchRequest) error {
	if err := checkStringMatch(m.GetUri(), false); err != nil {
		return fmt.Errorf(".uri: %v", err)
	}
	for k, v := range m.GetHeaders() {
		if k == "" || strings.ToLower(k) != k {
			return fmt.Errorf(".headers[%q]: header names must be lowercase and not empty", k)
		}
		if err := checkValueMatch(v, true); err != nil {
			return fmt.Errorf(".headers[%q]: %v", k, err)
		}
	}
	for k, v := range m.GetWithoutHeaders() {
		if k == "" || strings.ToLower(k) != k {
			return fmt.Errorf(".withoutHeaders[%q]: header names must be lowercase and not empty", k)
		}
		if err := checkValueMatch(v, true); err != nil {
			return fmt.Errorf(".withoutHeaders[%q]: %v", k, err)
		}
	}
	for k, v := range m.GetQueryParams() {
		if k == "" {
			return errors.New(".queryParams: empty parameter name")
		}
		if err := checkValueMatch(v, true); err != nil {
			return fmt.Errorf(".queryParams[%q]: %v", k, err)
		}
	}
	for name, sm := range map[string]*networking.StringMatch{"method": m.GetMethod(), "authority": m.GetAuthority(), "scheme": m.GetScheme()} {
		if err := checkValueMatch(sm, false); err != nil {
			return fmt.Errorf(".%s: %v", name, err)
		}
	}
	if m.GetPort() > 65535 {
		return fmt.Errorf(".port %d: want 1-65535", m.GetPort())
	}
	return nil
}

// checkStringMatch: exactly one of exact, prefix, regex (an empty match
// is "present" for headers); a regex must compile as RE2.
func checkStringMatch(s *networking.StringMatch, emptyOK bool) error {
	if s == nil {
		return nil
	}
	switch t := s.GetMatchType().(type) {
	case nil:
		if !emptyOK {
			return errors.New("one of exact, prefix or regex is required")
		}
	case *networking.StringMatch_Regex:
		if t.Regex == "" {
			return errors.New("regex must not be empty")
		}
		if err := checkRegex(t.Regex); err != nil {
			return fmt.Errorf("regex %q: %v", t.Regex, err)
		}
	}
	return nil
}

// checkDuration: at least 1ms (Istio's ValidateDuration), when set.
func checkDuration(d *durationpb.Duration, allowZero bool) error {
	if d == nil {
		return nil
	}
	if err := d.CheckValid(); err != nil {
		return err
	}
	v := d.AsDuration()
	if allowZero && v == 0 {
		return nil
	}
	if v < time.Millisecond {
		return fmt.Errorf("%v: want at least 1ms", v)
	}
	return nil
}

// knownRetryOn: Envoy's HTTP and gRPC retry conditions, and numeric
// status codes, as Istio accepts them.
func knownRetryOn(s string) bool {
	switch s {
	case "5xx", "gateway-error", "reset", "reset-before-request", "connect-failure", "envoy-ratelimited",
		"retriable-4xx", "refused-stream", "retriable-status-codes", "retriable-headers", "http3-post-connect-failure":
		return true
	}
	if _, ok := GRPCRetryOn[s]; ok {
		return true
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(s) == 3
}

// GRPCRetryOn maps Envoy's gRPC retry conditions to gRPC status codes, the
// form gRPC's xDS retry policy uses.
var GRPCRetryOn = map[string]uint32{
	"cancelled":          1,
	"deadline-exceeded":  4,
	"internal":           13,
	"resource-exhausted": 8,
	"unavailable":        14,
}

// validateDestinationRule checks dr.
// Every problem is reported (joined), at most one per part checked.
func validateDestinationRule(dr *networking.DestinationRule) error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if dr.GetHost() == "" {
		add(errors.New("spec.host: is required"))
	} else if !validHost(dr.GetHost()) {
		add(fmt.Errorf("spec.host %q: not a valid host name", dr.GetHost()))
	}
	add(validateExportTo("spec.exportTo", dr.GetExportTo()))
	if dr.GetWorkloadSelector() != nil {
		add(errors.New("spec.workloadSelector: not supported (meshfed serves one translation to every client; applying the rule to all would widen it)"))
	}
	add(validatePolicy("spec.trafficPolicy", dr.GetTrafficPolicy()))
	seen := map[string]bool{}
	for i, s := range dr.GetSubsets() {
		p := fmt.Sprintf("spec.subsets[%d]", i)
		if !dns1123Label(s.GetName()) {
			add(fmt.Errorf("%s.name %q: want a DNS-1123 label", p, s.GetName()))
		} else if seen[s.GetName()] {
			add(fmt.Errorf("%s.name %q: duplicate subset name", p, s.GetName()))
		}
		seen[s.GetName()] = true
		for k := range s.GetLabels() {
			if k == "" {
				add(fmt.Errorf("%s.labels: empty label key", p))
			}
		}
		add(validatePolicy(p+".trafficPolicy", s.GetTrafficPolicy()))
	}
	return errors.Join(errs...)
}

// maxRingSize is grpc-go's upper bound on a ring hash size.
const maxRingSize = 8 * 1024 * 1024

// validatePolicy checks a traffic policy: every problem, joined, at most
// one per part checked.
func validatePolicy(path string, tp *networking.TrafficPolicy) error {
	if tp == nil {
		return nil
	}
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if lb := tp.GetLoadBalancer(); lb != nil {
		if ch := lb.GetConsistentHash(); ch != nil {
			switch k := ch.GetHashKey().(type) {
			case *networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
				if k.HttpHeaderName == "" {
					add(fmt.Errorf("%s.loadBalancer.consistentHash.httpHeaderName: must not be empty", path))
				}
			case nil:
				add(fmt.Errorf("%s.loadBalancer.consistentHash: a hash key is required", path))
			}
			// grpc-go refuses ring sizes above 8M (8388608) in CDS.
			if n := ch.GetRingHash().GetMinimumRingSize(); n > maxRingSize {
				add(fmt.Errorf("%s.loadBalancer.consistentHash: minimumRingSize %d: want at most %d", path, n, maxRingSize))
			}
		}
	}
	if cp := tp.GetConnectionPool(); cp != nil {
		if h := cp.GetHttp(); h != nil && h.GetHttp2MaxRequests() < 0 {
			add(fmt.Errorf("%s.connectionPool.http.http2MaxRequests %d: must not be negative", path, h.GetHttp2MaxRequests()))
		}
	}
	add(validatePolicyMore(path, tp))
	if od := tp.GetOutlierDetection(); od != nil {
		if err := checkDuration(od.GetInterval(), false); err != nil {
			add(fmt.Errorf("%s.outlierDetection.interval: %v", path, err))
		}
		if err := checkDuration(od.GetBaseEjectionTime(), false); err != nil {
			add(fmt.Errorf("%s.outlierDetection.baseEjectionTime: %v", path, err))
		}
		if p := od.GetMaxEjectionPercent(); p < 0 || p > 100 {
			add(fmt.Errorf("%s.outlierDetection.maxEjectionPercent %d: want 0-100", path, p))
		}
	}
	return errors.Join(errs...)
}
