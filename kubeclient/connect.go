package kubeclient

import (
	"fmt"
	"net"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/connrotation"
)

// Connector is what a registry's kind block offers to reach its cluster
// (kube.Config implements it).
type Connector interface {
	// Connect returns a REST config for the cluster and a func that
	// closes every connection made through it.
	Connect() (*rest.Config, func(), error)
}

// Connect returns a REST config for a cluster — the kubeconfig file at
// path with context kubeContext ("" is its current-context), or the
// in-cluster credentials when path is "" — with qps and burst and a dialer
// of its own, and a func that closes every connection made through it.
// The kubeconfig is read on every call, so rotated credentials are picked
// up.
func Connect(path, kubeContext string, qps float32, burst int) (*rest.Config, func(), error) {
	rc, err := Credentials(path, kubeContext)()
	if err != nil {
		return nil, nil, err
	}
	rc, closeAll := OwnConnections(rc, qps, burst)
	return rc, closeAll, nil
}

// Credentials returns a func that reads a kubeconfig file (with a
// context), or the in-cluster service account when path is "".
func Credentials(path, kubeContext string) func() (*rest.Config, error) {
	return func() (*rest.Config, error) {
		if path == "" {
			c, err := rest.InClusterConfig()
			if err != nil {
				return nil, fmt.Errorf("in-cluster credentials (no kubeconfig set): %w", err)
			}
			return c, nil
		}
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
		c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
			&clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
		}
		return c, nil
	}
}

// OwnConnections returns a copy of rc with the given rate limits and a
// dialer of its own, and a func that closes every connection made through
// it (client-go would otherwise share and keep transports process-wide).
func OwnConnections(rc *rest.Config, qps float32, burst int) (*rest.Config, func()) {
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = qps, burst
	rc.UserAgent = "meshfed"
	if rc.Dial == nil {
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
		rc.Dial = d.DialContext
	}
	dialer := connrotation.NewDialer(connrotation.DialFunc(rc.Dial))
	rc.Dial = dialer.DialContext
	return rc, dialer.CloseAll
}
