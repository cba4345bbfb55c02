package xds

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
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
	sub     stream.Subscription
	hasSub  bool
	pending map[string]string // delta: nonce → system version, until (N)ACKed
}

type streamState struct {
	key       streamKey
	nodeID    string
	class     Class
	nodeType  string
	connected time.Time
	counted   bool // in connectedProxies
	types     map[string]*typeState
}

// tracker records, per stream and type URL, what was sent, what was acked
// and the last NACK. It implements go-control-plane's server callbacks;
// every method only updates memory under a short lock, so a NACK never
// blocks anything.
type tracker struct {
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	streams map[streamKey]*streamState
}

func newTracker(log *slog.Logger) *tracker {
	return &tracker{log: log, now: time.Now, streams: map[streamKey]*streamState{}}
}

func (t *tracker) open(k streamKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.streams[k] = &streamState{key: k, connected: t.now(), types: map[string]*typeState{}}
}

func (t *tracker) close(k streamKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.streams[k]
	if s == nil {
		return
	}
	if s.counted {
		connectedProxies.WithLabelValues(string(s.class)).Dec()
	}
	delete(t.streams, k)
	t.log.Debug("xds stream closed", "node", s.nodeID, "stream", streamKind(k), "streamId", k.id)
}

// stream returns the state of k, learning the node from n. Callers hold t.mu.
func (t *tracker) stream(k streamKey, n *core.Node) *streamState {
	s := t.streams[k]
	if s == nil {
		s = &streamState{key: k, connected: t.now(), types: map[string]*typeState{}}
		t.streams[k] = s
	}
	if n != nil && !s.counted {
		s.nodeID = n.GetId()
		s.class = ClassifyNode(n)
		s.nodeType = NodeType(s.nodeID)
		s.counted = true
		connectedProxies.WithLabelValues(string(s.class)).Inc()
		t.log.Info("xds proxy connected", "node", s.nodeID, "class", s.class, "stream", streamKind(k), "streamId", k.id)
	}
	return s
}

func (s *streamState) typ(url string) *typeState {
	ts := s.types[url]
	if ts == nil {
		ts = &typeState{TypeStatus: TypeStatus{TypeURL: url}, pending: map[string]string{}}
		s.types[url] = ts
	}
	return ts
}

func (t *tracker) nack(s *streamState, ts *typeState, version, nonce string, detail string) {
	ts.LastNack = &Nack{Version: version, Nonce: nonce, Error: detail, At: t.now()}
	nacksTotal.WithLabelValues(shortType(ts.TypeURL)).Inc()
	t.log.Warn("xds response rejected", "node", s.nodeID, "type", ts.TypeURL, "version", version, "nonce", nonce, "error", detail)
}

func streamKind(k streamKey) string {
	if k.delta {
		return "delta"
	}
	return "sotw"
}

// OnStreamOpen implements sotw.Callbacks.
func (t *tracker) OnStreamOpen(_ context.Context, id int64, _ string) error {
	t.open(streamKey{id: id})
	return nil
}

// OnStreamClosed implements sotw.Callbacks.
func (t *tracker) OnStreamClosed(id int64, _ *core.Node) { t.close(streamKey{id: id}) }

// OnStreamRequest implements sotw.Callbacks.
func (t *tracker) OnStreamRequest(id int64, req *discovery.DiscoveryRequest) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.stream(streamKey{id: id}, req.GetNode())
	ts := s.typ(req.GetTypeUrl())
	nonce := req.GetResponseNonce()
	if ts.SentNonce != "" && nonce != ts.SentNonce {
		return nil // stale: the server ignores it too
	}
	if nonce != "" {
		if d := req.GetErrorDetail(); d != nil {
			t.nack(s, ts, ts.SentVersion, nonce, d.GetMessage())
		} else {
			ts.AckedVersion, ts.AckedNonce = req.GetVersionInfo(), nonce
		}
	}
	if !ts.hasSub {
		ts.sub = stream.NewSotwSubscription(req.GetResourceNames(), true)
		ts.hasSub = true
	} else {
		ts.sub.SetResourceSubscription(req.GetResourceNames())
	}
	return nil
}

// OnStreamResponse implements sotw.Callbacks.
func (t *tracker) OnStreamResponse(_ context.Context, id int64, req *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.stream(streamKey{id: id}, nil).typ(req.GetTypeUrl())
	ts.SentVersion, ts.SentNonce = resp.GetVersionInfo(), resp.GetNonce()
}

// OnDeltaStreamOpen implements delta.Callbacks.
func (t *tracker) OnDeltaStreamOpen(_ context.Context, id int64, _ string) error {
	t.open(streamKey{delta: true, id: id})
	return nil
}

// OnDeltaStreamClosed implements delta.Callbacks.
func (t *tracker) OnDeltaStreamClosed(id int64, _ *core.Node) {
	t.close(streamKey{delta: true, id: id})
}

// OnStreamDeltaRequest implements delta.Callbacks. go-control-plane calls
// it before filling in the node of follow-up requests; the stream keeps the
// node of its first request.
func (t *tracker) OnStreamDeltaRequest(id int64, req *discovery.DeltaDiscoveryRequest) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.stream(streamKey{delta: true, id: id}, req.GetNode())
	ts := s.typ(req.GetTypeUrl())
	if nonce := req.GetResponseNonce(); nonce != "" {
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
		}
	}
	if !ts.hasSub {
		ts.sub = stream.NewDeltaSubscription(req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe(), nil, true)
		ts.hasSub = true
	} else {
		ts.sub.UpdateResourceSubscriptions(req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe())
	}
	return nil
}

// OnStreamDeltaResponse implements delta.Callbacks.
func (t *tracker) OnStreamDeltaResponse(id int64, req *discovery.DeltaDiscoveryRequest, resp *discovery.DeltaDiscoveryResponse) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.stream(streamKey{delta: true, id: id}, nil).typ(req.GetTypeUrl())
	ts.SentVersion, ts.SentNonce = resp.GetSystemVersionInfo(), resp.GetNonce()
	const maxPending = 64 // a client that never answers cannot grow this
	if len(ts.pending) >= maxPending {
		clear(ts.pending)
	}
	ts.pending[resp.GetNonce()] = resp.GetSystemVersionInfo()
}

// OnFetchRequest implements rest.Callbacks; REST is not served.
func (t *tracker) OnFetchRequest(context.Context, *discovery.DiscoveryRequest) error { return nil }

// OnFetchResponse implements rest.Callbacks.
func (t *tracker) OnFetchResponse(*discovery.DiscoveryRequest, *discovery.DiscoveryResponse) {}

// matching returns the names of current that the subscription matches, sorted.
func matching(sub stream.Subscription, current map[string]types.Resource) []string {
	var names []string
	if sub.IsWildcard() {
		for n := range current {
			names = append(names, n)
		}
	} else {
		for n := range sub.SubscribedResources() {
			if _, ok := current[n]; ok {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	return names
}

// snapshot returns every stream that has sent its node, sorted by id and
// stream, with resource counts taken from resources.
func (t *tracker) snapshot(resources func(Kind) map[string]types.Resource) []ProxyStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]ProxyStatus, 0, len(t.streams))
	for _, s := range t.streams {
		if !s.counted {
			continue
		}
		p := ProxyStatus{ID: s.nodeID, Class: string(s.class), NodeType: s.nodeType,
			Stream: streamKind(s.key), StreamID: s.key.id, Connected: s.connected}
		for _, ts := range s.types {
			st := ts.TypeStatus
			if ts.LastNack != nil {
				n := *ts.LastNack
				st.LastNack = &n
			}
			if ts.hasSub {
				st.Resources = len(matching(ts.sub, resources(KindOf(s.class, ts.TypeURL))))
			}
			p.Types = append(p.Types, st)
		}
		slices.SortFunc(p.Types, func(a, b TypeStatus) int { return cmp.Compare(a.TypeURL, b.TypeURL) })
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b ProxyStatus) int {
		return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.StreamID, b.StreamID))
	})
	return out
}

// served returns, for the newest stream of proxyID, the resource names it
// is served per type URL.
func (t *tracker) served(proxyID string, resources func(Kind) map[string]types.Resource) (Class, map[string][]string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var best *streamState
	for _, s := range t.streams {
		if s.counted && s.nodeID == proxyID && (best == nil || s.connected.After(best.connected)) {
			best = s
		}
	}
	if best == nil {
		return "", nil, false
	}
	out := map[string][]string{}
	for url, ts := range best.types {
		if ts.hasSub {
			out[url] = matching(ts.sub, resources(KindOf(best.class, url)))
		}
	}
	return best.class, out, true
}
