package ads

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// ProxyStatus is one xDS stream as /debug/syncz shows it.
type ProxyStatus struct {
	// ID is the node id the proxy sent.
	ID string `json:"id"`
	// Class is "envoy" or "grpc".
	Class string `json:"class"`
	// NodeType is "sidecar" or "router" for Istio-style Envoy node ids, ""
	// otherwise.
	NodeType string `json:"nodeType,omitempty"`
	// Stream is "sotw" or "delta".
	Stream string `json:"stream"`
	// StreamID numbers the stream within its kind (sotw, delta).
	StreamID  int64        `json:"streamId"`
	Connected time.Time    `json:"connected"`
	Types     []TypeStatus `json:"types"`
}

// TypeStatus is the state of one type URL on one stream.
type TypeStatus struct {
	TypeURL string `json:"typeUrl"`
	// SentVersion and SentNonce are those of the last response sent.
	SentVersion string `json:"sentVersion"`
	SentNonce   string `json:"sentNonce"`
	// AckedVersion and AckedNonce are those of the last response the proxy
	// accepted.
	AckedVersion string `json:"ackedVersion"`
	AckedNonce   string `json:"ackedNonce"`
	// Resources is how many resources the proxy's subscription currently
	// matches.
	Resources int `json:"resources"`
	// LastNack is the last rejection, kept after later ACKs.
	LastNack *Nack `json:"lastNack,omitempty"`
	// Oversized says what the response size protection did (respsize.go);
	// omitted when nothing.
	Oversized *OversizedStatus `json:"oversized,omitempty"`
	// HeldRestored: the restore hold holds this type (the client
	// reconnected holding configuration while the served state is
	// restored and unconfirmed); it is sent nothing until released.
	HeldRestored bool `json:"heldRestored,omitempty"`
}

// Nack is a rejected response.
type Nack struct {
	// Version is the version of the rejected response.
	Version string `json:"version"`
	Nonce   string `json:"nonce"`
	// Error is the proxy's error_detail message.
	Error string    `json:"error"`
	At    time.Time `json:"at"`
}

type streamKey struct {
	delta bool
	id    int64
}

type typeState struct {
	TypeStatus
	sub     *Subscription
	pending map[string]string // delta: nonce → system version, until (N)ACKed
	// since is Snapshot.Changed of the oldest update sent on this type
	// and not yet ACKed; zero when none.
	since time.Time
}

type streamState struct {
	key       streamKey
	connected time.Time

	mu       sync.Mutex // guards the fields below
	nodeID   string
	class    Class
	nodeType string
	node     *core.Node // the first node seen: what Variants resources read
	counted  bool       // in connectedProxies
	types    map[string]*typeState
}

// tracker records, per stream and type URL, what was sent, what was acked
// and the last NACK. Each stream's goroutine updates its own record under
// a short per-stream lock, so a NACK never blocks anything.
type tracker struct {
	log   *slog.Logger
	now   func() time.Time
	label func(typeURL string) string // metrics label of a type URL
	// changed returns Snapshot.Changed of the snapshot the store holds.
	changed func() time.Time

	mu      sync.Mutex // guards streams
	streams map[streamKey]*streamState
}

func newTracker(log *slog.Logger, changed func() time.Time) *tracker {
	return &tracker{log: log, now: time.Now, label: defaultLabel, changed: changed, streams: map[streamKey]*streamState{}}
}

// defaultLabel labels every type URL "other" (Config.Label unset).
func defaultLabel(string) string { return "other" }

// acked records an ACK of ts: the convergence of the update it carried.
// Called with s.mu held.
func (t *tracker) acked(ts *typeState) {
	if ts.since.IsZero() {
		return
	}
	convergenceSeconds.WithLabelValues(t.label(ts.TypeURL)).Observe(t.now().Sub(ts.since).Seconds())
	ts.since = time.Time{}
}

func (t *tracker) open(k streamKey) *streamState {
	s := &streamState{key: k, connected: t.now(), types: map[string]*typeState{}}
	t.mu.Lock()
	t.streams[k] = s
	t.mu.Unlock()
	return s
}

func (t *tracker) close(s *streamState) {
	t.mu.Lock()
	delete(t.streams, s.key)
	t.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.counted { // no request yet: never logged as connected
		t.log.Debug("xds stream closed", "stream", streamKind(s.key), "streamId", s.key.id)
		return
	}
	connectedProxies.WithLabelValues(string(s.class)).Dec()
	// At INFO with the keys of "xds proxy connected", plus how long it was.
	t.log.Info("xds proxy disconnected", "node", s.nodeID, "class", s.class, "stream", streamKind(s.key), "streamId", s.key.id,
		"duration", t.now().Sub(s.connected).Round(time.Millisecond))
}

// learn records the node of the stream's first request; a stream whose
// first request has none is counted and listed under a generated id
// ("anonymous-<stream>-<streamId>") until a request carries one.
func (t *tracker) learn(s *streamState, n *core.Node, class Class) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.node == nil {
		s.node = n
	}
	if s.counted {
		if n != nil {
			s.nodeID = n.GetId()
			s.nodeType = NodeType(s.nodeID)
			t.log.Info("xds proxy named itself", "node", s.nodeID, "stream", streamKind(s.key), "streamId", s.key.id)
		}
		return
	}
	if n != nil {
		s.nodeID = n.GetId()
	} else {
		s.nodeID = fmt.Sprintf("anonymous-%s-%d", streamKind(s.key), s.key.id)
	}
	s.class = class
	s.nodeType = NodeType(s.nodeID)
	s.counted = true
	connectedProxies.WithLabelValues(string(s.class)).Inc()
	t.log.Info("xds proxy connected", "node", s.nodeID, "class", s.class, "stream", streamKind(s.key), "streamId", s.key.id)
}

// typ returns the record of a type URL, created with its subscription.
func (t *tracker) typ(s *streamState, url string, sub *Subscription) *typeState {
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.types[url]
	if ts == nil {
		ts = &typeState{TypeStatus: TypeStatus{TypeURL: url}, sub: sub}
		s.types[url] = ts
	}
	return ts
}

// nack records a rejection; the detail is truncated to MaxNackDetail bytes
// (a client's error_detail is unbounded).
func (t *tracker) nack(s *streamState, ts *typeState, version, nonce string, detail string) {
	detail = truncate(detail, MaxNackDetail)
	ts.LastNack = &Nack{Version: version, Nonce: nonce, Error: detail, At: t.now()}
	nacksTotal.WithLabelValues(t.label(ts.TypeURL)).Inc()
	t.log.Warn("xds response rejected", "node", s.nodeID, "type", ts.TypeURL, "version", version, "nonce", nonce, "error", detail)
}

func streamKind(k streamKey) string {
	if k.delta {
		return "delta"
	}
	return "sotw"
}

// sotwRequest records the ACK or NACK a SotW request carries; requests
// with a stale nonce are ignored, as the server ignores them.
func (t *tracker) sotwRequest(s *streamState, ts *typeState, req *discovery.DiscoveryRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	nonce := req.GetResponseNonce()
	if ts.SentNonce != "" && nonce != ts.SentNonce {
		return
	}
	if nonce != "" {
		if d := req.GetErrorDetail(); d != nil {
			t.nack(s, ts, ts.SentVersion, nonce, d.GetMessage())
		} else {
			ts.AckedVersion, ts.AckedNonce = req.GetVersionInfo(), nonce
			t.acked(ts)
		}
	}
}

// deltaRequest records the ACK or NACK a delta request carries.
func (t *tracker) deltaRequest(s *streamState, ts *typeState, req *discovery.DeltaDiscoveryRequest) {
	nonce := req.GetResponseNonce()
	if nonce == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	version, known := ts.pending[nonce]
	if known {
		// Responses are answered in order; drop this one and older ones.
		n, _ := strconv.ParseInt(nonce, 10, 64)
		for p := range ts.pending {
			if m, err := strconv.ParseInt(p, 10, 64); err == nil && m <= n {
				delete(ts.pending, p)
			}
		}
	}
	if d := req.GetErrorDetail(); d != nil {
		t.nack(s, ts, version, nonce, d.GetMessage())
	} else if known {
		ts.AckedVersion, ts.AckedNonce = version, nonce
		t.acked(ts)
	}
}

// response records a response about to be sent; update says that a
// model change caused it (not a request), so its ACK ends a convergence.
// Changes seen before the stream connected do not count: the proxy's
// first sync is not a convergence.
func (t *tracker) response(s *streamState, ts *typeState, version, nonce string, update bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ts.SentVersion, ts.SentNonce = version, nonce
	responsesTotal.WithLabelValues(t.label(ts.TypeURL)).Inc()
	if update && ts.since.IsZero() && t.changed != nil {
		if c := t.changed(); !c.IsZero() && c.After(s.connected) {
			ts.since = c
		}
	}
	if !s.key.delta {
		return
	}
	const maxPending = 64 // a client that never answers cannot grow this
	if ts.pending == nil {
		ts.pending = map[string]string{}
	} else if len(ts.pending) >= maxPending {
		clear(ts.pending)
	}
	ts.pending[nonce] = version
}

// snapshot returns every stream that has sent its node, sorted by id and
// stream, with resource counts from count.
func (t *tracker) snapshot(count func(*Subscription) int) []ProxyStatus {
	t.mu.Lock()
	streams := make([]*streamState, 0, len(t.streams))
	for _, s := range t.streams {
		streams = append(streams, s)
	}
	t.mu.Unlock()
	out := make([]ProxyStatus, 0, len(streams))
	for _, s := range streams {
		s.mu.Lock()
		if !s.counted {
			s.mu.Unlock()
			continue
		}
		p := ProxyStatus{ID: s.nodeID, Class: string(s.class), NodeType: s.nodeType,
			Stream: streamKind(s.key), StreamID: s.key.id, Connected: s.connected}
		var subs []*Subscription
		for _, ts := range s.types {
			st := ts.TypeStatus
			if ts.LastNack != nil {
				n := *ts.LastNack
				st.LastNack = &n
			}
			if ts.Oversized != nil {
				o := *ts.Oversized
				o.Rejected = append([]OversizedResource(nil), o.Rejected...)
				st.Oversized = &o
			}
			p.Types = append(p.Types, st)
			subs = append(subs, ts.sub)
		}
		s.mu.Unlock()
		for i, sub := range subs {
			if sub != nil {
				p.Types[i].Resources = count(sub)
			}
		}
		slices.SortFunc(p.Types, func(a, b TypeStatus) int { return cmp.Compare(a.TypeURL, b.TypeURL) })
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b ProxyStatus) int {
		return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.StreamID, b.StreamID))
	})
	return out
}

// served returns the class and the subscriptions per type URL of the
// newest stream of proxyID.
func (t *tracker) served(proxyID string) (Class, *core.Node, map[string]*Subscription, bool) {
	t.mu.Lock()
	streams := make([]*streamState, 0, len(t.streams))
	for _, s := range t.streams {
		streams = append(streams, s)
	}
	t.mu.Unlock()
	var best *streamState
	for _, s := range streams {
		s.mu.Lock()
		if s.counted && s.nodeID == proxyID && (best == nil || s.connected.After(best.connected)) {
			best = s
		}
		s.mu.Unlock()
	}
	if best == nil {
		return "", nil, nil, false
	}
	best.mu.Lock()
	defer best.mu.Unlock()
	out := map[string]*Subscription{}
	for url, ts := range best.types {
		if ts.sub != nil {
			out[url] = ts.sub
		}
	}
	return best.class, best.node, out, true
}

// Sync states of one type on one stream, as `meshfed status` and the
// status page show them.
const (
	StateSynced  = "SYNCED"   // the proxy ACKed the last response
	StateNotSent = "NOT SENT" // subscribed, nothing sent yet
	StateNacked  = "NACKED"   // the proxy rejected the last response
	StateStale   = "STALE"    // the last response is not answered yet
)

// SyncState classifies t: NACKED when the last response sent was
// rejected, STALE while it is unanswered, NOT SENT before the first,
// SYNCED once ACKed.
func SyncState(t TypeStatus) string {
	switch {
	case t.SentNonce == "":
		return StateNotSent
	case t.LastNack != nil && t.LastNack.Nonce == t.SentNonce:
		return StateNacked
	case t.AckedNonce != t.SentNonce:
		return StateStale
	}
	return StateSynced
}

// NodeType returns the proxy type of an Istio-style node id
// (<type>~<ip>~<id>~<domain>): "sidecar" or "router"; "" when the id has
// another form.
func NodeType(id string) string {
	parts := strings.Split(id, "~")
	if len(parts) != 4 {
		return ""
	}
	switch parts[0] {
	case "sidecar", "router":
		return parts[0]
	}
	return ""
}
