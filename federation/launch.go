package federation

import (
	"fmt"
	"sync"

	"github.com/thejerf/suture/v4"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/registries"
)

// runtimeRegistries are the registries started while the gateway runs
// (Kubernetes remote clusters found by secretDiscovery), on top of the
// clusters.yaml entries.
type runtimeRegistries struct {
	mu      sync.Mutex
	sup     *suture.Supervisor // the root supervisor while Run runs, else nil
	runners map[string]*registries.Runner
	// The clusters.yaml registries and the configuration they come from;
	// Reload replaces both.
	cfg     *Config
	entries map[string]*entry
	reload  *ReloadStatus // last reload; nil before the first
}

var _ registries.Launcher = (*Gateway)(nil)

// Launch implements registries.Launcher: it runs reg like a clusters.yaml entry
// named c.Name (own child supervisor, on /healthz/registries, counted for
// /readyz), with the outage and maxDeleteRatio of the entry named parent.
// It fails if the name is taken or the gateway is not running. stop
// removes the registry again: it waits for reg to stop, then its services
// leave the model.
func (g *Gateway) Launch(parent string, c registries.Common, reg registries.Registry) (stop func(), err error) {
	g.dyn.mu.Lock()
	defer g.dyn.mu.Unlock()
	if g.dyn.sup == nil {
		return nil, fmt.Errorf("registry %q: the gateway is not running", c.Name)
	}
	opts := aggregate.RegistryOptions{Common: c, Multicluster: multicluster(c.Kind)}
	for _, r := range g.dyn.cfg.Registries {
		if r.Name == c.Name {
			return nil, fmt.Errorf("registry %q already exists in the configuration", c.Name)
		}
		if r.Name == parent {
			p := r.aggregateOptions()
			opts.Outage, opts.MaxDeleteRatio = p.Outage, p.MaxDeleteRatio
		}
	}
	if _, ok := g.dyn.runners[c.Name]; ok {
		return nil, fmt.Errorf("registry %q already exists", c.Name)
	}
	g.agg.AddRegistry(opts)
	rlog := g.log.With("registry", c.Name, "kind", c.Kind, "parent", parent)
	runner := registries.NewRunner(c, reg, g.agg, rlog)
	child := registries.NewSupervisor("registry "+c.Name, g.log) // its events add the registry key
	child.Add(runner)
	sup := g.dyn.sup
	token := sup.Add(child)
	g.dyn.runners[c.Name] = runner
	rlog.Info("registry started at runtime")

	var once sync.Once
	return func() {
		once.Do(func() {
			if err := sup.RemoveAndWait(token, registries.SupervisorTimeout); err != nil {
				rlog.Warn("registry did not stop cleanly", "error", err)
			}
			g.dyn.mu.Lock()
			delete(g.dyn.runners, c.Name)
			g.dyn.mu.Unlock()
			g.agg.RemoveRegistry(c.Name)
			rlog.Info("registry removed at runtime")
		})
	}, nil
}

// runner returns the Runner of a configured or runtime registry.
func (g *Gateway) runner(name string) (*registries.Runner, bool) {
	g.dyn.mu.Lock()
	defer g.dyn.mu.Unlock()
	if e, ok := g.dyn.entries[name]; ok && e.runner != nil {
		return e.runner, true
	}
	r, ok := g.dyn.runners[name]
	return r, ok
}

// setSupervisor makes Launch start registries under sup (nil: refuse).
func (g *Gateway) setSupervisor(sup *suture.Supervisor) {
	g.dyn.mu.Lock()
	defer g.dyn.mu.Unlock()
	g.dyn.sup = sup
	if g.dyn.runners == nil {
		g.dyn.runners = make(map[string]*registries.Runner)
	}
}
