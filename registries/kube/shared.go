package kube

import (
	"k8s.io/client-go/rest"

	"github.com/meshfed/meshfed/kubeclient"
)

var _ kubeclient.Connector = (*Config)(nil)

// Connect implements kubeclient.Connector: other packages (the Kubernetes
// config source, istioconfig/crd; the serviceentry registry) read Istio's
// CRDs from the clusters of registries of kind kubernetes with their
// credentials (docs/architecture.md §3.6). It returns a REST config for
// the cluster of this block — its kubeconfig and context, or the
// in-cluster credentials when kubeconfig is "" — with its qps and burst
// and a dialer of its own, and a func that closes every connection made
// through it. The kubeconfig is read on every call, so rotated
// credentials are picked up. Call it on a block with defaults applied.
func (c *Config) Connect() (*rest.Config, func(), error) {
	return kubeclient.Connect(c.Kubeconfig, c.Context, c.QPS, c.Burst)
}
