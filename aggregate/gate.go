package aggregate

import (
	"fmt"
	"maps"
	"math"
	"math/bits"
	"net/netip"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/meshfed/meshfed/model"
)

// The rules below are those conforming xDS clients apply to what meshfed
// serves (docs/architecture.md §3.4, normalization gate). They live in the
// gate so that no registry can reopen them: an item that would make Envoy
// or grpc-go reject a whole resource (NACK) is quarantined alone, and its
// siblings are served.
//
//   - grpc-go (xdsresource.parseEndpoints, parseEDSRespProto) rejects a
//     ClusterLoadAssignment whose endpoint weights in one locality, or whose
//     locality weights at one priority, sum to more than 2^32-1; Envoy
//     documents the same bounds. The gate scales a service's endpoint
//     weights so that they sum to at most 2^32-1 (see scaleWeights): every
//     port's CLA then meets both bounds with locality weights equal to the
//     sums of their endpoints' weights, so proportions are kept exactly.
//   - Protobuf strings must be valid UTF-8: a label (served as endpoint
//     metadata) whose key or value is not is dropped alone; an endpoint
//     whose locality, cluster or network is not is dropped.
//   - An address no proxy can connect to (unspecified, "this network"
//     0.0.0.0/8, limited broadcast, multicast, link-local, or with an IPv6
//     zone) drops its endpoint.
//   - Sizes: a label key over maxLabelKey bytes or a value over
//     maxLabelValue bytes is dropped, and an endpoint keeps at most
//     maxLabels labels (the first by key), so that one endpoint cannot make
//     a resource exceed the 4 MB a gRPC client receives by default.

// Label bounds (bytes, count); see above.
const (
	maxLabelKey   = 256
	maxLabelValue = 4096
	maxLabels     = 64
)

// maxWeightSum is the largest sum of weights an xDS client accepts in one
// locality, and of locality weights at one priority.
const maxWeightSum = math.MaxUint32

// CategoryScaled: a service whose endpoint weights were scaled down
// proportionally because their sum exceeded 2^32-1. The service is served.
const CategoryScaled = "scaled"

// checkIP reports why an IP address cannot be an endpoint, or "".
func checkIP(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case ip.Zone() != "":
		return "has an IPv6 zone"
	case ip.IsUnspecified():
		return "is unspecified"
	case ip.Is4() && ip.As4()[0] == 0:
		return `is in 0.0.0.0/8 ("this network"), not a destination`
	case ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "is the broadcast address"
	case ip.IsMulticast():
		return "is a multicast address"
	case ip.IsLinkLocalUnicast():
		return "is link-local (no proxy can tell which interface to use)"
	}
	return ""
}

// checkStrings reports why an endpoint's served strings other than labels
// cannot be served, or "".
func checkStrings(e *model.Endpoint) string {
	for _, f := range []struct{ what, s string }{
		{"locality region", e.Locality.Region}, {"locality zone", e.Locality.Zone},
		{"locality subzone", e.Locality.SubZone}, {"source cluster", e.Source.Cluster},
		{"source network", e.Source.Network},
	} {
		if !utf8.ValidString(f.s) {
			return fmt.Sprintf("%s %q is not valid UTF-8", f.what, f.s)
		}
	}
	return ""
}

// checkLabels returns e's labels without those no client can be served,
// and a reason per dropped label key. The input map is not modified.
func checkLabels(labels map[string]string) (map[string]string, map[string]string) {
	var dropped map[string]string
	drop := func(k, reason string) {
		if dropped == nil {
			dropped = map[string]string{}
		}
		dropped[k] = reason
	}
	keep := 0
	for k, v := range labels {
		switch {
		case !utf8.ValidString(k):
			drop(k, "key is not valid UTF-8")
		case !utf8.ValidString(v):
			drop(k, fmt.Sprintf("value %q is not valid UTF-8", v))
		case len(k) > maxLabelKey:
			drop(k, fmt.Sprintf("key is %d bytes, over %d", len(k), maxLabelKey))
		case len(v) > maxLabelValue:
			drop(k, fmt.Sprintf("value is %d bytes, over %d", len(v), maxLabelValue))
		default:
			keep++
		}
	}
	if dropped == nil && keep <= maxLabels {
		return labels, nil
	}
	out := make(map[string]string, min(keep, maxLabels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if _, bad := dropped[k]; bad {
			continue
		}
		if len(out) == maxLabels {
			drop(k, fmt.Sprintf("the endpoint has more than %d labels", maxLabels))
			continue
		}
		out[k] = labels[k]
	}
	return out, dropped
}

// labelSubject names one label of an endpoint in a conflict.
func labelSubject(endpoint, key string) string {
	return endpoint + " label " + strconv.Quote(key)
}

// scaleWeights scales eps' weights (0 counts as 1) in place so that they
// sum to at most maxWeightSum, keeping their proportions: each becomes
// max(1, floor(w·T/sum)) with T = maxWeightSum − len(eps), whose total is
// at most T + len(eps). It returns the sum before scaling and whether
// anything changed. Callers own eps.
func scaleWeights(eps []model.Endpoint) (uint64, bool) {
	var sum uint64
	for i := range eps {
		sum += uint64(max(eps[i].Weight, 1))
	}
	if sum <= maxWeightSum {
		return sum, false
	}
	target := uint64(maxWeightSum) - uint64(len(eps))
	for i := range eps {
		hi, lo := bits.Mul64(uint64(max(eps[i].Weight, 1)), target)
		q, _ := bits.Div64(hi, lo, sum) // w·T/sum ≤ T: no overflow
		eps[i].Weight = uint32(max(q, 1))
	}
	return sum, true
}

// scaledConflict reports that host's weights were scaled.
func scaledConflict(registry, host string, sum uint64) Conflict {
	return newConflict(CategoryScaled, registry, host, "weights", fmt.Sprintf(
		"endpoint weights sum to %d, over the %d xDS clients accept; scaled down proportionally",
		sum, uint64(maxWeightSum)))
}

// Gate runs the normalization gate alone on one registry's full state, as
// Replace does (docs/architecture.md §3.4, normalization gate): it returns
// the services that would be served, sorted by hostname, and every item
// kept out or altered. It is pure; fuzz tests and tools use it to check a
// registry's output without running an Aggregator.
func Gate(o RegistryOptions, in []model.Service, rejected []model.Rejection) ([]*model.Service, []Conflict) {
	st := normalize(o.withDefaults(), in, rejected)
	out := make([]*model.Service, 0, len(st.services))
	for _, h := range slices.Sorted(maps.Keys(st.services)) {
		out = append(out, st.services[h])
	}
	sortConflicts(st.conflicts)
	return out, st.conflicts
}
