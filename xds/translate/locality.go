package translate

import (
	"math"
	"slices"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// Locality-weighted load balancing from a DestinationRule's
// localityLbSetting.distribute (docs/architecture.md §3.6). meshfed serves
// one ClusterLoadAssignment per cluster to every client, so only
// distribute rules whose `from` is "*" (every client) are translated; the
// config source refuses the others, which depend on each client's
// locality (failover, which does too, is served per client: failover.go). Weights follow Istio's applyLocalityWeights: each
// `to` key takes its share, divided among the localities it matches in
// proportion to their own weights; localities no key matches are left
// out. grpc-go balances by locality weight on its own; Envoy needs
// locality_weighted_lb_config on the cluster, which applyDistribute's
// caller sets.

// distributeOf returns the distribute rule of a (merged) policy that
// applies to every client, nil when there is none.
func distributeOf(tp *networking.TrafficPolicy) map[string]uint32 {
	ls := tp.GetLoadBalancer().GetLocalityLbSetting()
	if ls == nil || (ls.GetEnabled() != nil && !ls.GetEnabled().GetValue()) {
		return nil
	}
	for _, d := range ls.GetDistribute() {
		if d.GetFrom() == "*" {
			return d.GetTo()
		}
	}
	return nil
}

// applyDistribute returns a copy of cla with the locality weights of to.
func applyDistribute(cla *endpoint.ClusterLoadAssignment, to map[string]uint32) *endpoint.ClusterLoadAssignment {
	out := proto.Clone(cla).(*endpoint.ClusterLoadAssignment)
	matched := make([]bool, len(out.GetEndpoints()))
	weights := make([]uint32, len(out.GetEndpoints()))
	keys := make([]string, 0, len(to))
	for k := range to {
		keys = append(keys, k)
	}
	slices.Sort(keys) // a locality takes the first key that matches it
	for _, key := range keys {
		var idx []int
		var total uint64
		for i, l := range out.GetEndpoints() {
			if !matched[i] && localityMatch(l.GetLocality(), key) {
				matched[i] = true
				idx = append(idx, i)
				total += uint64(max(1, l.GetLoadBalancingWeight().GetValue()))
			}
		}
		for _, i := range idx {
			own := uint64(max(1, out.GetEndpoints()[i].GetLoadBalancingWeight().GetValue()))
			weights[i] = uint32(math.Ceil(float64(own*uint64(to[key])) / float64(total)))
		}
	}
	kept := out.Endpoints[:0]
	for i, l := range out.GetEndpoints() {
		if !matched[i] || weights[i] == 0 {
			continue
		}
		l.LoadBalancingWeight = wrapperspb.UInt32(weights[i])
		kept = append(kept, l)
	}
	out.Endpoints = kept
	return out
}

// localityMatch: Istio's locality pattern region/zone/subzone, each part
// a name or "*" (a trailing "*" matches the rest).
func localityMatch(l *core.Locality, pattern string) bool {
	parts := strings.Split(pattern, "/")
	have := []string{l.GetRegion(), l.GetZone(), l.GetSubZone()}
	for i, p := range parts {
		if p == "*" {
			if i == len(parts)-1 {
				return true
			}
			continue
		}
		if i >= len(have) || have[i] != p {
			return false
		}
	}
	return true
}

// localityWeighted makes an Envoy cluster use the locality weights of its
// endpoints.
func localityWeighted(c *cluster.Cluster) {
	if c.CommonLbConfig == nil {
		c.CommonLbConfig = &cluster.Cluster_CommonLbConfig{}
	}
	c.CommonLbConfig.LocalityConfigSpecifier = &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
		LocalityWeightedLbConfig: &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig{},
	}
}
