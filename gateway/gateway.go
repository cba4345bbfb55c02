// Package gateway runs one clusters.yaml (package config): a supervised
// registry per entry, the aggregator, the xDS server, the config sources
// and the admin listener (package admin, which reads the gateway through
// admin.Gateway); registries started at runtime (launch.go); and reloads
// of clusters.yaml, make-before-break (reload.go).
package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/thejerf/suture/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/config"
	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/statestore"
	"github.com/meshfed/meshfed/xds"
	"github.com/meshfed/meshfed/xds/ads"
)

// drainTimeout bounds how long shutdown waits for xDS streams to close.
const drainTimeout = 5 * time.Second

// readyPoll is how often Run checks whether every registry has synced.
const readyPoll = 20 * time.Millisecond

// GatewayOptions are the process-level settings of a Gateway.
type GatewayOptions struct {
	Logger *slog.Logger
	// Version and Revision name the build on meshfed_build_info and in
	// the start-up log line.
	Version  string
	Revision string
	// Level, when set, is the level of Logger's handler: PUT
	// /debug/loglevel changes it at run time. Nil: a level variable of
	// its own that changes nothing.
	Level *slog.LevelVar
}

// Gateway wires one clusters.yaml into running parts: a supervised
// registry per entry, the aggregator, the xDS server and the admin API.
// Reload applies a new clusters.yaml to the running parts.
type Gateway struct {
	log         *slog.Logger
	version     string
	revision    string
	agg         *aggregate.Aggregator
	xds         *xds.Server
	store       *statestore.Store   // nil without state.dir
	traffic     *istioconfig.Source // nil without configSources
	started     time.Time           // NewGateway: configSyncTimeout counts from here
	trafficLate atomic.Bool         // served without a config source after configSyncTimeout
	metrics     *prometheus.Registry
	dyn         runtimeRegistries // guards cfg and entries too; registries started at runtime (launch.go)
	admin       *admin.Server     // the admin API (package admin)
	level       *slog.LevelVar
	serving     atomic.Bool // xDS listener accepting
	draining    atomic.Bool
	reloadMu    sync.Mutex  // one Reload at a time
	digests     digestCache // content digest of the served snapshot (digest.go)
	gens        atomic.Uint64
}

// newEntry returns a new instance of entry r, without its runner.
func (g *Gateway) newEntry(r config.Registry) *entry { return &entry{cfg: r, gen: g.gens.Add(1)} }

// entry is a running clusters.yaml registry: one instance of an entry (a
// reload that changes the entry makes a new one).
type entry struct {
	cfg    config.Registry
	gen    uint64             // order of creation: a later instance has a higher one
	runner *registries.Runner // nil: its block could not build a registry (Failed)
	token  suture.ServiceToken
	added  bool // token is valid: added to the root supervisor
}

// NewGateway builds every part from cfg without starting anything or doing
// network I/O. A registry whose block cannot build a registry is reported
// Failed; it does not stop the others.
func NewGateway(cfg *config.Config, o GatewayOptions) (*Gateway, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{
		log:      log,
		version:  o.Version,
		revision: o.Revision,
		metrics:  prometheus.NewRegistry(),
		level:    o.Level,
	}
	if g.level == nil {
		g.level = new(slog.LevelVar)
	}
	srv, err := admin.New(g, cfg.Admin, admin.Options{Logger: log, Level: g.level, Version: o.Version})
	if err != nil {
		return nil, err
	}
	g.admin = srv
	g.dyn.cfg = cfg
	g.dyn.entries = make(map[string]*entry)
	var onAccepted func(model.ShardKey, aggregate.Accepted)
	if cfg.State.Dir != "" {
		st, err := statestore.Open(cfg.State.Dir, log.With("component", "state"))
		if err != nil {
			return nil, err
		}
		g.store = st
		onAccepted = st.Accept
	}
	g.agg = aggregate.New(aggregate.Options{
		Quiet:       time.Duration(cfg.Debounce.Quiet),
		MaxWait:     time.Duration(cfg.Debounce.Max),
		SyncTimeout: time.Duration(cfg.SyncTimeout),
		OnAccepted:  onAccepted,
		Logger:      log.With("component", "aggregate"),
	})
	g.xds = xds.NewServer(xds.Options{Logger: log.With("component", "xds"), Limits: ads.Limits{
		MaxTypeURLs: cfg.XDS.Limits.MaxTypeURLs, MaxNames: cfg.XDS.Limits.MaxNames,
		MaxResponseBytes: cfg.XDS.Limits.MaxResponseBytes,
	}, RootNamespace: cfg.XDS.RootNamespace, RestoreHold: time.Duration(cfg.SyncTimeout)})
	g.agg.Subscribe(g.xds.Update)
	g.traffic = newTrafficSource(cfg, log.With("component", "istioconfig"))
	g.started = time.Now()

	for _, r := range cfg.Registries {
		g.agg.AddRegistry(aggregateOptions(r))
		g.restore(r)
		e := g.newEntry(r)
		e.runner = g.newRunner(e, g.agg)
		g.dyn.entries[r.Name] = e
	}
	if err := g.registerMetrics(); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *Gateway) registerMetrics() error {
	cs := []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfoGauge(g.version, g.revision),
		digestCollector{g},
	}
	cs = append(cs, aggregate.Collectors()...)
	cs = append(cs, xds.Collectors()...)
	cs = append(cs, istioconfig.Collectors()...)
	cs = append(cs, registries.Collectors()...)
	cs = append(cs, registries.KindCollectors()...)
	cs = append(cs, statestore.Collectors()...)
	cs = append(cs, restartsCollector{g})
	for _, c := range cs {
		if err := g.metrics.Register(c); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	return nil
}

// waitReady polls the aggregator until it is ready and the xDS server has
// applied the snapshot it was ready with (the aggregator turns ready just
// before it hands that snapshot to its subscribers: a client served in
// between would be told that everything is gone), and reports whether it
// is (false: ctx ended first).
//
// With config sources it also waits until each has been read completely
// (a Kubernetes source's informers synced, or Failed; bounded by
// configSyncTimeout) and the aggregator's snapshot carries what they hold: a client must not
// see routes arrive after the services, nor services without their
// DestinationRules (no TLS origination: docs/architecture.md §3.6).
func (g *Gateway) waitReady(ctx context.Context) bool {
	t := time.NewTicker(readyPoll)
	defer t.Stop()
	for {
		if ok, _ := g.agg.Ready(); ok && g.trafficApplied() && g.xds.Version() >= g.agg.Snapshot().Version {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// Run serves until ctx ends, then drains: it stops accepting xDS streams,
// closes the open ones, stops the registries and returns nil. It returns an
// error if it cannot listen or a server fails.
func (g *Gateway) Run(ctx context.Context) error {
	cfg := g.config()
	xdsLis, err := net.Listen("tcp", cfg.XDS.Address)
	if err != nil {
		return fmt.Errorf("xds.address: %w", err)
	}
	adminLis, err := net.Listen("tcp", cfg.Admin.Address)
	if err != nil {
		xdsLis.Close()
		return fmt.Errorf("admin.address: %w", err)
	}
	if t := g.config().Admin.TLS; t != nil {
		tc, err := serverTLS(t)
		if err != nil {
			xdsLis.Close()
			adminLis.Close()
			return fmt.Errorf("admin.tls: %w", err)
		}
		if tc.ClientAuth == tls.RequireAndVerifyClientCert {
			// Probes reach /healthz and /readyz without a certificate;
			// package admin requires one for everything else.
			tc.ClientAuth = tls.VerifyClientCertIfGiven
		}
		adminLis = tls.NewListener(adminLis, tc)
	}
	gs, err := g.grpcServer()
	if err != nil {
		xdsLis.Close()
		adminLis.Close()
		return err
	}
	g.xds.Register(gs)
	adminSrv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second}

	if g.traffic != nil {
		// The first read of the config sources lands before any registry
		// can make the aggregator ready: no client sees routes arrive late.
		g.traffic.Reload()
		g.agg.SetConfig(g.traffic.Snapshot())
	}
	sup := registries.NewSupervisor("meshfed", g.log)
	sup.Add(g.agg)
	if g.store != nil {
		sup.Add(g.store)
	}
	if g.traffic != nil {
		sup.Add(trafficService{g.traffic, g.agg})
	}
	supCtx, stopSup := context.WithCancel(context.WithoutCancel(ctx))
	g.setSupervisor(sup, supCtx)
	defer g.setSupervisor(nil, nil)
	g.dyn.mu.Lock()
	for _, e := range g.dyn.entries {
		g.startLocked(e)
	}
	g.dyn.mu.Unlock()
	supDone := sup.ServeBackground(supCtx)

	adminDone := make(chan error, 1)
	go func() { adminDone <- adminSrv.Serve(adminLis) }()
	g.log.Info("meshfed started; xDS waits for the first sync of every registry", "version", g.version, "revision", g.revision,
		"xds", xdsLis.Addr().String(), "admin", adminLis.Addr().String(), "registries", len(cfg.Registries), "stateDir", cfg.State.Dir)

	// xDS serves only once the model is complete (every registry synced,
	// failed or past syncTimeout): a proxy that reconnects to a restarted
	// meshfed must not be told that services of a slower registry are gone.
	// Until then connections wait in the listen backlog.
	grpcDone := make(chan error, 1)
	var runErr error
	if g.waitReady(ctx) {
		go func() { grpcDone <- gs.Serve(xdsLis) }()
		g.serving.Store(true)
		_, why := g.agg.Ready()
		g.log.Info("xDS serving", "xds", xdsLis.Addr().String(), "version", g.xds.Version(), "notSynced", why)
		select {
		case <-ctx.Done():
		case err := <-grpcDone:
			runErr = fmt.Errorf("xds server: %w", err)
		case err := <-adminDone:
			runErr = fmt.Errorf("admin server: %w", err)
		}
	} else {
		xdsLis.Close()
	}

	g.log.Info("draining")
	g.draining.Store(true)
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }() // no new streams from here on
	g.xds.Close()                                     // ends the open streams
	select {
	case <-stopped:
	case <-time.After(drainTimeout):
		g.log.Warn("xDS streams did not close in time; stopping hard", "timeout", drainTimeout)
		gs.Stop()
		<-stopped
	}
	stopSup()
	if err := <-supDone; err != nil && !errors.Is(err, context.Canceled) {
		g.log.Warn("supervisor stopped", "error", err)
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	_ = adminSrv.Shutdown(shutCtx)
	g.serving.Store(false)
	g.log.Info("stopped")
	return runErr
}

func (g *Gateway) grpcServer() (*grpc.Server, error) {
	cfg := g.config()
	opts := []grpc.ServerOption{
		grpc.MaxConcurrentStreams(100000),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if t := cfg.XDS.TLS; t != nil {
		tc, err := serverTLS(t)
		if err != nil {
			return nil, fmt.Errorf("xds.tls: %w", err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	return grpc.NewServer(append(ads.ServerOptions(), opts...)...), nil
}

func serverTLS(t *config.TLS) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if t.ClientCA != "" {
		pem, err := os.ReadFile(t.ClientCA)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("clientCA %s: no PEM certificates", t.ClientCA)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// config returns the running configuration.
func (g *Gateway) config() *config.Config {
	g.dyn.mu.Lock()
	defer g.dyn.mu.Unlock()
	return g.dyn.cfg
}

// newRunner builds the registry of instance e publishing to sink, or
// reports it Failed (nil) when its block cannot build one.
func (g *Gateway) newRunner(e *entry, sink registries.Sink) *registries.Runner {
	run, err := g.newRunnerQuiet(e, sink)
	if err != nil {
		g.agg.Publish(e.cfg.Common().Shard(), registries.Update{Condition: registries.Condition{Err: err.Error()}, Ended: true, Permanent: true})
		return nil
	}
	return run
}

// restore hands the aggregator the state saved for r, if state.dir is set
// and holds one younger than state.maxAge, then revives r's name in the
// store (statestore.Store.Revive): a registry removed by a reload and added
// back restores nothing of its removed instance, and its new instance's
// states are saved. Call it before r's runner starts.
func (g *Gateway) restore(r config.Registry) {
	if g.store == nil {
		return
	}
	cfg := g.config()
	log := g.log.With("registry", r.Name, "component", "state")
	e, ok, err := g.store.Load(r.Name, r.Kind, cfg.State.MaxAge.Std())
	switch {
	case err != nil:
		log.Warn("saved state not restored", "error", err)
	case ok && g.agg.Restore(r.Common().Shard(), e.Services, e.Rejected):
		log.Info("restored saved state; served until the registry syncs", "services", len(e.Services),
			"savedAt", e.SavedAt.Format(time.RFC3339))
	}
	g.store.Revive(r.Name)
}

// startLocked adds e's registry to the root supervisor under its own child
// supervisor, if the gateway runs. Called with dyn.mu held.
func (g *Gateway) startLocked(e *entry) {
	if g.dyn.sup == nil || e.runner == nil || e.added {
		return
	}
	child := registries.NewSupervisor("registry "+e.cfg.Name, g.log) // its events add the registry key
	child.Add(e.runner)
	e.token = g.dyn.sup.Add(child)
	e.added = true
}

// stop stops e's registry and waits for its Run to return.
func (g *Gateway) stop(e *entry) {
	g.dyn.mu.Lock()
	sup, added := g.dyn.sup, e.added
	e.added = false
	g.dyn.mu.Unlock()
	if sup == nil || !added {
		return
	}
	if err := sup.RemoveAndWait(e.token, registries.SupervisorTimeout); err != nil {
		g.log.Warn("registry did not stop cleanly", "registry", e.cfg.Name, "error", err)
	}
}

// trafficService runs the config sources under the supervisor, handing
// every snapshot of what is in force to the aggregator (sources →
// aggregate → xds, docs/architecture.md §3.6).
type trafficService struct {
	src *istioconfig.Source
	agg *aggregate.Aggregator
}

func (t trafficService) Serve(ctx context.Context) error { return t.src.Run(ctx, t.agg.SetConfig) }

func (t trafficService) String() string { return "istioconfig" }

// configSyncFactor: a Kubernetes config source's cluster that has not
// listed its objects once is waited for configSyncFactor × syncTimeout from
// start (twice what a registry gets: config objects are not saved across
// restarts, services are), then served without (docs/architecture.md §3.6).
const configSyncFactor = 2

// configSyncTimeout is how long readiness waits for the config sources.
func (g *Gateway) configSyncTimeout() time.Duration {
	return configSyncFactor * g.config().SyncTimeout.Std()
}

// trafficApplied reports whether the config sources are ready (or
// configSyncTimeout passed since start) and the aggregator's latest
// snapshot holds what they have in force. Until then serving would serve
// hosts without their traffic rules — e.g. plaintext to a backend a
// DestinationRule originates TLS to; proxies connected elsewhere keep their
// last config meanwhile, and /readyz names the cluster waited for. A Failed
// cluster (no CRDs, no rights) is not waited for.
func (g *Gateway) trafficApplied() bool {
	if g.traffic == nil {
		return true
	}
	if ok, why := g.traffic.Ready(); !ok {
		if time.Since(g.started) < g.configSyncTimeout() {
			return false
		}
		if g.trafficLate.CompareAndSwap(false, true) {
			g.log.Warn("serving without config sources that did not sync within configSyncTimeout (2×syncTimeout); their rules apply once they sync",
				"configSyncTimeout", g.configSyncTimeout(), "reason", why)
		}
	}
	return g.agg.Snapshot().Config == g.traffic.Snapshot()
}

// TrafficNotes describes, for /readyz, the config sources served without:
// Failed ones and those still unsynced after configSyncTimeout; "" if none.
func (g *Gateway) TrafficNotes() string {
	if g.traffic == nil {
		return ""
	}
	notes := g.traffic.Failures()
	if ok, why := g.traffic.Ready(); !ok && g.trafficLate.Load() {
		notes = append(notes, fmt.Sprintf("no sync within configSyncTimeout %s: %s", g.configSyncTimeout(), why))
	}
	return strings.Join(notes, "; ")
}

// TrafficConfig returns what the config sources hold in force and what
// they rejected (/debug/configz); empty without configSources.
func (g *Gateway) TrafficConfig() istioconfig.Status {
	if g.traffic == nil {
		return istioconfig.Status{InForce: []istioconfig.ObjectStatus{}, Rejected: []istioconfig.Rejection{}}
	}
	return g.traffic.Status()
}
