package config

import (
	"path/filepath"
	"testing"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/kube"
	"github.com/meshfed/meshfed/registries/serviceentry"
)

// TestBindClusters: a serviceentry block reading clusters is handed the
// blocks of the kubernetes registries it names when the config loads.
func TestBindClusters(t *testing.T) {
	t.Parallel()
	cfg, err := Parse(filepath.Join(t.TempDir(), "clusters.yaml"), []byte(`
registries:
  - {name: east, kind: kubernetes, domain: svc.cluster.local, kubernetes: {kubeconfig: /nonexistent/kubeconfig}}
  - {name: vms, kind: serviceentry, domain: ext.example, serviceentry: {kubernetes: {clusters: [east], namespaces: [shop]}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	se := cfg.Registries[1].Block.(*serviceentry.Config)
	got := &recorder{}
	bindClusters(&Config{Registries: []Registry{cfg.Registries[0], {Name: "x", Kind: "serviceentry", Block: got}}})
	if _, ok := got.blocks["east"].(*kube.Config); !ok || len(got.blocks) != 1 {
		t.Errorf("blocks handed = %v, want east's kubernetes block", got.blocks)
	}
	if refs := se.ClusterRefs(); len(refs) != 1 || refs[0] != (registries.ClusterRef{Key: "kubernetes.clusters[0]", Name: "east"}) {
		t.Errorf("ClusterRefs() = %v", refs)
	}
}

// recorder is a ClusterUser naming east.
type recorder struct {
	serviceentry.Config
	blocks map[string]registries.Config
}

func (r *recorder) ClusterRefs() []registries.ClusterRef {
	return []registries.ClusterRef{{Key: "kubernetes.clusters[0]", Name: "east"}}
}
func (r *recorder) UseClusters(b map[string]registries.Config) { r.blocks = b }
