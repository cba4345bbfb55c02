package kube

import (
	"reflect"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

func TestConfigGood(t *testing.T) {
	t.Parallel()
	registrytest.CheckGoodConfigs[Config](t, []registrytest.GoodConfig[Config]{
		{
			File: "good.yaml",
			Want: Config{
				// Relative paths resolve against the file's directory.
				Kubeconfig: registrytest.ConfigPath(t, "kube/east.kubeconfig"), Context: "east-admin", Network: "east-net",
				Namespaces:      []string{"shop", "payments"},
				SecretDiscovery: &SecretDiscovery{Namespace: "meshfed", Selector: "meshfed/remote=true", Network: "west-net"},
				QPS:             20, Burst: 40,
			},
		},
		{
			File: "good-selector.yaml",
			Want: Config{
				NamespaceSelector: "mesh in (enabled, strict)",
				SecretDiscovery:   &SecretDiscovery{Namespace: "istio-system", Selector: "istio/multiCluster=true"},
				QPS:               DefaultQPS, Burst: DefaultBurst,
			},
		},
	}, nil)
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	var c Config
	registrytest.CheckDefaults(t, &c)
	want := Config{QPS: DefaultQPS, Burst: DefaultBurst}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults = %+v, want %+v", c, want)
	}
}

func TestConfigBad(t *testing.T) {
	t.Parallel()
	registrytest.BadConfigs[Config](t, []registrytest.BadConfig{
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
