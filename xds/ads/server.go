package ads

import (
	"context"
	"log/slog"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/grpc"
)

// Config configures a Server.
type Config struct {
	// Collections are the collections the server holds; a stream sends
	// the types an update changed in this order.
	Collections []Collection
	// Classify returns the class of a stream from the node of its first
	// request (nil when it has none); nil makes every stream class "".
	Classify func(*core.Node) Class
	// Label returns the metrics label of a type URL; nil labels every
	// type "other".
	Label func(typeURL string) string
	// Changed returns when the change behind the resources the server
	// holds happened (zero when unknown); convergence is measured from
	// it to each proxy's ACK.
	Changed func() time.Time
	// Now is the clock of the status records; nil is time.Now.
	Now func() time.Time
	// ViewOf names the view (views.go) a stream reads, from the node of
	// its first request (nil when it has none) and its class; "" reads
	// every collection unscoped. It is called once per stream, before the
	// stream subscribes to anything, on the stream's goroutine; it may
	// create the view (ApplyViews) before it returns. nil: no views.
	ViewOf func(*core.Node, Class) string
	// Callbacks are called by the stream loop.
	Callbacks Callbacks
	// Limits bound each stream; zero fields take the defaults.
	Limits Limits
	// Logger receives connection and NACK events; nil discards them.
	Logger *slog.Logger
	// RestoreHold bounds the restore hold (hold.go, SetRestored): how
	// long a client that reconnects holding configuration is sent
	// nothing while the state is restored; 0 turns the hold off.
	RestoreHold time.Duration
}

// Callbacks let the owner of the resources react to the protocol, as
// go-control-plane's server Callbacks do.
type Callbacks struct {
	// OnFirstRequest is called when a stream first asks for a type URL,
	// on the stream's goroutine, before its subscription is indexed and
	// answered: what it Applies is in the first response.
	OnFirstRequest func(typeURL string)
}

// Server serves the collections it holds over ADS. Every method is safe
// for concurrent use.
type Server struct {
	ads    *ads
	cancel context.CancelFunc
}

// NewServer returns a server holding c.Collections, all empty.
func NewServer(c Config) *Server {
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := newTracker(log, c.Changed)
	if c.Now != nil {
		t.now = c.Now
	}
	if c.Label != nil {
		t.label = c.Label
	}
	classify := c.Classify
	if classify == nil {
		classify = func(*core.Node) Class { return "" }
	}
	return &Server{cancel: cancel, ads: &ads{ctx: ctx, store: newStore(c.Collections), tracker: t, errorf: log.Error,
		limits: c.Limits.withDefaults(), classify: classify, viewOf: c.ViewOf, callbacks: c.Callbacks,
		gate: restoreGate{bound: c.RestoreHold}}}
}

// Register registers the ADS service (SotW and Delta) on g. The caller
// owns g: it listens, serves and stops it. Build g with ServerOptions.
func (s *Server) Register(g *grpc.Server) {
	discovery.RegisterAggregatedDiscoveryServiceServer(g, s.ads)
}

// Apply installs changes and wakes the streams subscribed to what they
// change; each stream sends what its client does not hold yet. Each
// resource is marshalled once per version, for every stream. The
// resources must not be modified afterwards.
func (s *Server) Apply(ch Changes) { s.ads.store.apply(ch, nil) }

// ApplyViews installs changes and view updates in one step (no stream
// reads a state between them) and wakes the streams that read what they
// change (views.go).
func (s *Server) ApplyViews(ch Changes, vs []ViewUpdate) { s.ads.store.apply(ch, vs) }

// SetRestored says which registries the resources now in the store
// derive from restored, unconfirmed states (nil: none); call it after
// applying them. The first non-empty list starts the restore hold (hold.go)
// for Config.RestoreHold; an empty one ends it, and the held subscriptions
// are sent what they lack.
func (s *Server) SetRestored(registries []string) { s.ads.gate.setRestored(registries) }

// Rescope asks viewOf the view of every open stream (by its first node)
// and moves the streams whose view changed; they are sent what differs
// between the two views, nothing else. viewOf is called without the
// store's lock held and may create views (ApplyViews). It returns the
// views that have streams, with how many.
func (s *Server) Rescope(viewOf func(*core.Node, Class) string) map[string]int {
	return s.ads.store.rescope(viewOf)
}

// Views returns the views that have streams, with how many.
func (s *Server) Views() map[string]int { return s.ads.store.viewsInUse() }

// Proxies returns every connected stream's sync status, sorted by node id.
func (s *Server) Proxies() []ProxyStatus {
	return s.ads.tracker.snapshot(s.ads.store.count)
}

// Served returns the class of the newest stream of proxyID and, per type
// URL it subscribes to, the current resources its subscription matches
// (a Variants resource as the variant that proxy is sent; not to be
// modified); false for an unknown proxy.
func (s *Server) Served(proxyID string) (Class, map[string]map[string]types.Resource, bool) {
	class, node, subs, ok := s.ads.tracker.served(proxyID)
	if !ok {
		return "", nil, false
	}
	out := make(map[string]map[string]types.Resource, len(subs))
	for url, sub := range subs {
		rs := s.ads.store.matching(sub)
		for name, r := range rs {
			if v, ok := r.(Variants); ok {
				if key := v.VariantKey(node); key != "" {
					rs[name] = v.Variant(key) // what that proxy is sent
				}
			}
		}
		out[url] = rs
	}
	return class, out, true
}

// View returns the view (Config.ViewOf) the newest stream of proxyID
// reads: "" when unscoped; false for an unknown proxy.
func (s *Server) View(proxyID string) (string, bool) {
	_, _, subs, ok := s.ads.tracker.served(proxyID)
	if !ok {
		return "", false
	}
	s.ads.store.mu.RLock()
	defer s.ads.store.mu.RUnlock()
	var w *watcher // every subscription of a stream has its watcher
	for _, sub := range subs {
		w = sub.w
	}
	if w == nil || w.view == nil {
		return "", true
	}
	return w.view.key, true
}

// Close ends every stream, except one blocked sending to a client that
// stopped reading, which ends when the caller's gRPC server stops.
func (s *Server) Close() { s.cancel() }
