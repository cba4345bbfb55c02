package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/test/servers"
)

// testPKI is a CA, a server certificate for the loopback addresses and a
// client certificate, written as PEM files into a directory.
type testPKI struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newTestPKI(t *testing.T, dir string) testPKI {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	writeKey := func(name string, k *ecdsa.PrivateKey) string {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name, "PRIVATE KEY", der)
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "meshfed test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, key *ecdsa.PrivateKey) []byte {
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	sk, ck := newKey(), newKey()
	return testPKI{
		ca:         write("ca.crt", "CERTIFICATE", caDER),
		serverCert: write("server.crt", "CERTIFICATE", leaf(2, "meshfed", x509.ExtKeyUsageServerAuth, sk)),
		serverKey:  writeKey("server.key", sk),
		clientCert: write("client.crt", "CERTIFICATE", leaf(3, "client", x509.ExtKeyUsageClientAuth, ck)),
		clientKey:  writeKey("client.key", ck),
	}
}

// TestGRPCClientOverTLS runs the grpc-go xDS client with the bootstrap
// `meshfed bootstrap --grpc` writes for a TLS and for an mTLS xDS server
// (observation 6 of issue 10: the bootstrap used to say insecure).
func TestGRPCClientOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	for _, mTLS := range []bool{false, true} {
		name := map[bool]string{false: "tls", true: "mtls"}[mTLS]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			pki := newTestPKI(t, dir)
			b1 := startBackend(t, "b1")
			svcFile := filepath.Join(dir, "services.yaml")
			writeFile(t, svcFile, servicesYAML(localEndpoint(b1, "v1")))
			xdsAddr := fmt.Sprintf("127.0.0.1:%d", servers.FreePort(t))
			adminAddr := fmt.Sprintf("127.0.0.1:%d", servers.FreePort(t))
			tlsBlock := "{cert: server.crt, key: server.key}"
			if mTLS {
				tlsBlock = "{cert: server.crt, key: server.key, clientCA: ca.crt}"
			}
			config := filepath.Join(dir, "clusters.yaml")
			writeFile(t, config, fmt.Sprintf("xds: {address: %s, tls: %s}\nadmin: {address: %s}\nregistries:\n"+
				"  - {name: vms, kind: file, domain: vm.internal, file: {path: services.yaml}}\n", xdsAddr, tlsBlock, adminAddr))

			if out, stderr, code := meshfedCmd(t, "validate", config); code != 0 {
				t.Fatalf("validate: exit %d: %s%s", code, out, stderr)
			}
			m := startMeshfed(t, config, xdsAddr, adminAddr)

			args := []string{"bootstrap", "--grpc", "--config", config, "--node-id", "tls-client", "--ca", pki.ca}
			if mTLS {
				// Without a client certificate the bootstrap could not connect.
				if _, stderr, code := meshfedCmd(t, args...); code == 0 || !strings.Contains(stderr, "--cert and --key") {
					t.Errorf("mTLS bootstrap without --cert: exit %d, stderr %q; want an error asking for --cert and --key", code, stderr)
				}
				args = append(args, "--cert", pki.clientCert, "--key", pki.clientKey)
			}
			bootstrap, stderr, code := meshfedCmd(t, args...)
			if code != 0 {
				t.Fatalf("bootstrap: exit %d: %s", code, stderr)
			}
			var bs struct {
				XDSServers []struct {
					ChannelCreds []struct {
						Type   string            `json:"type"`
						Config map[string]string `json:"config"`
					} `json:"channel_creds"`
				} `json:"xds_servers"`
			}
			if err := json.Unmarshal([]byte(bootstrap), &bs); err != nil {
				t.Fatalf("bootstrap: %v\n%s", err, bootstrap)
			}
			creds := bs.XDSServers[0].ChannelCreds[0]
			if creds.Type != "tls" || creds.Config["ca_certificate_file"] != pki.ca ||
				(mTLS && (creds.Config["certificate_file"] != pki.clientCert || creds.Config["private_key_file"] != pki.clientKey)) {
				t.Errorf("channel_creds = %+v, want tls with the CA (and the client pair for mTLS)", creds)
			}

			c := startClient(t, bootstrap, "xds:///echo.vm.internal:8080")
			c.waitFor(t, "b1", 5, 30*time.Second)
			proxyConnected(t, m, "tls-client")
		})
	}
}
