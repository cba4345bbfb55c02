package translate

import (
	"slices"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/xds/ads"
)

// Locality failover (docs/architecture.md §3.6, "Per-locality EDS"): a
// cluster whose policy has localityLbSetting failover and outlier
// detection (Istio's condition: without ejection traffic never fails
// over) serves each client the priorities of its own locality, as Istio's
// applyLocalityFailover computes them: 0 same region/zone/subzone, 1 same
// region and zone, 2 same region, then the failover target region of the
// client's region, then the rest; priorities renumbered without gaps.
// The EDS resource is a failoverCLA, an ads.Variants: the ADS server picks
// the variant of each stream's node locality, marshalled once per
// variant. A client without a locality gets the plain CLA.

// failoverOf returns the failover rules of a (merged) policy when they
// apply (outlier detection set, locality LB not disabled); nil otherwise.
func failoverOf(tp *networking.TrafficPolicy) []*networking.LocalityLoadBalancerSetting_Failover {
	ls := tp.GetLoadBalancer().GetLocalityLbSetting()
	if ls == nil || (ls.GetEnabled() != nil && !ls.GetEnabled().GetValue()) || tp.GetOutlierDetection() == nil {
		return nil
	}
	return ls.GetFailover()
}

// failoverCLA is a cluster's ClusterLoadAssignment whose priorities
// depend on the client's locality. Immutable.
type failoverCLA struct {
	*claResource
	failover []*networking.LocalityLoadBalancerSetting_Failover
}

var _ ads.Variants = (*failoverCLA)(nil)

// VariantKey reduces the node's locality to what changes the priorities:
// its region, zone and subzone as far as endpoints share them, and the
// region alone when a failover rule starts from it.
func (f *failoverCLA) VariantKey(n *core.Node) string {
	l := n.GetLocality()
	if l.GetRegion() == "" {
		return ""
	}
	level := 0 // how much of l some endpoint locality shares
	for _, e := range f.GetEndpoints() {
		el := e.GetLocality()
		switch {
		case el.GetRegion() != l.GetRegion():
		case el.GetZone() != l.GetZone():
			level = max(level, 1)
		case el.GetSubZone() != l.GetSubZone():
			level = max(level, 2)
		default:
			level = 3
		}
	}
	parts := []string{l.GetRegion(), l.GetZone(), l.GetSubZone()}[:level]
	if level == 0 {
		if !slices.ContainsFunc(f.failover, func(fo *networking.LocalityLoadBalancerSetting_Failover) bool { return fo.GetFrom() == l.GetRegion() }) {
			return "" // nothing shared and no rule: every endpoint is equal
		}
		parts = []string{l.GetRegion()}
	}
	// The key is a locality with "\x00" for the parts no endpoint shares.
	for len(parts) < 3 {
		parts = append(parts, "\x00")
	}
	return strings.Join(parts, "/")
}

// Variant returns the CLA with the priorities of the locality key names.
func (f *failoverCLA) Variant(key string) types.Resource {
	p := strings.Split(key, "/")
	l := &core.Locality{Region: p[0], Zone: p[1], SubZone: p[2]}
	return failoverPriorities(f.message(), l, f.failover)
}

// failoverPriorities is Istio's applyLocalityFailover on a copy of cla.
func failoverPriorities(cla *endpoint.ClusterLoadAssignment, l *core.Locality, failover []*networking.LocalityLoadBalancerSetting_Failover) *endpoint.ClusterLoadAssignment {
	out := proto.Clone(cla).(*endpoint.ClusterLoadAssignment)
	prio := make([]int, len(out.GetEndpoints()))
	for i, e := range out.GetEndpoints() {
		el := e.GetLocality()
		switch {
		case el.GetRegion() != l.GetRegion():
			prio[i] = 3
			for _, fo := range failover {
				if fo.GetFrom() == l.GetRegion() {
					if el.GetRegion() != fo.GetTo() {
						prio[i] = 4
					}
					break
				}
			}
		case el.GetZone() != l.GetZone():
			prio[i] = 2
		case el.GetSubZone() != l.GetSubZone():
			prio[i] = 1
		}
	}
	used := slices.Clone(prio)
	slices.Sort(used)
	used = slices.Compact(used)
	for i, e := range out.GetEndpoints() {
		e.Priority = uint32(slices.Index(used, prio[i]))
	}
	return out
}
