package kube

import (
	"errors"
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
	return &c, registrytest.LoadConfig(t, filepath.Join("testdata", name), &c)
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
				Kubeconfig: "/etc/meshfed/kube/east.kubeconfig", Context: "east-admin", Network: "east-net",
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
			c.ResolvePaths("/etc/meshfed")
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
	for _, tc := range []struct {
		file    string
		wantKey string // FieldError key; "" for a decode error
		wantErr string
	}{
		{file: "bad-context-without-kubeconfig.yaml", wantKey: "context", wantErr: "kubeconfig is not"},
		{file: "bad-namespace.yaml", wantKey: "namespaces[1]", wantErr: "not a namespace name"},
		{file: "bad-namespace-twice.yaml", wantKey: "namespaces[1]", wantErr: "listed twice"},
		{file: "bad-both-selections.yaml", wantKey: "namespaceSelector", wantErr: "exclude each other"},
		{file: "bad-selector.yaml", wantKey: "namespaceSelector", wantErr: "bad label selector"},
		{file: "bad-secret-selector.yaml", wantKey: "secretDiscovery.selector", wantErr: "bad label selector"},
		{file: "bad-secret-namespace.yaml", wantKey: "secretDiscovery.namespace", wantErr: "not a namespace name"},
		{file: "bad-qps.yaml", wantKey: "qps", wantErr: "negative"},
		{file: "bad-unknown-key.yaml", wantErr: "unknown field"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			_, err := load(t, tc.file)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q does not contain %q", err, tc.wantErr)
			}
			var fe *registries.FieldError
			if tc.wantKey != "" && (!errors.As(err, &fe) || fe.Key != tc.wantKey) {
				t.Errorf("error %v is not a FieldError for key %q", err, tc.wantKey)
			}
		})
	}
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
