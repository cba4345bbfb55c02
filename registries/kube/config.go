package kube

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshfed/meshfed/kubeclient"
	"github.com/meshfed/meshfed/registries"
)

// Defaults of the `kubernetes:` block.
const (
	// DefaultSecretNamespace is where istioctl create-remote-secret puts
	// remote secrets.
	DefaultSecretNamespace = "istio-system"
	// DefaultSecretSelector is the label istioctl create-remote-secret sets.
	DefaultSecretSelector = "istio/multiCluster=true"
	// DefaultQPS and DefaultBurst bound the client's request rate (the
	// informers' lists and watches).
	DefaultQPS   = 50
	DefaultBurst = 100
)

// Config is the `kubernetes:` block of a clusters.yaml entry. One entry
// watches one cluster. Entries of kind kubernetes that name the same domain
// form one multicluster set: a Service with the same name and namespace in
// several clusters is one service with the endpoints of all of them.
type Config struct {
	// Kubeconfig is the path of a kubeconfig file; "" uses the in-cluster
	// credentials of the pod meshfed runs in (its service account). A
	// relative path is resolved against the directory of clusters.yaml.
	Kubeconfig string `yaml:"kubeconfig"`
	// Context is the kubeconfig context to use; "" is its current-context.
	Context string `yaml:"context"`
	// Network is the network the cluster's endpoints are reachable on
	// (Source.Network of every endpoint); "" is the default network.
	Network string `yaml:"network"`
	// Namespaces limits the registry to these namespaces; it then needs
	// read access in these namespaces only (plus nodes). Empty: all
	// namespaces, or those NamespaceSelector selects.
	Namespaces []string `yaml:"namespaces"`
	// NamespaceSelector is a label selector (e.g. "mesh=enabled"): only
	// services in namespaces whose labels match are published. It needs
	// list/watch on namespaces. Exclusive with Namespaces.
	NamespaceSelector string `yaml:"namespaceSelector"`
	// SecretDiscovery, when set, watches Secrets in this cluster that hold
	// kubeconfigs of remote clusters, as `istioctl create-remote-secret`
	// writes them, and runs one registry per remote cluster.
	SecretDiscovery *SecretDiscovery `yaml:"secretDiscovery"`
	// QPS and Burst bound the request rate to the API server. Defaults 50
	// and 100.
	QPS   float32 `yaml:"qps"`
	Burst int     `yaml:"burst"`
}

// SecretDiscovery is the `secretDiscovery:` block: where remote cluster
// secrets live.
//
// Each Secret's data maps a cluster name to a kubeconfig (the format of
// `istioctl create-remote-secret`). Every cluster found becomes a registry
// of kind kubernetes named after the cluster, with this entry's domain,
// namespace selection and outage settings, and the network given by the
// Secret's label or annotation topology.istio.io/network, else Network
// below, else this entry's network. A cluster named like this entry (its
// own secret) is skipped.
type SecretDiscovery struct {
	// Namespace holding the Secrets. Default istio-system.
	Namespace string `yaml:"namespace"`
	// Selector is a label selector for the Secrets. Default
	// istio/multiCluster=true.
	Selector string `yaml:"selector"`
	// Network of remote clusters whose Secret names none; "" is this
	// entry's network.
	Network string `yaml:"network"`
}

var (
	_ registries.Config       = (*Config)(nil)
	_ registries.PathResolver = (*Config)(nil)
)

// ApplyDefaults implements registries.Config.
func (c *Config) ApplyDefaults() {
	if c.QPS == 0 {
		c.QPS = DefaultQPS
	}
	if c.Burst == 0 {
		c.Burst = DefaultBurst
	}
	if sd := c.SecretDiscovery; sd != nil {
		if sd.Namespace == "" {
			sd.Namespace = DefaultSecretNamespace
		}
		if sd.Selector == "" {
			sd.Selector = DefaultSecretSelector
		}
	}
}

// Validate implements registries.Config. It does no I/O: the kubeconfig is
// read by each Run, so rotated credentials are picked up on restart.
func (c *Config) Validate() error {
	var errs []error
	if c.Context != "" && c.Kubeconfig == "" {
		errs = append(errs, registries.FieldErr("context", "is set but kubeconfig is not (in-cluster credentials have no contexts)"))
	}
	seen := map[string]bool{}
	for i, ns := range c.Namespaces {
		key := fmt.Sprintf("namespaces[%d]", i)
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, registries.FieldErr(key, "%q is not a namespace name: %s", ns, strings.Join(msgs, "; ")))
		} else if seen[ns] {
			errs = append(errs, registries.FieldErr(key, "%q is listed twice", ns))
		}
		seen[ns] = true
	}
	if c.NamespaceSelector != "" {
		if len(c.Namespaces) > 0 {
			errs = append(errs, registries.FieldErr("namespaceSelector", "namespaces and namespaceSelector exclude each other"))
		} else if _, err := labels.Parse(c.NamespaceSelector); err != nil {
			errs = append(errs, registries.FieldErr("namespaceSelector", "bad label selector: %v", err))
		}
	}
	if c.QPS < 0 {
		errs = append(errs, registries.FieldErr("qps", "%v is negative", c.QPS))
	}
	if c.Burst < 0 {
		errs = append(errs, registries.FieldErr("burst", "%d is negative", c.Burst))
	}
	if sd := c.SecretDiscovery; sd != nil {
		if msgs := validation.IsDNS1123Label(sd.Namespace); len(msgs) > 0 {
			errs = append(errs, registries.FieldErr("secretDiscovery.namespace", "%q is not a namespace name: %s", sd.Namespace, strings.Join(msgs, "; ")))
		}
		if _, err := labels.Parse(sd.Selector); err != nil {
			errs = append(errs, registries.FieldErr("secretDiscovery.selector", "bad label selector: %v", err))
		}
	}
	return errors.Join(errs...)
}

// ResolvePaths implements registries.PathResolver.
func (c *Config) ResolvePaths(dir string) {
	if c.Kubeconfig != "" && !filepath.IsAbs(c.Kubeconfig) {
		c.Kubeconfig = filepath.Join(dir, c.Kubeconfig)
	}
}

// New implements registries.Config. It does no I/O.
func (c *Config) New(common registries.Common, log *slog.Logger) (registries.Registry, error) {
	cfg := c.clone()
	return newRegistry(common, cfg, kubeclient.Credentials(cfg.Kubeconfig, cfg.Context), log), nil
}

func (c *Config) clone() Config {
	cfg := *c
	cfg.Namespaces = append([]string(nil), c.Namespaces...)
	if c.SecretDiscovery != nil {
		sd := *c.SecretDiscovery
		cfg.SecretDiscovery = &sd
	}
	return cfg
}

// Files implements registries.FileReferrer: the kubeconfig, which must
// parse and hold the context (or a current-context).
func (c *Config) Files() []registries.FileRef {
	if c.Kubeconfig == "" {
		return nil
	}
	kubeContext := c.Context
	return []registries.FileRef{{Key: "kubeconfig", Path: c.Kubeconfig, Check: func(b []byte) error {
		kc, err := clientcmd.Load(b)
		if err != nil {
			return fmt.Errorf("is not a kubeconfig: %v", err)
		}
		name := kubeContext
		if name == "" {
			name = kc.CurrentContext
		}
		if name == "" {
			return errors.New("has no current-context; set context")
		}
		if _, ok := kc.Contexts[name]; !ok {
			return fmt.Errorf("has no context %q", name)
		}
		return nil
	}}}
}

func init() {
	registries.Register(registries.Kind{Name: "kubernetes", NewConfig: func() registries.Config { return new(Config) }, Collectors: Collectors, Multicluster: true})
}
