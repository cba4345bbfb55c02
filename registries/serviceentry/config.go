package serviceentry

import (
	"errors"
	"fmt"

	"k8s.io/client-go/rest"

	"github.com/meshfed/meshfed/kubeclient"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/filewatch"
)

// Config is the `serviceentry:` block of a clusters.yaml entry: files
// (path, paths, settle: filewatch.Options, whose ApplyDefaults and
// ResolvePaths it has) of ServiceEntries and WorkloadEntries
// (multi-document, kubectl-style YAML), or Kubernetes clusters
// (kubernetes), one or the other.
type Config struct {
	filewatch.Options `yaml:",inline"`
	// Kubernetes reads the ServiceEntries and WorkloadEntries of
	// Kubernetes clusters instead of files.
	Kubernetes *Kubernetes `yaml:"kubernetes,omitempty"`

	// connectors are the named clusters' blocks (UseClusters).
	connectors map[string]kubeclient.Connector
}

// Kubernetes is the `serviceentry.kubernetes:` block.
type Kubernetes struct {
	// Clusters are names of registries of kind kubernetes whose clusters
	// (and credentials) are read, in order: of two differing objects with
	// one kind, namespace and name, the earlier cluster's is served.
	Clusters []string `yaml:"clusters" yamlconf:"required"`
	// Namespaces limits the read to these namespaces; empty: all.
	Namespaces []string `yaml:"namespaces,omitempty"`
}

var (
	_ registries.Config       = (*Config)(nil)
	_ registries.PathResolver = (*Config)(nil)
	_ registries.FileReferrer = (*Config)(nil)
	_ registries.ClusterUser  = (*Config)(nil)
)

// Validate implements registries.Config.
func (c *Config) Validate() error {
	k := c.Kubernetes
	if k == nil {
		return c.Options.Validate()
	}
	switch {
	case c.Path != "" || len(c.Paths) > 0:
		return registries.FieldErr("kubernetes", "path/paths and kubernetes are exclusive: a registry reads files or clusters (declare two serviceentry registries for both)")
	case len(k.Clusters) == 0:
		return registries.FieldErr("kubernetes.clusters", "want at least one registry of kind kubernetes")
	}
	seen := map[string]bool{}
	for i, name := range k.Clusters {
		if seen[name] {
			return registries.FieldErr(fmt.Sprintf("kubernetes.clusters[%d]", i), "%q is named twice", name)
		}
		seen[name] = true
	}
	for i, ns := range k.Namespaces {
		if ns == "" {
			return registries.FieldErr(fmt.Sprintf("kubernetes.namespaces[%d]", i), "is empty (leave namespaces out for all)")
		}
	}
	return nil
}

// ClusterRefs implements registries.ClusterUser.
func (c *Config) ClusterRefs() []registries.ClusterRef {
	if c.Kubernetes == nil {
		return nil
	}
	refs := make([]registries.ClusterRef, len(c.Kubernetes.Clusters))
	for i, name := range c.Kubernetes.Clusters {
		refs[i] = registries.ClusterRef{Key: fmt.Sprintf("kubernetes.clusters[%d]", i), Name: name}
	}
	return refs
}

// UseClusters implements registries.ClusterUser.
func (c *Config) UseClusters(blocks map[string]registries.Config) {
	c.connectors = map[string]kubeclient.Connector{}
	for name, b := range blocks {
		if conn, ok := b.(kubeclient.Connector); ok {
			c.connectors[name] = conn
		}
	}
}

// clusters returns the clusters of the kubernetes block; a cluster
// without a usable block fails when connecting.
func (c *Config) clusters() []kubeclient.Cluster {
	var out []kubeclient.Cluster
	for _, name := range c.Kubernetes.Clusters {
		cl := kubeclient.Cluster{Name: name, Connect: func() (*rest.Config, func(), error) {
			return nil, nil, fmt.Errorf("registry %q is not a usable registry of kind kubernetes", name)
		}}
		if conn, ok := c.connectors[name]; ok {
			cl.Connect = conn.Connect
		}
		out = append(out, cl)
	}
	return out
}

// Files implements registries.FileReferrer for `meshfed validate`: every
// file matched now must be YAML, and every ServiceEntry and WorkloadEntry
// in it valid; each problem names its file:line:column and object. (Hosts
// outside the domain and unusable endpoints are rejected alone at run
// time and listed on /debug/conflictz.)
func (c *Config) Files() []registries.FileRef {
	if c.Kubernetes != nil {
		return nil
	}
	return c.Patterns().FileRefs(func(path string, data []byte) error {
		objs, err := Parse(path, data)
		if err != nil {
			return err
		}
		var errs []error
		for _, o := range objs {
			if err := objectError(o); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
}

func init() {
	registries.Register(registries.Kind{Name: "serviceentry", NewConfig: func() registries.Config { return new(Config) }, Collectors: Collectors})
}
