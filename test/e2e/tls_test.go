package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/test/servers"
)

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
			pki := servers.WriteTestPKI(t, dir)
			b1 := startBackend(t, "b1")
			svcFile := filepath.Join(dir, "services.yaml")
			writeFile(t, svcFile, servicesYAML(localEndpoint(b1, "v1")))
			pick := servers.FreePorts(t, 2)
			xdsAddr := fmt.Sprintf("127.0.0.1:%d", pick[0])
			adminAddr := fmt.Sprintf("127.0.0.1:%d", pick[1])
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

			args := []string{"bootstrap", "--grpc", "--config", config, "--node-id", "tls-client", "--ca", pki.CA}
			if mTLS {
				// Without a client certificate the bootstrap could not connect.
				if _, stderr, code := meshfedCmd(t, args...); code == 0 || !strings.Contains(stderr, "--cert and --key") {
					t.Errorf("mTLS bootstrap without --cert: exit %d, stderr %q; want an error asking for --cert and --key", code, stderr)
				}
				args = append(args, "--cert", pki.ClientCert, "--key", pki.ClientKey)
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
			if creds.Type != "tls" || creds.Config["ca_certificate_file"] != pki.CA ||
				(mTLS && (creds.Config["certificate_file"] != pki.ClientCert || creds.Config["private_key_file"] != pki.ClientKey)) {
				t.Errorf("channel_creds = %+v, want tls with the CA (and the client pair for mTLS)", creds)
			}

			c := startClient(t, bootstrap, "xds:///echo.vm.internal:8080")
			c.waitFor(t, "b1", 5, 30*time.Second)
			proxyConnected(t, m, "tls-client")
		})
	}
}
