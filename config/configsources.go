package config

import (
	"fmt"

	"github.com/meshfed/meshfed/registries"
)

// kindKubernetes is the registry kind whose clusters a Kubernetes config
// source reads.
const kindKubernetes = "kubernetes"

// configSourceClusterErrs checks that every cluster a Kubernetes config
// source, or a registry block that reads clusters
// (registries.ClusterUser), names is a registry of kind kubernetes.
func configSourceClusterErrs(c *Config) []error {
	byName := make(map[string]Registry, len(c.Registries))
	for _, r := range c.Registries {
		byName[r.Name] = r
	}
	var errs []error
	for i, reg := range c.Registries {
		cu, ok := reg.Block.(registries.ClusterUser)
		if !ok {
			continue
		}
		for _, ref := range cu.ClusterRefs() {
			key := fmt.Sprintf("registries[%d].%s.%s", i, reg.Kind, ref.Key)
			r, ok := byName[ref.Name]
			switch {
			case !ok:
				errs = append(errs, registries.FieldErr(key, "no registry is named %q: name a registry of kind kubernetes", ref.Name))
			case r.Kind != kindKubernetes:
				errs = append(errs, registries.FieldErr(key, "registry %q is of kind %s: want one of kind kubernetes", ref.Name, r.Kind))
			}
		}
	}
	for i, cs := range c.ConfigSources {
		if cs.Kubernetes == nil {
			continue
		}
		for j, name := range cs.Kubernetes.Clusters {
			key := fmt.Sprintf("configSources[%d].kubernetes.clusters[%d]", i, j)
			r, ok := byName[name]
			switch {
			case !ok:
				errs = append(errs, registries.FieldErr(key, "no registry is named %q: name a registry of kind kubernetes", name))
			case r.Kind != kindKubernetes:
				errs = append(errs, registries.FieldErr(key, "registry %q is of kind %s: want one of kind kubernetes", name, r.Kind))
			}
		}
	}
	return errs
}

// bindClusters hands every registry block that reads clusters
// (registries.ClusterUser) the blocks of the kubernetes registries it
// names, once the config is valid.
func bindClusters(c *Config) {
	byName := make(map[string]registries.Config, len(c.Registries))
	for _, r := range c.Registries {
		if r.Kind == kindKubernetes && r.Block != nil {
			byName[r.Name] = r.Block
		}
	}
	for _, r := range c.Registries {
		if cu, ok := r.Block.(registries.ClusterUser); ok {
			blocks := map[string]registries.Config{}
			for _, ref := range cu.ClusterRefs() {
				if b, ok := byName[ref.Name]; ok {
					blocks[ref.Name] = b
				}
			}
			cu.UseClusters(blocks)
		}
	}
}
