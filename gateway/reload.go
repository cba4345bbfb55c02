package gateway

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/config"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// Reload reads clusters.yaml from path and applies it to the running
// gateway (see Apply). A file that does not load keeps the running
// configuration; the error is logged and shown on /readyz until a reload
// succeeds.
func (g *Gateway) Reload(ctx context.Context, path string) error {
	cfg, err := config.Load(path)
	if err != nil {
		g.log.Error("clusters.yaml reload failed; the running configuration stays", "path", path, "error", err)
		g.setReload(admin.ReloadStatus{At: time.Now(), Path: path, Error: err.Error()})
		return err
	}
	return g.Apply(ctx, cfg)
}

// Apply makes cfg's registries the running ones, make-before-break:
// registries that left cfg are stopped and their services withdrawn;
// new ones are started; a registry whose entry changed gets a new instance
// that runs beside the old one, which keeps serving until the new one has
// published its first full state (or syncTimeout passed); then the old one
// is stopped and the new state replaces the old in one snapshot. Settings
// outside registries that need new listeners or a new aggregator
// (xds, admin, debounce, syncTimeout, state, configSources) keep their running values and
// are listed in the reload status. Apply returns when every change is
// done; calls are serialized.
func (g *Gateway) Apply(ctx context.Context, cfg *config.Config) error {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	g.dyn.mu.Lock()
	old := g.dyn.cfg
	running := g.dyn.sup != nil
	g.dyn.mu.Unlock()
	if !running {
		return fmt.Errorf("reload %s: the gateway is not running", cfg.Path)
	}
	st := admin.ReloadStatus{At: time.Now(), Path: cfg.Path, OK: true, Kept: keptSettings(old, cfg)}
	// The settings that cannot change keep their running values.
	next := *cfg
	next.XDS, next.Admin, next.Debounce, next.SyncTimeout, next.State = old.XDS, old.Admin, old.Debounce, old.SyncTimeout, old.State
	next.ConfigSources = old.ConfigSources
	if len(st.Kept) > 0 {
		g.log.Warn("clusters.yaml changes that need a restart are not applied", "settings", strings.Join(st.Kept, ", "))
	}

	was := map[string]config.Registry{}
	for _, r := range old.Registries {
		was[r.Name] = r
	}
	var added, changed, removed []config.Registry
	now := map[string]bool{}
	for _, r := range next.Registries {
		now[r.Name] = true
		o, ok := was[r.Name]
		switch {
		case !ok:
			added = append(added, r)
		case !reflect.DeepEqual(o, r):
			changed = append(changed, r)
		}
	}
	for _, r := range old.Registries {
		if !now[r.Name] {
			removed = append(removed, r)
		}
	}

	// Make: start the new instances of changed registries beside the old.
	var wg sync.WaitGroup
	for _, r := range changed {
		wg.Go(func() { g.replace(ctx, r) })
	}
	for _, r := range added {
		g.log.Info("registry added by reload", "registry", r.Name, "kind", r.Kind)
		g.agg.AddRegistry(aggregateOptions(r))
		g.restore(r)
		e := g.newEntry(r)
		e.runner = g.newRunner(e, g.agg)
		g.dyn.mu.Lock()
		g.dyn.entries[r.Name] = e
		g.startLocked(e)
		g.dyn.mu.Unlock()
	}
	wg.Wait()
	// Break: removed registries go.
	for _, r := range removed {
		g.log.Info("registry removed by reload", "registry", r.Name, "kind", r.Kind)
		g.dyn.mu.Lock()
		e := g.dyn.entries[r.Name]
		delete(g.dyn.entries, r.Name)
		g.dyn.mu.Unlock()
		if e != nil {
			g.stop(e)
			g.retire(e, 0)
		}
		g.agg.RemoveRegistry(r.Name)
		if g.store != nil {
			g.store.Delete(r.Name)
		}
	}
	g.dyn.mu.Lock()
	g.dyn.cfg = &next
	g.dyn.mu.Unlock()
	g.setReload(st)
	g.log.Info("clusters.yaml reloaded", "path", cfg.Path, "added", names(added), "changed", names(changed), "removed", names(removed))
	return nil
}

// replace runs the new instance of a changed registry and swaps it in once
// it has published (make-before-break).
func (g *Gateway) replace(ctx context.Context, r config.Registry) {
	log := g.log.With("registry", r.Name, "kind", r.Kind)
	gate := &gateSink{agg: g.agg, shard: r.Common().Shard(), first: make(chan struct{})}
	e := g.newEntry(r)
	runner, err := g.newRunnerQuiet(e, gate)
	if err != nil {
		gate.updates = []registries.Update{{Condition: registries.Condition{Err: err.Error()}, Ended: true, Permanent: true}}
	}
	e.runner = runner
	g.dyn.mu.Lock()
	old := g.dyn.entries[r.Name]
	g.startLocked(e)
	g.dyn.mu.Unlock()
	log.Info("registry changed by reload: starting the new instance beside the old one")

	timeout := time.NewTimer(g.config().SyncTimeout.Std())
	defer timeout.Stop()
	synced := false
	if runner != nil {
		select {
		case <-gate.first:
			synced = true
		case <-timeout.C:
		case <-ctx.Done():
		}
	}
	if old != nil {
		g.stop(old)
		// What the old instance started at runtime (secretDiscovery) runs
		// on until the new instance takes it over, or for syncTimeout.
		g.retire(old, g.config().SyncTimeout.Std())
	}
	g.dyn.mu.Lock()
	g.dyn.entries[r.Name] = e
	g.dyn.mu.Unlock()
	gate.open(aggregateOptions(r))
	if synced {
		log.Info("new instance synced; old instance stopped and replaced")
	} else {
		log.Warn("new instance did not sync in time; old instance stopped, its last state stays until the new one publishes",
			"syncTimeout", g.config().SyncTimeout)
	}
}

// newRunnerQuiet is newRunner for an instance that must not touch the
// aggregator before it is swapped in: a block that cannot build a
// registry is returned as an error (reported Failed once swapped in).
func (g *Gateway) newRunnerQuiet(e *entry, sink registries.Sink) (*registries.Runner, error) {
	r := e.cfg
	c := r.Common()
	rlog := g.log.With("registry", r.Name, "kind", r.Kind)
	reg, err := r.Block.New(c, rlog)
	if err != nil {
		rlog.Error("registry cannot start", "error", err)
		return nil, err
	}
	if lu, ok := reg.(registries.LauncherUser); ok {
		lu.SetLauncher(instanceLauncher{g, e})
	}
	return registries.NewRunner(c, reg, sink, rlog), nil
}

// gateSink holds back a new registry instance's updates until open: they
// are kept in order, and first is closed at the first state the aggregator
// would apply (not a partial first state it would hold: see
// aggregate.Aggregator.Publish). Once open, updates pass straight to the
// aggregator.
type gateSink struct {
	agg interface {
		registries.Sink
		swapper
	}
	shard model.ShardKey
	first chan struct{}

	mu        sync.Mutex
	opened    bool
	published bool                // first is closed
	applied   bool                // a state of the instance's current Run would be applied
	updates   []registries.Update // kept until open, oldest first
}

type swapper interface {
	Swap(o aggregate.RegistryOptions, us ...registries.Update)
	AddRegistry(o aggregate.RegistryOptions)
	HoldsFirst(shard model.ShardKey, u registries.Update) bool
}

// Publish implements registries.Sink.
func (s *gateSink) Publish(shard model.ShardKey, u registries.Update) {
	s.mu.Lock()
	if s.opened {
		s.mu.Unlock()
		s.agg.Publish(shard, u)
		return
	}
	defer s.mu.Unlock()
	switch {
	case u.Ended:
		s.applied = false // the next state is the first of a new Run
	case u.HasState && (s.applied || !s.agg.HoldsFirst(s.shard, u)):
		s.applied = true
		if !s.published {
			s.published = true
			close(s.first)
		}
	}
	s.updates = append(s.updates, u)
}

// TakesDelta implements registries.DeltaSink: the aggregator takes
// deltas, also staged ones (Swap applies them in order).
func (s *gateSink) TakesDelta() bool { return registries.TakesDelta(s.agg) }

// open swaps the new instance in: its options and everything it published
// (also what arrived after syncTimeout, while the old instance was
// stopping), as the first Run of the registry, in one step.
func (s *gateSink) open(o aggregate.RegistryOptions) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.agg.Swap(o, s.updates...)
	s.opened, s.updates = true, nil
}

// keptSettings lists the settings outside registries that differ.
func keptSettings(old, cfg *config.Config) []string {
	var out []string
	add := func(name string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			out = append(out, name)
		}
	}
	add("xds", old.XDS, cfg.XDS)
	add("admin", old.Admin, cfg.Admin)
	add("debounce", old.Debounce, cfg.Debounce)
	add("syncTimeout", old.SyncTimeout, cfg.SyncTimeout)
	add("state", old.State, cfg.State)
	add("configSources", old.ConfigSources, cfg.ConfigSources)
	return out
}

func names(rs []config.Registry) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out
}

// setReload records the last reload's outcome.
func (g *Gateway) setReload(st admin.ReloadStatus) {
	g.dyn.mu.Lock()
	g.dyn.reload = &st
	g.dyn.mu.Unlock()
}

// LastReload returns the outcome of the last reload, or nil if none
// happened.
func (g *Gateway) LastReload() *admin.ReloadStatus {
	g.dyn.mu.Lock()
	defer g.dyn.mu.Unlock()
	if g.dyn.reload == nil {
		return nil
	}
	st := *g.dyn.reload
	return &st
}
