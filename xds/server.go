// Package xds serves meshfed's model to Envoy proxies, proxyless gRPC
// clients and istiod (MCP-over-xDS) over one ADS endpoint (SotW and
// Delta). It is the facade over two packages (docs/architecture.md §2):
//
//   - xds/translate turns model snapshots into xDS resources, purely and
//     incrementally (resources of unchanged services are reused, and
//     every resource passes its protobuf ValidateAll), and reports what
//     changed per collection;
//   - xds/ads holds those collections and serves them over ADS with
//     meshfed's own stream loop (persistent per-stream subscriptions,
//     each resource marshalled once per version for all streams; the
//     package doc says why it is not go-control-plane's). It does not
//     know the model.
//
// Resource types, MarshalResource and HashResource come from
// go-control-plane. Server glues the two: Update translates a snapshot
// and applies the changes; ServiceEntries for istiod are built from the
// first MCP subscription on (Translator.EnableMCP).
//
// xds re-exports nothing of the two: its own names are Server and
// Options, Collectors, LevelTrace and the bootstrap files (GRPCBootstrap,
// EnvoyBootstrap, IstioMeshConfig); callers name translate.Kind,
// ads.Limits and the like in the package that defines them.
//
// Naming follows docs/architecture.md §4: clusters and ClusterLoadAssignments
// outbound|<port>||<host>; Envoy listeners 0.0.0.0_<port> with route
// configuration <port>; gRPC listeners and route configurations
// <host>:<port>.
package xds

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/ads"
	"github.com/meshfed/meshfed/xds/translate"
)

// Options configure a Server.
type Options struct {
	// Logger receives connection, NACK and translation events; nil
	// discards them.
	Logger *slog.Logger
	// Limits bound each stream; zero fields take the defaults.
	Limits ads.Limits
	// RootNamespace is Istio's root namespace for scoping
	// (docs/architecture.md §3.7); "" is translate.DefaultRootNamespace.
	RootNamespace string
	// RestoreHold bounds how long a client that reconnects holding
	// configuration is held while the served state is restored from
	// state.dir and unconfirmed (ads.Config.RestoreHold); 0: no hold.
	RestoreHold time.Duration

	now func() time.Time // the status clock; nil is time.Now (tests skew it)
}

// Server translates snapshots and serves them over ADS. Update is called
// from one goroutine; every other method is safe for concurrent use.
type Server struct {
	log *slog.Logger

	mu      sync.RWMutex // guards tr and invalid; held while the store updates
	tr      *translate.Translator
	invalid map[string]string

	ads     *ads.Server
	epoch   uint64 // the translator's ScopeEpoch streams were last scoped at; guarded by mu
	version atomic.Uint64
	changed atomic.Int64 // Snapshot.Changed (unix ns) of the snapshot in the store
	mcpOn   atomic.Bool  // the translator builds MCP resources (EnableMCP)
}

// NewServer returns a server with no resources; Register it on a gRPC
// server and feed it snapshots with Update.
func NewServer(o Options) *Server {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		log:     log,
		tr:      translate.NewTranslator(),
		invalid: map[string]string{},
	}
	s.tr.SetRootNamespace(o.RootNamespace)
	s.ads = ads.NewServer(ads.Config{
		Collections: translate.Collections(),
		Classify:    translate.ClassifyNode,
		Label:       translate.TypeLabel,
		Changed: func() time.Time {
			if n := s.changed.Load(); n != 0 {
				return time.Unix(0, n)
			}
			return time.Time{}
		},
		Now:         o.now,
		ViewOf:      s.viewOf,
		Callbacks:   ads.Callbacks{OnFirstRequest: s.subscribed},
		Limits:      o.Limits,
		Logger:      log,
		RestoreHold: o.RestoreHold,
	})
	return s
}

// Register registers the ADS service (SotW and Delta) on g. The caller
// owns g: it listens, serves and stops it. Build g with ServerOptions:
// without them it works, but every response is copied into gRPC's pooled
// buffers and every ACK costs a BDP ping.
func (s *Server) Register(g *grpc.Server) { s.ads.Register(g) }

// Update translates snap incrementally and pushes the changed resources to
// every subscribed stream. Calls come from one goroutine in snapshot order.
func (s *Server) Update(snap *model.Snapshot) {
	start := time.Now()
	s.mu.Lock()
	ch := s.tr.Translate(snap)
	if snap != nil && !snap.Changed.IsZero() {
		s.changed.Store(snap.Changed.UnixNano()) // before streams wake
	}
	s.applyLocked(ch, s.tr.ViewUpdates())
	s.rescopeLocked()
	s.logInvalid()
	if snap != nil {
		s.ads.SetRestored(snap.Restored) // after the store holds what it says
	}
	s.mu.Unlock()
	if snap != nil {
		s.version.Store(snap.Version)
	}
	pushSeconds.Observe(time.Since(start).Seconds())
	s.log.Debug("xds snapshot applied", "version", s.Version(), "changedKinds", len(ch))
}

// subscribed turns on the MCP resources when a stream first subscribes
// to an MCP collection: the translator builds the ServiceEntries of every
// current service, and they are in the store before that subscription is
// answered.
func (s *Server) subscribed(typeURL string) {
	if !translate.IsMCPType(typeURL) || s.mcpOn.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mcpOn.Load() {
		return
	}
	s.applyLocked(s.tr.EnableMCP(), nil)
	s.mcpOn.Store(true)
	s.log.Info("xds MCP client subscribed: serving ServiceEntries", "typeURL", typeURL)
}

// viewOf is the view a new stream reads (docs/architecture.md §3.7): an
// Envoy proxy's scope, made when no stream read it yet.
// Streams that cannot be scoped (proxyless gRPC, no namespace) do not
// wait for the translator.
func (s *Server) viewOf(node *core.Node, class ads.Class) string {
	if class != translate.ClassEnvoy {
		return ""
	}
	p := translate.ProxyOf(node)
	if p.Namespace == "" {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.viewOfProxy(p)
}

// viewOfLocked is viewOf; callers hold s.mu.
func (s *Server) viewOfLocked(node *core.Node, class ads.Class) string {
	if class != translate.ClassEnvoy {
		return ""
	}
	return s.viewOfProxy(translate.ProxyOf(node))
}

// viewOfProxy is the key of p's view, made when it did not exist yet.
// Callers hold s.mu.
func (s *Server) viewOfProxy(p translate.Proxy) string {
	key := s.tr.ScopeKey(p)
	if ups := s.tr.ViewFor(key, p); len(ups) > 0 {
		s.ads.ApplyViews(nil, ups)
	}
	return key
}

// rescopeLocked moves the streams whose view changed when the scoping
// inputs changed (Sidecars, exportTo, source matches), and drops the
// views no stream reads. Callers hold s.mu.
func (s *Server) rescopeLocked() {
	var inUse map[string]int
	if e := s.tr.ScopeEpoch(); e != s.epoch {
		s.epoch = e
		inUse = s.ads.Rescope(s.viewOfLocked)
	} else {
		inUse = s.ads.Views()
	}
	if drops := s.tr.DropViews(inUse); len(drops) > 0 {
		s.ads.ApplyViews(nil, drops)
	}
}

// applyLocked installs translated changes and view updates in the store
// and counts them. Callers hold s.mu.
func (s *Server) applyLocked(ch translate.Changes, views []ads.ViewUpdate) {
	s.ads.ApplyViews(ch, views)
	for _, k := range translate.Kinds {
		if ch[k] == nil {
			continue
		}
		pushesTotal.WithLabelValues(translate.TypeLabel(k.TypeURL)).Inc()
		resourcesGauge.WithLabelValues(classLabel(k.Class), translate.TypeLabel(k.TypeURL)).Set(float64(len(s.tr.Resources(k))))
	}
}

// logInvalid logs services newly left out. Callers hold s.mu.
func (s *Server) logInvalid() {
	now := map[string]string{}
	for _, in := range s.tr.Invalid() {
		now[in.Host] = in.Error
		if s.invalid[in.Host] != in.Error {
			s.log.Warn("xds service not served: invalid resources", "host", in.Host, "error", in.Error)
		}
	}
	s.invalid = now
}

// Version is the model snapshot version last applied; 0 before the first.
func (s *Server) Version() uint64 { return s.version.Load() }

// Skipped lists service ports without an Envoy listener because another
// service owns the port number (see Translator.rebuildPort).
func (s *Server) Skipped() []translate.Skipped {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.tr.Skipped()
}

// Invalid lists services not served because their resources failed
// validation.
func (s *Server) Invalid() []translate.Invalid {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.tr.Invalid()
}

// Resources returns a copy of the current resources of a collection; the
// resources themselves must not be modified.
func (s *Server) Resources(k translate.Kind) map[string]types.Resource {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(s.tr.Resources(k))
}

// Proxies returns every connected stream's sync status, sorted by node id.
func (s *Server) Proxies() []ads.ProxyStatus { return s.ads.Proxies() }

// ConfigDump returns, as indented JSON, the resources the newest stream
// of proxyID is currently served, per type URL:
//
//	{"id": ..., "class": ..., "resources": {"<typeURL>": [<resource>, ...]}}
//
// Resources are the current ones its subscriptions match, in protojson
// form, sorted by name. It returns false for an unknown proxy.
func (s *Server) ConfigDump(proxyID string) ([]byte, bool) {
	class, served, ok := s.ads.Served(proxyID)
	if !ok {
		return nil, false
	}
	out := struct {
		ID        string                       `json:"id"`
		Class     translate.Class              `json:"class"`
		Scope     *Scope                       `json:"scope,omitempty"`
		Resources map[string][]json.RawMessage `json:"resources"`
	}{ID: proxyID, Class: class, Scope: s.scopeOf(proxyID), Resources: map[string][]json.RawMessage{}}
	for url, current := range served {
		ns := slices.Sorted(maps.Keys(current))
		list := make([]json.RawMessage, 0, len(ns))
		for _, n := range ns {
			b, err := protojson.Marshal(current[n])
			if err != nil {
				b, _ = json.Marshal(map[string]string{"name": n, "error": err.Error()})
			}
			list = append(list, b)
		}
		out.Resources[url] = list
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keep < > & of ids and resources (protojson does not escape them)
	if err := enc.Encode(out); err != nil {
		return nil, false
	}
	return indentJSON(buf.Bytes()), true
}

// Scope is what a scoped proxy sees (docs/architecture.md §3.7), as
// /debug/config_dump shows it.
type Scope struct {
	// View is the key of the view the proxy reads (namespace|Sidecar|source matches).
	View string `json:"view"`
	// Sidecar is the namespace/name of the Sidecar that selected the
	// proxy; "" when none.
	Sidecar string `json:"sidecar,omitempty"`
	// Hosts are the hosts the view shows; a view without Sidecar starts
	// with "*" and lists the hosts it hides as "-host".
	Hosts []string `json:"hosts"`
}

// scopeOf is the scope of the newest stream of proxyID; nil when it is
// not scoped.
func (s *Server) scopeOf(proxyID string) *Scope {
	key, ok := s.ads.View(proxyID)
	if !ok || key == "" {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	sc, hosts, ok := s.tr.Scope(key)
	if !ok {
		return nil
	}
	if hosts == nil {
		hosts = []string{}
	}
	return &Scope{View: key, Sidecar: sc, Hosts: hosts}
}

// Close ends every stream, except one blocked sending to a client that
// stopped reading, which ends when the caller's gRPC server stops.
func (s *Server) Close() { s.ads.Close() }

// indentJSON normalizes JSON (protojson varies its spacing) to two-space
// indentation.
func indentJSON(b []byte) []byte {
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return b
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}

// LevelTrace is below slog.LevelDebug, for per-stream lines that would
// make `--log-level debug` unreadable with many proxies.
const LevelTrace = slog.LevelDebug - 4

// resourceNames is the sorted key set of a collection (for tests and dumps).
func resourceNames(m map[string]types.Resource) []string { return slices.Sorted(maps.Keys(m)) }
