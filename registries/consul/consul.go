// Package consul is the registry of kind consul: it watches one Consul
// datacenter through an agent's HTTP API and publishes every service in it
// as <service>.<domain>.
//
// # Watches
//
// One goroutine holds a blocking query on /v1/catalog/services: it learns
// which services exist. Each service then has its own blocking query on
// /v1/health/service/<name>, which carries its instances and their checks,
// so health changes reach proxies (passing → HEALTHY, warning → DEGRADED,
// critical → UNHEALTHY, maintenance → DRAINING). Consul keeps a
// per-service index, so a change to one service wakes only that service's
// query: one change fetches and converts one service, nothing else is
// re-listed (the catalog query also returns when instances are added or
// removed, and its answer is compared, not converted).
//
// Every blocking query holds one goroutine on the agent for up to
// waitTime, and an agent refuses more than limits.http_max_conns_per_client
// (200 by default) connections from one address (429 Too Many Requests).
// Unless maxConcurrentWatches is set, the registry takes 64 % of the limit
// the agent reports (128 at the default; budget.go). How many queries fit
// in maxConcurrentWatches connections depends on the protocol the agent
// speaks, which the registry reads off its answers:
//
//   - HTTPS: the agent speaks HTTP/2, which carries up to 250 requests at
//     once on one connection (h2StreamsPerConn), so 128 connections hold
//     32,000 blocking queries: every service of a 10,000-service catalog
//     has its own, blocking for waitTime, and a change is served at once
//     (docs/registries/consul.md has the figures). This is the mode for
//     large catalogs.
//   - plain HTTP (HTTP/1.1) with more than 128 services (streamAbove; or
//     more than maxConcurrentWatches, if that is lower): the services
//     follow the Consul servers' event stream instead (streaming: auto,
//     stream.go), even when the agent's limit would leave a connection
//     per service, which costs four times the memory (streamAbove). The
//     stream is the change feed Consul's client agents use (pbsubscribe),
//     on the leader's RPC port, one subscription per service on one gRPC
//     connection read by one goroutine (grpcstreams).
//     A subscription answers the service's instances once, then pushes
//     each change to them, so a change is served at once and an idle
//     catalog costs nothing. The leader is the one the agent names
//     (/v1/status/leader). Each subscription is preceded by a consistent
//     read of the service's index, and its instances are sent once the
//     stream has reached that index (a restarted server's snapshots lag;
//     stream.go); after a failure, one consistent read lets the whole
//     wave of resubscriptions start. Services that had a blocking query
//     until then move to the stream.
//   - the same when the servers refuse the stream (their RPC port not
//     reachable from meshfed, or tls.internal_rpc.verify_incoming), or
//     with streaming: off: each service has a blocking query of its own
//     while maxConcurrentWatches holds them all; beyond that the queries
//     take turns on a pool of maxConcurrentWatches goroutines, each
//     blocking for waitTime×maxConcurrentWatches/services (at least 1s).
//     A query whose index is behind returns at once, so a changed service
//     is seen at its next turn, within about waitTime; unchanged services
//     cost one answer per turn. Health changes do not wait for the turn:
//     two more blocking queries hold the checks that are not passing
//     (/v1/health/state/critical and /warning; Consul indexes checks by
//     status, so an answer costs the non-passing checks, not the catalog),
//     and a service whose check entered or left one of them — a failing or
//     recovering instance, maintenance mode, a new instance whose checks
//     start critical, or every service of a node whose node check did — is
//     asked next, ahead of its turn (health hints). Instances added or
//     removed without such a change, and changes to addresses, ports, tags
//     or metadata, still wait for their service's turn, unless the agent's
//     limit leaves a connection per service.
//
// Why the event stream and not one catalog-wide query that says which
// services changed? The agent's HTTP API has none that is cheaper than
// the catalog: every list of the whole catalog is built from every
// instance on each call, and no filter can select by ModifyIndex (the
// raft indexes are hidden from bexpr: `bexpr:"-"` in Consul's
// structs.RaftIndex). Measured on Consul 1.22.5 with 10,000 services × 10
// instances on 1,000 nodes (a shared 2-core machine at loadavg ≈ 20, so
// slower than on a quiet one): to learn which service changed,
// /v1/health/state/any answers 44 MB in 1.4–11 s (agent CPU 0.85–2.1 s)
// and still misses instances without checks and in-place
// re-registrations; /v1/internal/ui/services (per-service counts) 4.6 MB
// in 3–7 s (agent CPU 1.1–1.9 s) and misses an instance replaced by
// another; /v1/catalog/services 199 KB in 0.36–1.9 s (agent CPU
// 0.11–0.52 s) names services and tags only; asking every service for
// its index alone (/v1/health/service/<name> with a filter that matches
// nothing, 100 at once) takes 4.5–6.7 s and 4.3 s of agent CPU per sweep.
// Each of these costs the whole catalog per change, and none serves a
// change within a second at this size; per-service queries cost the
// change only. On a quiet machine (loadavg < 1.5) the figures shrink but
// the verdict holds: /v1/catalog/services answers in 0.08–0.13 s and a
// blocking query on it wakes 0.1 s after a registration, but it does not
// say which service changed; a parked /v1/internal/ui/services wakes
// 1.3 s after one (0.7–2.5 s of agent CPU per answer); a sweep of every
// service's index costs 1.0–6.5 s of agent CPU (bench/analysis.md,
// "Consul at 10,000 services"). The agent refuses HTTP/2 without TLS
// (h2c; Consul 1.22.5 answers a prior-knowledge connection with
// nothing), so over plain HTTP only the event stream carries a
// subscription per service without a connection each. Its service-health
// topic has no wildcard subject (Consul registers it with
// supportsWildcard false), hence a subscription per service. One
// goroutine and connection per service over HTTP/1.1, as Prometheus'
// consul_sd and consul-template do, runs into the agent's connection
// limit with a few hundred services.
//
// Two costs still follow the catalog, both bounded. The first query of a
// service answers at once with all of it; at most maxConcurrentWatches
// run together, so the initial sync of a large catalog is paced by the
// agent's throughput (asking for 10,000 services at one moment over
// HTTP/2 left a loaded agent collecting garbage for minutes). Over HTTPS
// the services' blocking queries start only once the first full state is
// published: a blocking query makes the agent build the service's answer
// once more to compare indexes, which doubled its work during the sync
// (16.7 s → 8.0 s at 10,000 services, bench/analysis.md). And the
// catalog list (/v1/catalog/services) moves whenever any instance is
// added or removed; Consul builds it from every instance, so it is asked
// at most once per catalogGap (250ms): a new or removed service is seen
// up to that much later, changes to existing services are not delayed.
//
// A service with more than ~680 instances loses Consul's fine-grained
// watch (go-memdb's watch limit) and wakes on any health change in the
// datacenter; the index check then re-fetches only that service.
//
// # Outages
//
// A failed query reports Degraded at once and keeps the last published
// state. Queries retry with jittered backoff; the first query after an
// error does not block, so recovery is seen at once, and it is consistent
// (as is every first query at start): a restarted server serves an older
// catalog while it replays its raft log (queryOptions). When the catalog
// and every service answered again, the full state is published (Synced).
//
// A token, when configured, is sent in a header by the HTTP transport; it
// is never logged and never part of an error.
package consul

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-cleanhttp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/registries"
)

// minTurn is the shortest blocking wait in round-robin mode.
const minTurn = time.Second

// Registry watches one Consul datacenter. Build it with Config.New.
type Registry struct {
	cfg    Config
	common registries.Common
	log    *slog.Logger
	m      metrics
	// converted, when set (by tests), is called with the name of every
	// service whose answer is converted.
	converted func(service string)
	// reprobe, when set (by tests), replaces reprobeAfter.
	reprobe time.Duration
}

// reprobeAfter is how long after a refused probe of the servers' event
// stream it is tried again, while services take turns.
const reprobeAfter = time.Minute

var _ registries.Registry = (*Registry)(nil)

// Run implements registries.Registry.
func (r *Registry) Run(ctx context.Context, sink registries.Sink) error {
	token, err := r.readToken()
	if err != nil {
		return registries.Permanent(err)
	}
	// Two transports, so that each bounds its connections: the catalog
	// and health-state watches with the lookups between their answers,
	// and the service queries (their bound is set by sizeBudget before the
	// first one).
	tt := &tokenTransport{m: &r.m, token: token}
	client, tr, err := r.newClient(tt, extraConns+1)
	if err != nil {
		return registries.Permanent(err)
	}
	defer tr.CloseIdleConnections()
	// The event stream's leader is the agent's own datacenter's (stream.go).
	local := client
	if r.cfg.Datacenter != "" {
		if local, err = r.apiClient(tt, ""); err != nil {
			return registries.Permanent(err)
		}
	}
	svcTT := &tokenTransport{m: &r.m, token: token}
	services, svcTr, err := r.newClient(svcTT, 0)
	if err != nil {
		return registries.Permanent(err)
	}
	defer svcTr.CloseIdleConnections()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &watch{
		ctx:       ctx,
		r:         r,
		client:    client,
		local:     local,
		svcClient: services,
		health:    newHealthQuery(svcTT, &r.cfg, token),
		svcTr:     svcTr,
		proto:     tt,
		token:     token,
		q:         newQueue(),
		sq:        newQueue(),
		probed:    make(chan *streamer),
		firsts:    make(chan struct{}, cmp.Or(r.cfg.MaxConcurrentWatches, DefaultMaxConcurrentWatches)),
		catalog:   make(chan catalogEvent),
		service:   make(chan serviceEvent),
		hints:     make(chan []string, 16),
		synced:    make(chan struct{}),
		services:  map[string]*serviceState{},
		pub:       registries.NewPublisher(r.common, sink, r.log, registries.PublisherOptions[string]{Compare: strings.Compare}),
	}
	w.wg.Go(func() { w.watchCatalog(ctx) })
	err = w.loop(ctx)
	cancel()
	w.wg.Wait()
	if w.stream != nil {
		w.stream.close()
	}
	r.m.watched.Set(0)
	return err
}

// readToken reads the ACL token (the first line of tokenFile, trimmed);
// "" without a tokenFile.
func (r *Registry) readToken() (string, error) {
	if r.cfg.TokenFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(r.cfg.TokenFile)
	if err != nil {
		return "", fmt.Errorf("consul tokenFile: %w", err)
	}
	return strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]), nil
}

// newClient builds an API client from the config alone: the environment
// variables the api package reads (CONSUL_HTTP_*, CONSUL_NAMESPACE,
// CONSUL_PARTITION) are overridden (here and in tokenTransport). tt holds
// the token and wraps the transport, which opens at most maxConns
// connections (HTTP/2 ones included; 0: no bound yet, to be set before
// its first request) and keeps them all for the next query.
func (r *Registry) newClient(tt *tokenTransport, maxConns int) (*api.Client, *http.Transport, error) {
	c := r.cfg
	tr := cleanhttp.DefaultPooledTransport() // attempts HTTP/2 over TLS
	tr.MaxIdleConns = 0
	tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost = maxConns, maxConns
	// HTTP/1.1 buffers per connection: a query and an answer's headers
	// take a few hundred bytes, and bodies are read past the buffer; with
	// a connection per service (the agent's limit raised) the default 4 KB
	// each were 8 KB per service.
	tr.ReadBufferSize, tr.WriteBufferSize = 1024, 1024
	if c.Scheme == "https" {
		tlsConf, err := api.SetupTLSConfig(&api.TLSConfig{
			Address:            c.TLS.ServerName,
			CAFile:             c.TLS.CAFile,
			CertFile:           c.TLS.CertFile,
			KeyFile:            c.TLS.KeyFile,
			InsecureSkipVerify: c.TLS.InsecureSkipVerify,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("consul tls: %w", err)
		}
		tr.TLSClientConfig = tlsConf
	}
	client, err := r.apiClient(tt, c.Datacenter)
	tt.next = tr
	return client, tr, err
}

// apiClient is an API client of the configured agent on tt, whose
// requests name datacenter dc ("": the agent's own).
func (r *Registry) apiClient(tt *tokenTransport, dc string) (*api.Client, error) {
	return api.NewClient(&api.Config{
		Address:    r.cfg.Address,
		Scheme:     r.cfg.Scheme,
		Datacenter: dc,
		Token:      tt.token, // so that the request needs no change (RoundTrip)
		HttpClient: &http.Client{Transport: tt},
	})
}

// tokenTransport sets the ACL token header to the configured token (or
// removes one the api package took from the environment). It notes
// whether the agent answers over HTTP/2 and counts requests and response
// bytes (the load meshfed puts on the agent).
type tokenTransport struct {
	token string
	next  http.RoundTripper
	m     *metrics
	h2    atomic.Bool // the last answer came over HTTP/2
}

func (t *tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	envParams := hasParam(req.URL.RawQuery, "ns") || hasParam(req.URL.RawQuery, "partition")
	if req.Header.Get("X-Consul-Token") != t.token || envParams {
		// Only what the api package took from the environment
		// (CONSUL_HTTP_TOKEN, CONSUL_NAMESPACE, CONSUL_PARTITION: an
		// Enterprise namespace or partition, which a Consul CE agent
		// refuses): a request held for every blocking query is not copied
		// otherwise.
		req = req.Clone(req.Context())
		if t.token == "" {
			req.Header.Del("X-Consul-Token")
		} else {
			req.Header.Set("X-Consul-Token", t.token)
		}
		if envParams {
			q := req.URL.Query()
			q.Del("ns")
			q.Del("partition")
			req.URL.RawQuery = q.Encode()
		}
	}
	t.m.requests.Inc()
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	t.h2.Store(resp.ProtoMajor == 2)
	resp.Body = countingBody{ReadCloser: resp.Body, n: t.m.respBytes}
	return resp, nil
}

// hasParam reports whether the raw query holds parameter name.
func hasParam(raw, name string) bool {
	return strings.HasPrefix(raw, name+"=") || strings.Contains(raw, "&"+name+"=")
}

// countingBody counts the bytes read from a response body.
type countingBody struct {
	io.ReadCloser
	n prometheus.Counter
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(float64(n))
	return n, err
}

// entry is one watched service as the workers see it. An entry is held by
// at most one worker at a time (the queue hands it over), so index needs
// no lock.
type entry struct {
	name    string
	index   uint64
	errored bool // the last query failed: send the next answer, changed or not
	ctx     context.Context
	cancel  context.CancelFunc // ends an in-flight query when the service goes away
	// streamed: served from the servers' event stream (f), not by the
	// workers' blocking queries.
	streamed bool
	f        *follower
}

type catalogEvent struct {
	services map[string][]string
	err      error
	at       time.Time
}

type serviceEvent struct {
	e       *entry
	entries []*api.ServiceEntry
	err     error
	at      time.Time
}

// serviceState is one service as the loop sees it; its conversion is in
// the Publisher.
type serviceState struct {
	e       *entry
	fetched bool
	failing bool
}

// ready: the service's last answer can be published.
func (st *serviceState) ready() bool { return st.fetched && !st.failing }

// watch is the state of one Run.
type watch struct {
	ctx    context.Context // of the Run; entries derive theirs from it
	r      *Registry
	client *api.Client // the catalog and health-state watches
	local  *api.Client // client, but of the agent's own datacenter
	// svcClient is the service queries' client; svcTr its transport,
	// whose connection bound sizeBudget sets.
	svcClient *api.Client
	health    *healthQuery // the workers' service queries, on svcClient's transport
	svcTr     *http.Transport
	proto     *tokenTransport // says whether the agent speaks HTTP/2
	token     string
	q         *queue
	catalog   chan catalogEvent
	service   chan serviceEvent
	hints     chan []string // services whose health changed, from watchChecks
	active    atomic.Int64  // services watched, for the round-robin wait
	slots     atomic.Int64  // service queries that may be in flight at once
	firsts    chan struct{} // first (non-blocking) service queries in flight
	turns     turns         // round-robin queries in flight, which a hint may end
	// synced is closed at the first full state (maybePublish).
	synced chan struct{}
	// budget is the connections the service queries may hold
	// (sizeBudget), set before the first catalog state reaches the loop.
	budget   int
	syncOnce sync.Once
	wg       sync.WaitGroup

	// Owned by loop.
	services map[string]*serviceState
	// httpServices is how many services the workers serve (the others
	// follow the event stream).
	httpServices int
	// stream serves the services that blocking queries cannot hold at
	// once over HTTP/1.1 (nil: not tried, or not usable); streamTried:
	// openStream ran.
	stream    *streamer
	probedAt  time.Time          // the last openStream; zero: none
	probing   bool               // an openStream runs in a goroutine (maybeStream)
	probed    chan *streamer     // its result
	reprobeC  <-chan time.Time   // fires when a refused probe may be tried again
	sq        *queue             // services whose event stream is to be opened (starter)
	starters  bool               // the starters run
	notReady  int                // services whose state is not ready(), so that publishing need not scan them all
	workers   int                // worker goroutines started
	warned    bool               // logged that services take turns
	hinting   bool               // watchChecks runs
	stopHints context.CancelFunc // ends watchChecks (migrate)
	catalogOK bool               // the catalog answered since the last catalog error
	pub       *registries.Publisher[string]
}

// h2StreamsPerConn is how many requests a Consul agent serves at once on
// one HTTP/2 connection (its HTTPS server keeps x/net/http2's default
// SETTINGS_MAX_CONCURRENT_STREAMS, 250).
const h2StreamsPerConn = 250

// updateSlots sets how many service queries may block at once: one per
// connection under HTTP/1.1, h2StreamsPerConn per connection under
// HTTP/2 (the agent's limits.http_max_conns_per_client counts
// connections, not requests), and starts workers up to that many, never
// more than there are services.
func (w *watch) updateSlots() {
	slots := w.budget
	if w.proto.h2.Load() {
		slots *= h2StreamsPerConn
	}
	w.slots.Store(int64(slots))
	if n := w.httpServices; n > slots && !w.warned {
		w.warned = true
		w.r.log.Warn("more Consul services than blocking queries over HTTP/1.1: services take turns and a change other than health is seen within about waitTime; serve the agent's API over HTTPS (HTTP/2 carries a query per service) or raise the agent's limits.http_max_conns_per_client to agentLimitNeeded (an unset maxConcurrentWatches takes 64 % of it)",
			"services", n, "maxConcurrentWatches", w.budget, "waitTime", w.r.cfg.WaitTime.Std(),
			"agentLimitNeeded", (n*autoShareDen+autoShareNum-1)/autoShareNum)
	}
	for want := min(slots, w.httpServices); w.workers < want; w.workers++ {
		w.wg.Go(func() { w.worker(w.ctx) })
	}
	if w.httpServices > slots && !w.hinting {
		// Services take turns: health changes are learned apart.
		w.hinting = true
		hctx, cancel := context.WithCancel(w.ctx)
		w.stopHints = cancel
		for _, state := range []string{api.HealthCritical, api.HealthWarning} {
			w.wg.Go(func() { w.watchChecks(hctx, state) })
		}
	}
}

// watchChecks holds a blocking query on the checks in state (critical or
// warning) and sends the loop the services whose checks entered or left
// it since its last answer: for a node's check, every service of that
// node (/v1/catalog/node-services). Its first answer, and the first after
// an error, only learn the set. Consul indexes checks by status, so an
// answer costs the checks in that state.
func (w *watch) watchChecks(ctx context.Context, state string) {
	var checks []*api.HealthCheck
	var last map[string]*api.HealthCheck // the last answer's, by node and check; nil: none
	w.poll(ctx, func(q *api.QueryOptions) (uint64, error) {
		var meta *api.QueryMeta
		var err error
		if checks, meta, err = w.client.Health().State(state, q); err != nil {
			return 0, err
		}
		return meta.LastIndex, nil
	}, func(error) bool {
		w.r.m.checksErrors.Inc()
		last = nil
		return true
	}, func(_, _ uint64) bool {
		was := last
		last = make(map[string]*api.HealthCheck, len(checks))
		for _, c := range checks {
			last[c.Node+"\x00"+c.CheckID] = c
		}
		if was == nil {
			return true
		}
		services := w.moved(ctx, was, last)
		return len(services) == 0 || send(ctx, w.hints, services)
	})
}

// moved returns the services whose checks (by node and check ID) are in
// one of was and now but not the other: for a node's check, every service
// of that node (/v1/catalog/node-services; none when that fails).
func (w *watch) moved(ctx context.Context, was, now map[string]*api.HealthCheck) []string {
	var services, nodes []string
	note := func(c *api.HealthCheck) {
		if c.ServiceID == "" {
			nodes = append(nodes, c.Node)
		} else {
			services = append(services, c.ServiceName)
		}
	}
	for k, c := range now {
		if _, ok := was[k]; !ok {
			note(c)
		}
	}
	for k, c := range was {
		if _, ok := now[k]; !ok {
			note(c)
		}
	}
	for _, node := range nodes {
		q := &api.QueryOptions{Datacenter: w.r.cfg.Datacenter, AllowStale: w.r.cfg.AllowStale}
		on, _, err := w.client.Catalog().NodeServiceList(node, q.WithContext(ctx))
		if err == nil && on != nil {
			for _, s := range on.Services {
				services = append(services, s.Service)
			}
		}
	}
	return services
}

// queryOptions builds a query from index. A first query (index 0: at
// start or after an error) is consistent: a Consul server that has just
// restarted answers default and stale reads from its state store while it
// still replays its raft log, so for seconds it serves an older catalog
// (instances registered before the restart missing) with
// X-Consul-KnownLeader true and an index that only looks lower to a
// client that knew the old one; a consistent read waits until the leader
// has applied its log, or fails ("Not ready to serve consistent reads"),
// which keeps the last published state. Blocking queries that follow use
// the configured consistency: they return only past the consistent
// answer's index.
func (w *watch) queryOptions(ctx context.Context, index uint64, wait time.Duration) *api.QueryOptions {
	q := &api.QueryOptions{
		Datacenter:        w.r.cfg.Datacenter,
		AllowStale:        w.r.cfg.AllowStale && index != 0,
		RequireConsistent: index == 0,
		WaitIndex:         index,
		WaitTime:          wait,
	}
	return q.WithContext(ctx)
}

// behind: a blocking query's answer has a lower index than it waited on.
// The server restored a snapshot, or (allowStale) a lagging server let it
// time out: its answer is not used; the query is asked again from index 0,
// so consistently (queryOptions), which answers the state the leader has
// applied.
func behind(old, got uint64) bool { return old != 0 && got < old }

// nextIndex applies Consul's rules for blocking indexes: reset when the
// index goes backwards (a server restored an older state), never 0.
func nextIndex(old, got uint64) uint64 {
	if got < old {
		return 0
	}
	return max(got, 1)
}

func (w *watch) watchCatalog(ctx context.Context) {
	errored := false
	sized := false
	var names map[string][]string
	w.poll(ctx, func(q *api.QueryOptions) (uint64, error) {
		var meta *api.QueryMeta
		var err error
		if names, meta, err = w.client.Catalog().Services(q); err != nil {
			return 0, err
		}
		return meta.LastIndex, nil
	}, func(err error) bool {
		w.r.m.catalogErrors.Inc()
		errored = true
		return send(ctx, w.catalog, catalogEvent{err: err, at: time.Now()})
	}, func(asked, index uint64) bool {
		if index == asked && asked != 0 && !errored {
			w.r.m.catalogSame.Inc()
			return true
		}
		w.r.m.catalogChanged.Inc()
		errored = false
		if !sized {
			// The agent answers: learn its connection limit before any
			// service query starts.
			w.sizeBudget(ctx)
			sized = true
		}
		if !send(ctx, w.catalog, catalogEvent{services: names, at: time.Now()}) {
			return false
		}
		// Consul builds this list from every instance of the catalog, and
		// its index moves whenever any instance is added or removed: at
		// most one list per catalogGap, so that churn in a large catalog
		// does not keep the agent listing it (changes to existing services
		// do not wait for it; their own queries carry them).
		select {
		case <-time.After(catalogGap):
			return true
		case <-ctx.Done():
			return false
		}
	})
}

// poll runs one blocking query after another until ctx ends or a
// callback returns false. ask makes one query with q and returns its
// answer's index. After an error, failed(err) and a backoff, the next
// query starts from index 0 (consistent, queryOptions); an answer behind
// the index asked is dropped and asked again from 0 (behind); any other
// is handed to got with the index asked and the answer's.
func (w *watch) poll(ctx context.Context, ask func(q *api.QueryOptions) (uint64, error), failed func(error) bool, got func(asked, index uint64) bool) {
	b := w.backoff()
	var index uint64
	for ctx.Err() == nil {
		w.r.m.inFlight.Inc()
		at, err := ask(w.queryOptions(ctx, index, w.r.cfg.WaitTime.Std()))
		w.r.m.inFlight.Dec()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			index = 0
			if !failed(err) || b.Wait(ctx) != nil {
				return
			}
			continue
		}
		b.Reset()
		if behind(index, at) {
			index = 0
			continue
		}
		asked := index
		index = nextIndex(index, at)
		if !got(asked, at) {
			return
		}
	}
}

// catalogGap is the least time between two changed catalog lists.
const catalogGap = 250 * time.Millisecond

// worker serves queued services, one blocking query at a time.
func (w *watch) worker(ctx context.Context) {
	b := w.backoff()
	cfg := &w.r.cfg
	for {
		e, ok := w.q.pop(ctx)
		if !ok {
			return
		}
		if e.ctx.Err() != nil {
			continue // the service went away
		}
		wait := cfg.WaitTime.Std()
		turn := false
		if n, slots := w.active.Load(), w.slots.Load(); n > slots {
			wait = max(minTurn, time.Duration(int64(wait)*slots/n))
			turn = true
		}
		// A first query (index 0) answers at once with the whole service:
		// at most maxConcurrentWatches of them run together, so that over
		// HTTP/2 the agent is not asked for every service of a large
		// catalog at the same moment (it then spends its time collecting
		// garbage). Blocking queries cost it nothing while they wait.
		first := e.index == 0
		if first {
			select {
			case w.firsts <- struct{}{}:
			case <-ctx.Done():
				return
			}
		} else if !turn {
			// Until the first full state, a service's blocking query
			// waits: a blocking query computes the service's answer once
			// to compare indexes, which with a query per service doubled
			// the agent's work while it still built the other services'
			// first answers (and nothing is published before the full
			// state, so nothing is served later). When every service has
			// a worker of its own (not in turns) a worker may hold its
			// service while it waits: a service whose first query must be
			// asked again still finds a worker.
			select {
			case <-w.synced:
			case <-ctx.Done():
				return
			}
		}
		qctx, done := e.ctx, func() {}
		if turn && !first {
			qctx, done = w.turns.start(e)
		}
		w.r.m.inFlight.Inc()
		entries, lastIndex, err := w.health.query(qctx, e.name, w.queryOptions(qctx, e.index, wait))
		w.r.m.inFlight.Dec()
		ended := err != nil && qctx.Err() != nil && e.ctx.Err() == nil
		done()
		if first {
			<-w.firsts
		}
		if ctx.Err() != nil {
			return
		}
		if e.ctx.Err() != nil {
			continue
		}
		if ended {
			w.q.push(e) // its turn was ended for a hinted service
			continue
		}
		at := time.Now()
		if err != nil {
			w.r.m.healthErrors.Inc()
			e.index, e.errored = 0, true
			if !send(ctx, w.service, serviceEvent{e: e, err: err, at: at}) {
				return
			}
			if b.Wait(ctx) != nil {
				return
			}
			w.q.push(e)
			continue
		}
		b.Reset()
		if behind(e.index, lastIndex) {
			e.index = 0
			w.q.push(e)
			continue
		}
		changed := lastIndex != e.index || e.index == 0
		e.index = nextIndex(e.index, lastIndex)
		if changed || e.errored {
			w.r.m.healthChanged.Inc()
			e.errored = false
			if !send(ctx, w.service, serviceEvent{e: e, entries: entries, at: at}) {
				return
			}
		} else {
			w.r.m.healthSame.Inc()
		}
		w.q.push(e)
	}
}

func (w *watch) backoff() *registries.Backoff {
	return &registries.Backoff{Initial: w.r.cfg.Backoff.Initial.Std(), Max: w.r.cfg.Backoff.Max.Std()}
}

func send[T any](ctx context.Context, ch chan<- T, v T) bool {
	select {
	case ch <- v:
		return true
	case <-ctx.Done():
		return false
	}
}

// loop owns the state: it applies events and publishes once every pending
// event is applied, so a burst of changes becomes one Replace.
func (w *watch) loop(ctx context.Context) error {
	defer func() {
		for _, st := range w.services {
			st.e.cancel()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev := <-w.catalog:
			if err := w.onCatalog(ev); err != nil {
				return err
			}
		case ev := <-w.service:
			w.onService(ev)
		case names := <-w.hints:
			w.onHints(names)
		case <-w.reprobeC:
			w.reprobeC = nil
			w.maybeStream(nil)
		case s := <-w.probed:
			w.onProbed(s)
		}
		// Drain what is already waiting before publishing.
		for more := true; more; {
			select {
			case ev := <-w.catalog:
				if err := w.onCatalog(ev); err != nil {
					return err
				}
			case ev := <-w.service:
				w.onService(ev)
			default:
				more = false
			}
		}
		w.maybePublish()
	}
}

func (w *watch) onCatalog(ev catalogEvent) error {
	if ev.err != nil {
		var se api.StatusError
		if !w.pub.Published() && errors.As(ev.err, &se) && se.Code == http.StatusForbidden {
			// Bad credentials before the first sync: restarting will not help.
			return registries.Permanent(fmt.Errorf("consul catalog: %w", ev.err))
		}
		w.catalogOK = false
		w.degrade("catalog", ev.err)
		return nil
	}
	w.catalogOK = true
	want := make(map[string]bool, len(ev.services))
	for name, tags := range ev.services {
		if hasAll(tags, w.r.cfg.Tags) {
			want[name] = true
		}
	}
	for name, st := range w.services {
		if !want[name] {
			st.e.cancel()
			if !st.ready() {
				w.notReady--
			}
			if st.e.streamed {
				st.e.f.cancel()
			} else {
				w.httpServices--
			}
			delete(w.services, name)
			if w.pub.Delete(name) {
				w.pub.Changed(ev.at)
			}
		}
	}
	var added []string
	for name := range want {
		if _, ok := w.services[name]; !ok {
			added = append(added, name)
		}
	}
	w.maybeStream(added)
	for _, name := range added {
		ectx, cancel := context.WithCancel(w.ctx)
		e := &entry{name: name, ctx: ectx, cancel: cancel, streamed: w.stream != nil}
		w.services[name] = &serviceState{e: e}
		w.notReady++
		if e.streamed {
			e.f = &follower{w: w, e: e, b: w.backoff()}
			w.startStarters()
			w.sq.push(e)
		} else {
			w.httpServices++
			w.q.push(e)
		}
	}
	w.active.Store(int64(w.httpServices))
	w.updateSlots()
	w.r.m.watched.Set(float64(len(w.services)))
	return nil
}

// streamAbove is the most services streaming auto serves from blocking
// queries over plain HTTP when the agent's limit would leave a connection
// for each: above it they follow the event stream even then. A blocking
// query over HTTP/1.1 holds a connection, net/http's two goroutines for
// it and a worker (about 26 KB per service held at 10,000 services, 2.68
// KB per endpoint with 10 instances each, against 0.69 KB on the stream;
// bench/analysis.md), and a goroutine and connection on the agent, where
// a subscription costs a view on one shared connection. It is the
// agent's default budget, so that a raised agent limit changes nothing.
const streamAbove = DefaultMaxConcurrentWatches

// maybeStream opens the servers' event stream (openStream) once the
// services, with added, are more than the blocking queries the agent lets
// meshfed hold at once, or more than streamAbove: over HTTP/1.1, unless
// streaming is off. From then on every service follows the stream: those
// served by blocking queries until then (the catalog grew past the
// budget, or the servers refused an earlier probe) move to it (migrate). A refused probe is
// tried again reprobeAfter later (at the next catalog change, or by
// reprobeC). The first probe
// runs on the loop, before the services it decides about have a query;
// the later ones in a goroutine (onProbed), since a probe may wait
// probeTimeout and the loop serves changes meanwhile.
func (w *watch) maybeStream(added []string) {
	if w.stream != nil || w.probing || w.r.cfg.Streaming == StreamingOff || w.proto.h2.Load() {
		return
	}
	if w.httpServices+len(added) <= min(w.budget, streamAbove) {
		return
	}
	if !w.probedAt.IsZero() && time.Since(w.probedAt) < cmp.Or(w.r.reprobe, reprobeAfter) {
		return // reprobeC is set
	}
	probe := ""
	if len(added) > 0 {
		probe = slices.Min(added)
	} else {
		for name := range w.services {
			probe = name
			break
		}
	}
	if w.probedAt.IsZero() {
		w.onProbed(w.openStream(probe))
		return
	}
	w.probing = true
	w.wg.Go(func() {
		if s := w.openStream(probe); !send(w.ctx, w.probed, s) && s != nil {
			s.close() // the Run ended meanwhile
		}
	})
}

// onProbed takes the result of openStream: a refused probe is tried
// again later (reprobeC); an accepted one serves every service from
// then on.
func (w *watch) onProbed(s *streamer) {
	w.probing = false
	w.probedAt = time.Now()
	if w.stream = s; s == nil {
		w.reprobeC = time.After(cmp.Or(w.r.reprobe, reprobeAfter))
		return
	}
	if w.httpServices > 0 {
		w.migrate()
	}
}

// migrate moves the services served by blocking queries (taking turns)
// to the event stream: each gets a new entry, the old one's query ends.
// Their last answers stay published until their streams have synced.
func (w *watch) migrate() {
	n := 0
	for name, st := range w.services {
		if st.e.streamed {
			continue
		}
		st.e.cancel()
		ectx, cancel := context.WithCancel(w.ctx)
		e := &entry{name: name, ctx: ectx, cancel: cancel, streamed: true}
		e.f = &follower{w: w, e: e, b: w.backoff()}
		st.e = e
		w.startStarters()
		w.sq.push(e)
		n++
	}
	w.httpServices = 0
	w.active.Store(0)
	if w.hinting {
		w.stopHints() // no service takes turns any more
		w.hinting = false
	}
	w.r.log.Info("Consul services moved from blocking queries to the servers' event stream", "services", n)
}

// startStarters starts the goroutines that open event streams, once.
func (w *watch) startStarters() {
	if w.starters {
		return
	}
	w.starters = true
	for range min(cap(w.firsts), DefaultMaxConcurrentWatches) {
		w.wg.Go(w.starter)
	}
}

// hasAll reports whether the union of a service's instance tags can
// satisfy the tag filter at all.
func hasAll(tags, required []string) bool {
	for _, t := range required {
		if !slices.Contains(tags, t) {
			return false
		}
	}
	return true
}

// onHints asks the named services next, ahead of their turn (a service
// whose query is in flight needs nothing: its index moved, so the query
// returns).
func (w *watch) onHints(names []string) {
	hinted := make(map[string]bool, len(names))
	for _, name := range names {
		hinted[name] = true
	}
	for _, name := range names {
		if st, ok := w.services[name]; ok && w.q.promote(st.e) {
			w.r.m.hinted.Inc()
			// Every worker is waiting out a turn: end the oldest turn of a
			// service not hinted (one hinted returns by itself), which is
			// asked again at its next turn, so that a worker takes the
			// hinted service now.
			w.turns.endOldest(hinted)
		}
	}
}

// turns are the round-robin queries in flight.
type turns struct {
	mu sync.Mutex
	m  map[*entry]turnQuery
}

type turnQuery struct {
	cancel context.CancelFunc
	since  time.Time
}

// start registers e's turn query and returns its context and the func
// that forgets it.
func (t *turns) start(e *entry) (context.Context, func()) {
	ctx, cancel := context.WithCancel(e.ctx)
	t.mu.Lock()
	if t.m == nil {
		t.m = map[*entry]turnQuery{}
	}
	t.m[e] = turnQuery{cancel, time.Now()}
	t.mu.Unlock()
	return ctx, func() {
		t.mu.Lock()
		delete(t.m, e)
		t.mu.Unlock()
		cancel()
	}
}

// endOldest ends the turn query that has waited longest, of a service
// not in skip.
func (t *turns) endOldest(skip map[string]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var oldest *entry
	for e, q := range t.m {
		if !skip[e.name] && (oldest == nil || q.since.Before(t.m[oldest].since)) {
			oldest = e
		}
	}
	if oldest != nil {
		t.m[oldest].cancel()
		delete(t.m, oldest)
	}
}

func (w *watch) onService(ev serviceEvent) {
	st, ok := w.services[ev.e.name]
	if !ok || st.e != ev.e {
		return // the service went away meanwhile
	}
	if ev.err != nil {
		if st.ready() {
			w.notReady++
		}
		st.failing = true
		w.degrade("service "+ev.e.name, ev.err)
		return
	}
	if !st.ready() {
		w.notReady--
	}
	st.failing = false
	st.fetched = true
	if w.r.converted != nil {
		w.r.converted(ev.e.name)
	}
	if w.pub.Set(ev.e.name, Convert(w.r.common, w.r.cfg.Datacenter, ev.e.name, ev.entries)) {
		w.pub.Changed(ev.at)
	}
}

func (w *watch) degrade(what string, err error) {
	msg := fmt.Sprintf("consul %s: %v", what, err)
	if se := (api.StatusError{}); errors.As(err, &se) && se.Code == http.StatusTooManyRequests {
		msg += fmt.Sprintf(" (the agent's limits.http_max_conns_per_client: this registry holds up to %d connections, other clients on this address the rest)", w.budget+extraConns)
	}
	w.pub.Report(registries.Condition{Err: msg})
}

// maybePublish publishes the full state when it changed (or an outage
// ended) and every watched service has answered: never a partial list.
func (w *watch) maybePublish() {
	if !w.catalogOK {
		return
	}
	if w.notReady > 0 {
		return
	}
	w.pub.Flush(registries.Condition{})
	w.syncOnce.Do(func() { close(w.synced) })
}

// queue hands watched services to workers, first in first out.
type queue struct {
	mu     sync.Mutex
	items  []*entry
	notify chan struct{} // closed and replaced when items are added
}

func newQueue() *queue { return &queue{notify: make(chan struct{})} }

func (q *queue) push(e *entry) {
	q.mu.Lock()
	q.items = append(q.items, e)
	close(q.notify)
	q.notify = make(chan struct{})
	q.mu.Unlock()
}

// promote moves e to the front of the queue; false when it is not queued.
func (q *queue) promote(e *entry) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	i := slices.Index(q.items, e)
	if i < 0 {
		return false
	}
	copy(q.items[1:i+1], q.items[:i])
	q.items[0] = e
	return true
}

// pop takes the oldest entry, waiting for one; false when ctx ended.
func (q *queue) pop(ctx context.Context) (*entry, bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			e := q.items[0]
			q.items[0] = nil
			q.items = q.items[1:]
			q.mu.Unlock()
			return e, true
		}
		ch := q.notify
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, false
		}
	}
}
