package translate

import (
	"slices"
	"strconv"
	"strings"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previoushosts "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// Retry policies follow Istio's (pilot/pkg/networking/core/route/retry,
// ConvertPolicy; docs/architecture.md §3.6): an HTTP route without
// `retries` gets Istio's default policy — 2 retries on defaultRetryOn
// (503 the retriable status code), avoiding the hosts already tried
// unless the route hashes to a host (consistent hashing must stay on its
// host) — and so does the default route of a service without a
// VirtualService; `attempts: 0` turns retries off. istiod serves
// proxyless gRPC the same route translation, so gRPC routes get the
// default too, as the two fields grpc-go reads: retryOn (of which it
// understands cancelled, deadline-exceeded, internal,
// resource-exhausted and unavailable, so Istio's default retries
// UNAVAILABLE and CANCELLED) and num_retries. meshfed has no mesh
// config: Istio's meshConfig.defaultHttpRetryPolicy has no counterpart.

// defaultRetryOn is Istio's retryOn for the default policy and when a
// VirtualService sets attempts without it.
const defaultRetryOn = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"

// defaultRetries is Istio's default number of retries.
const defaultRetries = 2

// The default policies are shared by every route that uses them and
// never modified.
var (
	envoyDefaultRetry       = newEnvoyRetry(defaultRetries, true)
	envoyDefaultRetryHashed = newEnvoyRetry(defaultRetries, false)
	grpcDefaultRetry        = &route.RetryPolicy{RetryOn: defaultRetryOn, NumRetries: wrapperspb.UInt32(defaultRetries)}
)

// newEnvoyRetry is Istio's default Envoy policy with n retries, with the
// previous-hosts predicate when avoidHosts.
func newEnvoyRetry(n uint32, avoidHosts bool) *route.RetryPolicy {
	out := &route.RetryPolicy{
		RetryOn:                       defaultRetryOn,
		NumRetries:                    wrapperspb.UInt32(n),
		RetriableStatusCodes:          []uint32{503},
		HostSelectionRetryMaxAttempts: 5,
	}
	if avoidHosts {
		out.RetryHostPredicate = []*route.RetryPolicy_RetryHostPredicate{{
			Name:       "envoy.retry_host_predicates.previous_hosts",
			ConfigType: &route.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: mustAny(&previoushosts.PreviousHostsPredicate{})},
		}}
	}
	return out
}

// envoyRetry is Istio's Envoy retry policy of a route with rp (nil: the
// default); hashed tells that the route carries a hash policy. retryOn
// defaults to Istio's list and numeric entries become retriable status
// codes.
func envoyRetry(rp *networking.HTTPRetry, hashed bool) *route.RetryPolicy {
	if rp == nil {
		if hashed {
			return envoyDefaultRetryHashed
		}
		return envoyDefaultRetry
	}
	if rp.GetAttempts() <= 0 {
		return nil
	}
	out := newEnvoyRetry(uint32(rp.GetAttempts()), !hashed)
	if on := rp.GetRetryOn(); on != "" {
		var conds []string
		var codes []uint32
		for _, c := range strings.Split(on, ",") {
			c = strings.TrimSpace(c)
			if n, err := strconv.ParseUint(c, 10, 32); err == nil {
				codes = append(codes, uint32(n))
			} else if c != "" {
				conds = append(conds, c)
			}
		}
		if len(codes) > 0 && !slices.Contains(conds, "retriable-status-codes") {
			conds = append(conds, "retriable-status-codes")
		}
		out.RetryOn, out.RetriableStatusCodes = strings.Join(conds, ","), codes
	}
	if pt := rp.GetPerTryTimeout(); pt != nil {
		out.PerTryTimeout = durationpb.New(pt.AsDuration())
	}
	return out
}

// grpcRetry is the gRPC retry policy of a route with rp (nil: the
// default): retryOn and num_retries, and perTryTimeout as given.
func grpcRetry(rp *networking.HTTPRetry) *route.RetryPolicy {
	if rp == nil {
		return grpcDefaultRetry
	}
	if rp.GetAttempts() <= 0 {
		return nil
	}
	on := rp.GetRetryOn()
	if on == "" {
		on = defaultRetryOn
	}
	policy := &route.RetryPolicy{RetryOn: on, NumRetries: wrapperspb.UInt32(uint32(rp.GetAttempts()))}
	if pt := rp.GetPerTryTimeout(); pt != nil {
		policy.PerTryTimeout = durationpb.New(pt.AsDuration())
	}
	return policy
}
