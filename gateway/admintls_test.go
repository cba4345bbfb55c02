package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/config"
	"github.com/meshfed/meshfed/test/logbuf"
)

// testCA issues certificates for the admin mTLS test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key for name (server: for 127.0.0.1).
func (ca *testCA) issue(t *testing.T, name string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// TestAdminMTLS runs the admin port with TLS and a client CA: probes
// reach /healthz without a certificate, debug endpoints require one
// signed by the CA, and a certificate from another CA is refused.
func TestAdminMTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, other := newTestCA(t, "admin-ca"), newTestCA(t, "other-ca")
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	srvCert, srvKey := ca.issue(t, "meshfed", true)
	write("ca.crt", ca.pem)
	write("server.crt", srvCert)
	write("server.key", srvKey)
	write("services.yaml", []byte("services: []\n"))
	adminAddr := freeAddr(t)
	cfg, err := config.Parse(filepath.Join(dir, "clusters.yaml"), []byte(fmt.Sprintf(`xds: {address: "%s"}
admin: {address: "%s", tls: {cert: server.crt, key: server.key, clientCA: ca.crt}}
registries:
  - {name: vms, kind: file, domain: vm.internal, file: {path: services.yaml}}
`, freeAddr(t), adminAddr)))
	if err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	g, err := NewGateway(cfg, GatewayOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	client := func(issuer *testCA) *http.Client {
		tc := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if issuer != nil {
			c, k := issuer.issue(t, "operator", false)
			kp, err := tls.X509KeyPair(c, k)
			if err != nil {
				t.Fatal(err)
			}
			tc.Certificates = []tls.Certificate{kp}
		}
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	}
	get := func(c *http.Client, path string) (int, error) {
		resp, err := c.Get("https://" + adminAddr + path)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	waitUntil(t, func() error {
		code, err := get(client(nil), "/healthz")
		if err == nil && code != 200 {
			err = fmt.Errorf("status %d", code)
		}
		return err
	})
	if code, err := get(client(nil), "/debug/syncz"); err != nil || code != 401 {
		t.Errorf("/debug/syncz without a client certificate: %d %v, want 401", code, err)
	}
	if code, err := get(client(ca), "/debug/syncz"); err != nil || code != 200 {
		t.Errorf("/debug/syncz with a client certificate: %d %v, want 200", code, err)
	}
	if code, err := get(client(ca), "/"); err != nil || code != 200 {
		t.Errorf("status page with a client certificate: %d %v, want 200", code, err)
	}
	// A Go client offers only certificates the server's CA list names, so
	// this one arrives without: 401 (others fail the handshake).
	if code, err := get(client(other), "/debug/syncz"); err == nil && code != 401 {
		t.Errorf("certificate of another CA: %d, want 401 or a TLS error", code)
	}
}

// TestLogKeys runs registries that fail (a missing services file, an
// unreachable Consul and Eureka) and checks every log line: errors under
// "error", never "error", and registry= and kind= at most once.
func TestLogKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dead := freeAddr(t) // nothing listens there
	cfg, err := config.Parse(filepath.Join(dir, "clusters.yaml"), []byte(fmt.Sprintf(`xds: {address: "%s"}
admin: {address: "%s"}
syncTimeout: 1s
registries:
  - {name: vms, kind: file, domain: vm.internal, file: {path: missing.yaml}}
  - {name: dc1, kind: consul, domain: consul, consul: {address: "%s"}}
  - {name: legacy, kind: eureka, domain: eureka, eureka: {urls: ["http://%s/eureka"], pollInterval: 1s}}
`, freeAddr(t), freeAddr(t), dead, dead)))
	if err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	g, err := NewGateway(cfg, GatewayOptions{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- g.Run(ctx) }()
	waitUntil(t, func() error {
		return errors.Join(
			wantLog(logs.String(), "registry=dc1"),
			wantLog(logs.String(), "registry=legacy"),
			wantLog(logs.String(), "registry=vms"),
		)
	})
	cancel()
	if err := <-runDone; err != nil {
		t.Errorf("Run: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(line, " err=") {
			t.Errorf("log line uses err= (want error=): %s", line)
		}
		for _, k := range []string{" registry=", " kind="} {
			if n := strings.Count(line, k); n > 1 {
				t.Errorf("log line has%s %d times: %s", k, n, line)
			}
		}
	}
}

func wantLog(logs, sub string) error {
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, sub) && strings.Contains(line, "error=") {
			return nil
		}
	}
	return fmt.Errorf("no log line with %s and an error yet:\n%s", sub, logs)
}
