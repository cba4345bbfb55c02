package kubeclient

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshfed/meshfed/kubeclient/kubeclienttest"
	"github.com/meshfed/meshfed/test/servers"
)

// TestConnect: the kubeconfig's context (or its current context), with
// the given rate limits, meshfed's user agent and a dialer of its own; the
// file is read on every call.
func TestConnect(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	write := func(westServer string) {
		kc := kubeclienttest.Kubeconfig(t, "https://east.example:6443", func(c *clientcmdapi.Config) {
			c.Clusters["w"] = &clientcmdapi.Cluster{Server: westServer}
			c.AuthInfos["w"] = &clientcmdapi.AuthInfo{Token: "w"}
			c.Contexts["west"] = &clientcmdapi.Context{Cluster: "w", AuthInfo: "w"}
		})
		if err := os.WriteFile(path, kc, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("https://west.example:6443")

	rc, closeAll, err := Connect(path, "", 7, 9)
	if err != nil {
		t.Fatal(err)
	}
	closeAll()
	if rc.Host != "https://east.example:6443" || rc.BearerToken != "t" {
		t.Errorf("no context: host %q token %q, want the current context's", rc.Host, rc.BearerToken)
	}
	if rc.QPS != 7 || rc.Burst != 9 || rc.UserAgent != "meshfed" || rc.Dial == nil {
		t.Errorf("qps %v burst %d agent %q dial set %v, want 7, 9, meshfed, own dialer", rc.QPS, rc.Burst, rc.UserAgent, rc.Dial != nil)
	}

	rc, closeAll, err = Connect(path, "west", 7, 9)
	if err != nil {
		t.Fatal(err)
	}
	closeAll()
	if rc.Host != "https://west.example:6443" || rc.BearerToken != "w" {
		t.Errorf("context west: host %q token %q", rc.Host, rc.BearerToken)
	}

	write("https://west2.example:6443") // rotated
	if rc, _, err := Connect(path, "west", 7, 9); err != nil || rc.Host != "https://west2.example:6443" {
		t.Errorf("after the file changed: %v, %v; want the new server", rc, err)
	}

	if _, _, err := Connect(path, "north", 7, 9); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("unknown context: %v, want an error naming the kubeconfig", err)
	}
	missing := filepath.Join(t.TempDir(), "nonexistent")
	if _, _, err := Connect(missing, "", 7, 9); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: %v, want an error naming it", err)
	}
}

func TestInClusterCredentials(t *testing.T) {
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		t.Skip("running in a pod: in-cluster credentials exist")
	}
	t.Parallel()
	if _, _, err := Connect("", "", 7, 9); err == nil || !strings.Contains(err.Error(), "in-cluster credentials (no kubeconfig set)") {
		t.Errorf("outside a pod without kubeconfig: %v, want the in-cluster error", err)
	}
}

// TestOwnConnections: a copy (the original untouched) whose close func
// ends the connections made through it.
func TestOwnConnections(t *testing.T) {
	t.Parallel()
	l := servers.LowListener(t)
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	orig := &rest.Config{Host: "https://" + l.Addr().String(), QPS: 1, Burst: 1}
	rc, closeAll := OwnConnections(orig, 7, 9)
	if orig.QPS != 1 || orig.Burst != 1 || orig.Dial != nil || orig.UserAgent != "" {
		t.Errorf("the original config was changed: %+v", orig)
	}
	if rc.QPS != 7 || rc.Burst != 9 || rc.UserAgent != "meshfed" {
		t.Errorf("copy qps %v burst %d agent %q", rc.QPS, rc.Burst, rc.UserAgent)
	}
	conn, err := rc.Dial(context.Background(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	srv := <-accepted
	defer srv.Close()
	closeAll()
	if err := srv.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("server side read after close: %v, want EOF (connection closed)", err)
	}
}
