package gateway

import (
	"fmt"
	"log/slog"

	"k8s.io/client-go/rest"

	"github.com/meshfed/meshfed/config"
	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/istioconfig/crd"
)

// newTrafficSource builds the config sources of cfg: directories, and a
// crd.Source per Kubernetes entry over its clusters' credentials. Nil
// without configSources.
func newTrafficSource(cfg *config.Config, log *slog.Logger) *istioconfig.Source {
	if len(cfg.ConfigSources) == 0 {
		return nil
	}
	regs := make(map[string]config.Registry, len(cfg.Registries))
	for _, r := range cfg.Registries {
		regs[r.Name] = r
	}
	var dirs []istioconfig.Dir
	var feeds []istioconfig.Feed
	for _, c := range cfg.ConfigSources {
		if c.Kubernetes == nil {
			dirs = append(dirs, istioconfig.Dir{Name: c.Name, Path: c.Dir})
			continue
		}
		opts := crd.Options{Name: c.Name, Namespaces: c.Kubernetes.Namespaces,
			Logger: log.With("configSource", c.Name)}
		for _, name := range c.Kubernetes.Clusters {
			cl := crd.Cluster{Name: name, Connect: noConnector(name)}
			if conn, ok := regs[name].Block.(crd.Connector); ok {
				cl.Connect = conn.Connect
			}
			opts.Clusters = append(opts.Clusters, cl)
		}
		feeds = append(feeds, crd.New(opts))
	}
	return istioconfig.New(dirs, log, feeds...)
}

// noConnector fails the cluster: its registry has no kubernetes block
// (the loader reported why).
func noConnector(name string) func() (*rest.Config, func(), error) {
	return func() (*rest.Config, func(), error) {
		return nil, nil, fmt.Errorf("registry %q has no usable kubernetes block", name)
	}
}
