package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/thejerf/suture/v4"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/config"
	"github.com/meshfed/meshfed/registries"
)

// runtimeRegistries are the registries started while the gateway runs
// (Kubernetes remote clusters found by secretDiscovery), on top of the
// clusters.yaml entries.
type runtimeRegistries struct {
	mu       sync.Mutex
	sup      *suture.Supervisor // the root supervisor while Run runs, else nil
	ctx      context.Context    // ends when sup stops; nil with sup
	launched map[string]*launched
	// The clusters.yaml registries and the configuration they come from;
	// Reload replaces both.
	cfg     *config.Config
	entries map[string]*entry
	reload  *admin.ReloadStatus // last reload; nil before the first
}

// launched is a registry started at runtime.
type launched struct {
	name   string
	parent string
	owner  *entry // the instance of parent that launched it; nil through Gateway.Launch
	runner *registries.Runner
	sup    *suture.Supervisor
	token  suture.ServiceToken
	log    *slog.Logger
	// replacing is the instance of the same name this one takes over from
	// once it published (make-before-break); nil once done.
	replacing *launched
	stopped   bool // removed from sup (guarded by dyn.mu)
	once      sync.Once
}

var _ registries.Launcher = (*Gateway)(nil)

// Launch implements registries.Launcher for callers outside a clusters.yaml
// registry (no owning instance): see launch.
func (g *Gateway) Launch(parent string, c registries.Common, reg registries.Registry) (stop func(), err error) {
	return g.launch(nil, parent, c, reg)
}

// instanceLauncher is the Launcher one instance of a clusters.yaml
// registry gets: what it launches is owned by that instance.
type instanceLauncher struct {
	g     *Gateway
	owner *entry
}

func (l instanceLauncher) Launch(parent string, c registries.Common, reg registries.Registry) (func(), error) {
	return l.g.launch(l.owner, parent, c, reg)
}

// launch runs reg like a clusters.yaml entry named c.Name (own child
// supervisor, on /healthz/registries, counted for /readyz), with the
// outage and maxDeleteRatio of the entry named parent. It fails if the
// name is a clusters.yaml entry, if the gateway is not running, or if the
// name runs already — except when owner is a newer instance of the parent
// than the one that launched the running registry (a reload replaced the
// parent, docs/architecture.md "Reload"): then reg takes over
// make-before-break, as a changed entry does: it runs beside the old
// registry, which keeps serving until reg has published its first state
// or syncTimeout passed; then the old one is stopped and reg's state
// replaces its state in one snapshot. Both run at most that long, and only
// one publishes at a time.
//
// stop removes the registry again: it waits for reg to stop, then its
// services leave the model (unless another instance took the name over).
func (g *Gateway) launch(owner *entry, parent string, c registries.Common, reg registries.Registry) (stop func(), err error) {
	syncTimeout := g.config().SyncTimeout.Std()
	g.dyn.mu.Lock()
	defer g.dyn.mu.Unlock()
	if g.dyn.sup == nil {
		return nil, fmt.Errorf("registry %q: the gateway is not running", c.Name)
	}
	opts := aggregate.RegistryOptions{Common: c, Multicluster: config.Multicluster(c.Kind)}
	for _, r := range g.dyn.cfg.Registries {
		if r.Name == c.Name {
			return nil, fmt.Errorf("registry %q already exists in the configuration", c.Name)
		}
		if r.Name == parent {
			p := aggregateOptions(r)
			opts.Outage, opts.MaxDeleteRatio = p.Outage, p.MaxDeleteRatio
		}
	}
	old := g.dyn.launched[c.Name]
	if old != nil && !(owner != nil && old.owner != nil && old.parent == parent && owner.gen > old.owner.gen) {
		return nil, fmt.Errorf("registry %q already exists", c.Name)
	}
	l := &launched{name: c.Name, parent: parent, owner: owner, sup: g.dyn.sup,
		log: g.log.With("registry", c.Name, "kind", c.Kind, "parent", parent)}
	var sink registries.Sink = g.agg
	var gate *gateSink
	if old != nil {
		gate = &gateSink{agg: g.agg, shard: c.Shard(), first: make(chan struct{})}
		sink, l.replacing = gate, old
	} else {
		g.agg.AddRegistry(opts)
	}
	l.runner = registries.NewRunner(c, reg, sink, l.log)
	child := registries.NewSupervisor("registry "+c.Name, g.log) // its events add the registry key
	child.Add(l.runner)
	l.token = l.sup.Add(child)
	g.dyn.launched[c.Name] = l
	if old == nil {
		l.log.Info("registry started at runtime")
	} else {
		l.log.Info("registry started at runtime by the parent's new instance, beside the old one until it published")
		go g.takeOver(g.dyn.ctx, l, gate, opts, syncTimeout)
	}
	return func() { l.once.Do(func() { g.stopLaunched(l) }) }, nil
}

// takeOver swaps l in for l.replacing once l published through gate (or
// timeout passed): the old instance is stopped, then l's options and state
// replace its own in one step. Nothing happens if l was stopped meanwhile.
func (g *Gateway) takeOver(ctx context.Context, l *launched, gate *gateSink, opts aggregate.RegistryOptions, timeout time.Duration) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	synced := false
	select {
	case <-gate.first:
		synced = true
	case <-t.C:
	case <-ctx.Done():
		return // shutting down: the supervisor stops both
	}
	g.dyn.mu.Lock()
	old := l.replacing
	l.replacing = nil
	current := g.dyn.launched[l.name] == l
	g.dyn.mu.Unlock()
	if old != nil {
		g.stopRunner(old)
	}
	if !current {
		return
	}
	g.dyn.mu.Lock()
	if g.dyn.launched[l.name] == l { // not stopped while the old one stopped
		gate.open(opts)
	}
	g.dyn.mu.Unlock()
	if synced {
		l.log.Info("new instance published; old instance stopped and replaced")
	} else {
		l.log.Warn("new instance did not publish in time; old instance stopped, its last state stays until the new one publishes",
			"syncTimeout", timeout)
	}
}

// stopLaunched stops l, and the instance it is taking over from, and
// removes its registry from the aggregator unless another instance has
// taken the name over.
func (g *Gateway) stopLaunched(l *launched) {
	g.dyn.mu.Lock()
	current := g.dyn.launched[l.name] == l
	if current {
		delete(g.dyn.launched, l.name)
	}
	old := l.replacing
	l.replacing = nil
	g.dyn.mu.Unlock()
	if old != nil {
		g.stopRunner(old)
	}
	g.stopRunner(l)
	if current {
		g.agg.RemoveRegistry(l.name)
		l.log.Info("registry removed at runtime")
	}
}

// stopRunner removes l's runner from the supervisor and waits for it, once.
func (g *Gateway) stopRunner(l *launched) {
	g.dyn.mu.Lock()
	done := l.stopped
	l.stopped = true
	g.dyn.mu.Unlock()
	if done {
		return
	}
	if err := l.sup.RemoveAndWait(l.token, registries.SupervisorTimeout); err != nil {
		l.log.Warn("registry did not stop cleanly", "error", err)
	}
}

// retire stops the runtime registries that instance e of a clusters.yaml
// registry launched, after grace, unless a newer instance took them over
// by then (see launch). A reload calls it once e is stopped: with the
// syncTimeout as grace when e was replaced (its new instance discovers the
// same registries again), with none when e's entry was removed.
func (g *Gateway) retire(e *entry, grace time.Duration) {
	stopOrphans := func() {
		g.dyn.mu.Lock()
		var ls []*launched
		for _, l := range g.dyn.launched {
			if l.owner == e {
				ls = append(ls, l)
			}
		}
		g.dyn.mu.Unlock()
		for _, l := range ls {
			l.log.Info("stopping a registry started at runtime: the instance of its parent that started it is gone")
			l.once.Do(func() { g.stopLaunched(l) })
		}
	}
	if grace <= 0 {
		stopOrphans()
		return
	}
	g.dyn.mu.Lock()
	ctx := g.dyn.ctx
	g.dyn.mu.Unlock()
	if ctx == nil {
		return
	}
	go func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
			stopOrphans()
		case <-ctx.Done():
		}
	}()
}

// runner returns the Runner of a configured or runtime registry.
func (g *Gateway) runner(name string) (*registries.Runner, bool) {
	g.dyn.mu.Lock()
	defer g.dyn.mu.Unlock()
	if e, ok := g.dyn.entries[name]; ok && e.runner != nil {
		return e.runner, true
	}
	l, ok := g.dyn.launched[name]
	if !ok {
		return nil, false
	}
	return l.runner, true
}

// setSupervisor makes Launch start registries under sup, which runs until
// ctx ends (nil: refuse).
func (g *Gateway) setSupervisor(sup *suture.Supervisor, ctx context.Context) {
	g.dyn.mu.Lock()
	defer g.dyn.mu.Unlock()
	g.dyn.sup, g.dyn.ctx = sup, ctx
	if g.dyn.launched == nil {
		g.dyn.launched = make(map[string]*launched)
	}
}
