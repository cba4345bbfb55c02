package kube

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

// load reads a testdata block as the clusters.yaml loader does.
func load(t *testing.T, name string) (*Config, error) {
	t.Helper()
	var c Config
	return &c, registrytest.LoadConfig(t, filepath.Join("testdata", "config", name), &c)
}

func TestConfigGood(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file string
		want Config
	}{
		{
			file: "good.yaml",
			want: Config{
				Kubeconfig: "testdata/config/kube/east.kubeconfig", Context: "east-admin", Network: "east-net",
				Namespaces:      []string{"shop", "payments"},
				SecretDiscovery: &SecretDiscovery{Namespace: "meshfed", Selector: "meshfed/remote=true", Network: "west-net"},
				QPS:             20, Burst: 40,
			},
		},
		{
			file: "good-selector.yaml",
			want: Config{
				NamespaceSelector: "mesh in (enabled, strict)",
				SecretDiscovery:   &SecretDiscovery{Namespace: "istio-system", Selector: "istio/multiCluster=true"},
				QPS:               DefaultQPS, Burst: DefaultBurst,
			},
		},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			c, err := load(t, tc.file)
			if err != nil {
				t.Fatal(err)
			}
			// Relative paths resolve against the file's directory.
			if tc.want.Kubeconfig != "" {
				abs, err := filepath.Abs(tc.want.Kubeconfig)
				if err != nil {
					t.Fatal(err)
				}
				tc.want.Kubeconfig = abs
			}
			if !reflect.DeepEqual(*c, tc.want) {
				t.Errorf("config:\n got %+v\nwant %+v", *c, tc.want)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	var c Config
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("empty block after defaults: %v", err)
	}
	want := Config{QPS: DefaultQPS, Burst: DefaultBurst}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults = %+v, want %+v", c, want)
	}
}

func TestConfigBad(t *testing.T) {
	t.Parallel()
	registrytest.CheckBadConfigs(t, filepath.Join("testdata", "config"), func() registries.Config { return new(Config) }, []registrytest.BadConfig{
		{File: "bad-context-without-kubeconfig.yaml", Key: "context", Err: "kubeconfig is not"},
		{File: "bad-namespace.yaml", Key: "namespaces[1]", Err: "not a namespace name"},
		{File: "bad-namespace-twice.yaml", Key: "namespaces[1]", Err: "listed twice"},
		{File: "bad-both-selections.yaml", Key: "namespaceSelector", Err: "exclude each other"},
		{File: "bad-selector.yaml", Key: "namespaceSelector", Err: "bad label selector"},
		{File: "bad-secret-selector.yaml", Key: "secretDiscovery.selector", Err: "bad label selector"},
		{File: "bad-secret-namespace.yaml", Key: "secretDiscovery.namespace", Err: "not a namespace name"},
		{File: "bad-qps.yaml", Key: "qps", Err: "negative"},
		{File: "bad-unknown-key.yaml", Err: "unknown key"},
	})
}

func TestNewDoesNoIO(t *testing.T) {
	t.Parallel()
	c := &Config{Kubeconfig: "/nonexistent/kubeconfig"}
	c.ApplyDefaults()
	reg, err := c.New(registries.Common{Name: "east", Kind: "kubernetes", Domain: "svc.cluster.local"}, nil)
	if err != nil || reg == nil {
		t.Fatalf("New = %v, %v; want a registry (the file is read by Run)", reg, err)
	}
	err = reg.Run(t.Context(), nil)
	if !registries.IsPermanent(err) || !strings.Contains(err.Error(), "/nonexistent/kubeconfig") {
		t.Errorf("Run = %v, want a permanent error naming the kubeconfig", err)
	}
}
