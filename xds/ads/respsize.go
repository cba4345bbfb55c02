package ads

// Response size protection (docs/architecture.md §3.5, "Response size"; docs/xds.md "Response size").
//
// gRPC's client libraries refuse a message above their receive limit,
// 4 MiB by default (grpc-go's defaultClientMaxReceiveMessageSize; its xDS
// client does not raise it): the ADS stream ends with RESOURCE_EXHAUSTED,
// the client reconnects, is sent the same response and fails again, and
// meanwhile none of its resources update. Envoy sets no limit by default,
// and istiod's own clients (pilot-agent, its MCP client) raise theirs to
// 2 GiB; istiod itself never splits a response. meshfed therefore keeps
// what it sends to a client known to have the gRPC default within
// Limits.MaxResponseBytes:
//
//   - a response of changes (delta, and SotW EDS/RDS, whose responses need
//     not carry every resource) is cut at the limit; the resources left out
//     stay pending and follow in the next response, after the client's
//     ACK ("split");
//   - in such a response, a single resource larger than the limit is not
//     sent: the client keeps the version it has, if any, rather than losing
//     the stream ("rejected"; logged once per name and version);
//   - a SotW LDS/CDS/MCP response must carry the whole state and cannot be
//     cut: a resource left out of it would be deleted by the client, so
//     nothing is ever left out, not even a resource larger than the limit
//     on its own. Above the limit the response is sent whole and counted
//     ("sent"), with a warning: the client may refuse it and retry, but it
//     never loses a listener or cluster it had.
//
// Every case counts in meshfed_xds_oversized_total{type,action} and shows
// on /debug/syncz under the type's "oversized". Other clients (Envoy,
// istiod, anything not saying it is a gRPC library) are sent everything;
// a response above the limit to one of them counts as "sent" too, so the
// metric shows what a gRPC client would have refused.

import (
	"strings"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"
)

// DefaultMaxResponseBytes is the gRPC libraries' default receive limit.
const DefaultMaxResponseBytes = 4 << 20

// maxRejectedShown bounds the names kept in OversizedStatus.Rejected.
const maxRejectedShown = 10

// Actions of meshfed_xds_oversized_total.
const (
	oversizedSplit    = "split"
	oversizedRejected = "rejected"
	oversizedSent     = "sent"
)

// OversizedStatus is what the response size protection did on one type of
// one stream, as /debug/syncz shows it (omitted when nothing happened).
type OversizedStatus struct {
	// Limit is the limit applied to this client; 0 when it gets everything
	// (not a gRPC library).
	Limit int `json:"limit"`
	// Split counts responses cut at the limit (the rest followed later).
	Split int `json:"split,omitempty"`
	// Sent counts responses above the limit sent whole.
	Sent int `json:"sent,omitempty"`
	// Rejected lists the last resources (at most 10) not sent because each
	// alone is larger than the limit, with their size.
	Rejected []OversizedResource `json:"rejected,omitempty"`
	// LastBytes and At are the size and time of the last response above
	// the limit, or of the last resource rejected.
	LastBytes int       `json:"lastBytes"`
	At        time.Time `json:"at"`
}

// OversizedResource is a resource not sent for its size.
type OversizedResource struct {
	Name  string `json:"name"`
	Bytes int    `json:"bytes"`
}

// sizeLimited reports whether the client of node is a gRPC library, which
// refuses messages above DefaultMaxResponseBytes unless its application
// raised the limit: user agent "gRPC Go", "gRPC Java", "gRPC C-core"..., or
// an Istio proxyless client (metadata GENERATOR=grpc).
func sizeLimited(n *core.Node) bool {
	if v, ok := n.GetMetadata().GetFields()["GENERATOR"]; ok && strings.EqualFold(v.GetStringValue(), "grpc") {
		return true
	}
	return strings.HasPrefix(strings.ToLower(n.GetUserAgentName()), "grpc")
}

// sotwResourceSize is the bytes a resource adds to a DiscoveryResponse.
func sotwResourceSize(a *anypb.Any) int {
	return protowire.SizeTag(fSotwResources) + protowire.SizeBytes(anySize(a))
}

// deltaResourceSize is the bytes a resource adds to a
// DeltaDiscoveryResponse.
func deltaResourceSize(name, version string, a *anypb.Any) int {
	inner := sizeStr(fResName, name) + sizeStr(fResVersion, version) +
		protowire.SizeTag(fResResource) + protowire.SizeBytes(anySize(a))
	return protowire.SizeTag(fDeltaResources) + protowire.SizeBytes(inner)
}

// responseOverhead bounds the bytes of a response besides its resources:
// version, type URL, nonce and removed names.
func responseOverhead(typeURL, version string, removed []string) int {
	n := 64 + len(typeURL) + len(version)
	for _, r := range removed {
		n += protowire.SizeTag(fDeltaRemoved) + protowire.SizeBytes(len(r))
	}
	return n
}

// fit is the plan for one response's resources, by index.
type fit struct {
	send     []int // sent now, in order
	deferred []int // sent in a later response
	rejected []int // larger than the limit alone: not sent
	bytes    int   // size of the response sent (overhead included)
}

// fitResponse plans a response of resources of the given sizes, in
// order, within limit (> 0) bytes with overhead. When splittable, a
// resource that alone does not fit is rejected and the resources after the
// first one that no longer fits are deferred; a splittable response with
// anything to send always sends its first resource that fits alone. When
// not splittable (a full-state response, where a resource left out means
// deleted), every resource is sent, whatever the sizes.
func fitResponse(sizes []int, overhead, limit int, splittable bool) fit {
	f := fit{bytes: overhead}
	full := false
	for i, s := range sizes {
		switch {
		case splittable && overhead+s > limit:
			f.rejected = append(f.rejected, i)
		case full || splittable && len(f.send) > 0 && f.bytes+s > limit:
			full = true
			f.deferred = append(f.deferred, i)
		default:
			f.send = append(f.send, i)
			f.bytes += s
		}
	}
	return f
}

// limitResponse applies the response size protection to one response of
// ts (see the file comment): sizes are its resources' sizes, names their
// names and versions their versions. It returns the indexes to send now
// (nil: all), marks the deferred names dirty again, and counts, logs and
// records what it did. Called from the stream's goroutine (st.serve held).
func (a *ads) limitResponse(st *stream, ts *typeSub, names, versions []string, sizes []int, overhead int, splittable bool) []int {
	limit := a.limits.MaxResponseBytes
	if !st.sizeLimited {
		total := overhead
		for _, s := range sizes {
			total += s
		}
		if total > limit {
			a.oversized(st, ts, oversizedSent, total, 0, nil)
		}
		return nil
	}
	f := fitResponse(sizes, overhead, limit, splittable)
	if f.bytes > limit { // only when not splittable
		a.oversized(st, ts, oversizedSent, f.bytes, limit, nil)
		if !ts.warnedSent {
			ts.warnedSent = true
			a.tracker.log.Warn("xds response above the client's receive limit sent whole: this type must carry its full state; the client may refuse it",
				"node", st.status.id(), "type", ts.typeURL, "bytes", f.bytes, "limit", limit)
		}
	}
	if len(f.deferred) == 0 && len(f.rejected) == 0 {
		return nil
	}
	for _, i := range f.rejected {
		a.oversized(st, ts, oversizedRejected, sizes[i], limit, &OversizedResource{Name: names[i], Bytes: sizes[i]})
		if ts.rejectedLogged == nil {
			ts.rejectedLogged = map[string]string{}
		}
		if ts.rejectedLogged[names[i]] != versions[i] {
			ts.rejectedLogged[names[i]] = versions[i]
			a.tracker.log.Warn("xds resource not sent: larger than the client's receive limit on its own",
				"node", st.status.id(), "type", ts.typeURL, "name", names[i], "bytes", sizes[i], "limit", limit)
		}
	}
	if len(f.deferred) > 0 {
		a.oversized(st, ts, oversizedSplit, f.bytes, limit, nil)
		a.store.mu.RLock()
		for _, i := range f.deferred {
			ts.sub.addDirty(names[i])
		}
		a.store.mu.RUnlock()
	}
	if f.send == nil {
		f.send = []int{}
	}
	return f.send
}

// id is the stream's node id.
func (s *streamState) id() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nodeID
}

// oversized counts one event of the protection and records it for
// /debug/syncz.
func (a *ads) oversized(st *stream, ts *typeSub, action string, bytes, limit int, r *OversizedResource) {
	oversizedTotal.WithLabelValues(a.tracker.label(ts.typeURL), action).Inc()
	s, rec := st.status, ts.status
	s.mu.Lock()
	defer s.mu.Unlock()
	o := rec.Oversized
	if o == nil {
		o = &OversizedStatus{}
		rec.Oversized = o
	}
	o.Limit, o.LastBytes, o.At = limit, bytes, a.tracker.now()
	switch action {
	case oversizedSplit:
		o.Split++
	case oversizedSent:
		o.Sent++
	case oversizedRejected:
		o.Rejected = append(o.Rejected, *r)
		if n := len(o.Rejected); n > maxRejectedShown {
			o.Rejected = append(o.Rejected[:0:0], o.Rejected[n-maxRejectedShown:]...)
		}
	}
}

// pick returns the elements of s at the indexes keep, in order.
func pick[T any](s []T, keep []int) []T {
	out := make([]T, len(keep))
	for i, k := range keep {
		out[i] = s[k]
	}
	return out
}
