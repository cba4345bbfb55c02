package kubeclient

import (
	"strings"
	"testing"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshfed/meshfed/kubeclient/kubeclienttest"
)

// TestCheckRemoteKubeconfig: only inline credentials are accepted from a
// Secret (the checks registries/kube's secretDiscovery applies to every
// cluster of a remote secret).
func TestCheckRemoteKubeconfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		mut     func(*clientcmdapi.Config)
		wantBad string
	}{
		{name: "inline token"},
		{name: "exec", wantBad: "exec plugin", mut: func(c *clientcmdapi.Config) {
			c.AuthInfos["c"].Exec = &clientcmdapi.ExecConfig{Command: "x", APIVersion: "client.authentication.k8s.io/v1"}
		}},
		{name: "auth provider", wantBad: "auth provider", mut: func(c *clientcmdapi.Config) {
			c.AuthInfos["c"].AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "gcp"}
		}},
		{name: "token file", wantBad: "token file", mut: func(c *clientcmdapi.Config) { c.AuthInfos["c"].TokenFile = "/var/run/secrets/token" }},
		{name: "cert files", wantBad: "certificate files", mut: func(c *clientcmdapi.Config) {
			c.AuthInfos["c"].ClientCertificate, c.AuthInfos["c"].ClientKey = "/etc/c.pem", "/etc/k.pem"
		}},
		{name: "ca file", wantBad: "CA file", mut: func(c *clientcmdapi.Config) { c.Clusters["c"].CertificateAuthority = "/etc/ca.pem" }},
		{name: "no context", wantBad: "context", mut: func(c *clientcmdapi.Config) { c.CurrentContext = "" }},
		{name: "context without cluster", wantBad: "invalid kubeconfig", mut: func(c *clientcmdapi.Config) { c.Contexts["c"].Cluster = "gone" }},
	} {
		err := CheckRemoteKubeconfig(kubeclienttest.Kubeconfig(t, "https://w:6443", tc.mut))
		switch {
		case tc.wantBad == "" && err != nil:
			t.Errorf("%s: %v, want it accepted", tc.name, err)
		case tc.wantBad != "" && (err == nil || !strings.Contains(err.Error(), tc.wantBad)):
			t.Errorf("%s: %v, want it rejected for %q", tc.name, err, tc.wantBad)
		}
	}
	if err := CheckRemoteKubeconfig([]byte("{not yaml")); err == nil || !strings.Contains(err.Error(), "not a kubeconfig") {
		t.Errorf("garbage: %v, want it rejected as not a kubeconfig", err)
	}
}

func TestRemoteConfig(t *testing.T) {
	t.Parallel()
	rc, err := RemoteConfig(kubeclienttest.Kubeconfig(t, "https://west.example:6443", nil))
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://west.example:6443" || rc.BearerToken != "t" {
		t.Errorf("REST config host %q token %q, want the kubeconfig's", rc.Host, rc.BearerToken)
	}
	exec := kubeclienttest.Kubeconfig(t, "https://x.example", func(c *clientcmdapi.Config) {
		c.AuthInfos["c"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "/bin/steal", APIVersion: "client.authentication.k8s.io/v1"}}
	})
	if rc, err := RemoteConfig(exec); err == nil || rc != nil {
		t.Errorf("exec kubeconfig: %v, %v; want it refused before any REST config is built", rc, err)
	}
}
