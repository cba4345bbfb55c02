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

// distributed applies the distribute rule to to the port CLA cla of
// cluster name (applyDistribute). A rule that leaves no endpoint although
// cla has some (every `to` key a typo, or all weights 0) would black-hole
// the cluster: it is not applied (ok false: serve cla, without locality
// weighting) and a note says why. Localities with endpoints that no key
// matches get no traffic, as Istio documents ("any locality not present
// will receive no traffic"); each is noted so a typo is visible.
func distributed(name string, cla *endpoint.ClusterLoadAssignment, to map[string]uint32) (out *endpoint.ClusterLoadAssignment, ok bool, notes []string) {
	out = applyDistribute(cla, to)
	if len(out.GetEndpoints()) == 0 && len(cla.GetEndpoints()) > 0 {
		return nil, false, []string{name + ": localityLbSetting.distribute leaves no endpoint (no `to` key with a weight matches a locality of its endpoints); served without it"}
	}
	var lost []string
	for _, l := range cla.GetEndpoints() {
		if len(l.GetLbEndpoints()) == 0 || slices.ContainsFunc(out.GetEndpoints(), func(k *endpoint.LocalityLbEndpoints) bool {
			return proto.Equal(k.GetLocality(), l.GetLocality()) && k.GetPriority() == l.GetPriority()
		}) {
			continue
		}
		loc := l.GetLocality().GetRegion() + "/" + l.GetLocality().GetZone() + "/" + l.GetLocality().GetSubZone()
		if !slices.Contains(lost, loc) {
			lost = append(lost, loc)
		}
	}
	if len(lost) > 0 {
		slices.Sort(lost)
		notes = append(notes, name+": localityLbSetting.distribute sends no traffic to locality "+strings.Join(lost, ", ")+" (matched by no `to` key with a weight)")
	}
	return out, true, notes
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

// distributeNotes are the notes of distributed for both client kinds
// (gRPC: only for an HTTP port, the only ones it is served).
func distributeNotes(notes []string, http bool) []TrafficNote {
	var out []TrafficNote
	for _, n := range notes {
		out = append(out, TrafficNote{Client: string(ClassEnvoy), Note: n})
		if http {
			out = append(out, TrafficNote{Client: string(ClassGRPC), Note: n})
		}
	}
	return out
}
