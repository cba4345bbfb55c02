package nacos

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

func TestConfigGood(t *testing.T) {
	t.Parallel()
	dir := registrytest.ConfigPath(t, "") // relative paths resolve against the file's directory
	registrytest.CheckGoodConfigs[Config](t, []registrytest.GoodConfig[Config]{{File: "good.yaml", Want: Config{
		Servers: []string{"nacos-1:8848", "nacos-2:8848"}, ContextPath: "/nacos/", Transport: TransportHTTP,
		GRPCPortOffset: 1001, Namespace: "prod", Groups: []string{"DEFAULT_GROUP", "payments"},
		Services: []string{"order*", "billing"}, ListInterval: registries.Duration(5 * time.Second),
		PollInterval: registries.Duration(3 * time.Second), ResyncInterval: DefaultResyncInterval, Timeout: registries.Duration(2 * time.Second),
		UsernameFile: dir + "/secrets/user", PasswordFile: dir + "/secrets/password",
		TLS:      TLS{Enabled: true, TLS: registries.TLS{CAFile: dir + "/ca.pem", ServerName: "nacos.internal"}},
		Protocol: model.ProtocolGRPC,
	}, Check: func(t *testing.T, c *Config) {
		var keys []string
		for _, f := range c.Files() {
			keys = append(keys, f.Key+"="+f.Path)
		}
		if got, want := strings.Join(keys, " "), "usernameFile="+dir+"/secrets/user passwordFile="+dir+"/secrets/password tls.caFile="+dir+"/ca.pem"; got != want {
			t.Errorf("Files = %s, want %s", got, want)
		}
		for name, ok := range map[string]bool{"orders": true, "order": true, "billing": true, "billing2": false, "cart": false} {
			if c.wanted(name) != ok {
				t.Errorf("wanted(%q) = %v, want %v", name, !ok, ok)
			}
		}
	}}}, nil)
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	var c Config
	registrytest.CheckDefaults(t, &c)
	want := Config{
		Servers: []string{DefaultServer}, ContextPath: "/nacos", Transport: TransportGRPC, GRPCPortOffset: 1000,
		Namespace: "public", Groups: []string{"DEFAULT_GROUP"}, ListInterval: DefaultListInterval,
		PollInterval: DefaultPollInterval, ResyncInterval: DefaultResyncInterval, Timeout: DefaultTimeout, Protocol: model.ProtocolHTTP,
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}
}

func TestConfigBad(t *testing.T) {
	t.Parallel()
	registrytest.BadConfigs[Config](t, []registrytest.BadConfig{
		{File: "bad-server.yaml", Key: "servers[0]", Err: "not host:port"},
		{File: "bad-server-port.yaml", Key: "servers[0]", Err: "port is not 1-65535"},
		{File: "bad-server-twice.yaml", Key: "servers[1]", Err: "listed twice"},
		{File: "bad-grpc-port.yaml", Key: "servers[0]", Err: "gRPC port 66000"},
		{File: "bad-transport.yaml", Key: "transport", Err: "not grpc or http"},
		{File: "bad-group-twice.yaml", Key: "groups[1]", Err: "listed twice"},
		{File: "bad-service-pattern.yaml", Key: "services[0]", Err: "not a pattern"},
		{File: "bad-list-interval.yaml", Key: "listInterval", Err: "out of range"},
		{File: "bad-credentials-pair.yaml", Key: "passwordFile", Err: "go together"},
		{File: "bad-access-key-pair.yaml", Key: "secretKeyFile", Err: "go together"},
		{File: "bad-tls-pair.yaml", Key: "tls.keyFile", Err: "go together"},
		{File: "bad-protocol.yaml", Key: "protocol", Err: "unknown protocol"},
		{File: "bad-context-path.yaml", Key: "contextPath", Err: "does not start with /"},
		{File: "bad-unknown-key.yaml", Err: "unknown key"},
		{File: "bad-duration.yaml", Err: "bad duration"},
	}) // the block holds file paths only, never a credential
}

// TestCredentialFilesNeverShown: a missing or empty credentials file is a
// Failed registry whose error names the file; the contents of readable
// files never appear in errors.
func TestCredentialFilesNeverShown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	user := write("user", "alice\n")
	pass := write("pass", "s3cr3t-pass\nignored second line\n")
	empty := write("empty", "\n")
	for _, tc := range []struct {
		name       string
		user, pass string
		want       string
	}{
		{"missing", user, filepath.Join(dir, "nope"), "passwordFile " + filepath.Join(dir, "nope")},
		{"empty", user, empty, "is empty"},
	} {
		c := Config{UsernameFile: tc.user, PasswordFile: tc.pass}
		c.ApplyDefaults()
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		reg, err := c.New(registries.Common{Name: "cred", Kind: "nacos", Domain: "nacos"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = reg.(*Registry).newClient()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "alice") || strings.Contains(err.Error(), "s3cr3t")) {
			t.Errorf("%s: error %q shows a credential", tc.name, err)
		}
	}
	c := Config{UsernameFile: user, PasswordFile: pass}
	c.ApplyDefaults()
	reg, _ := c.New(registries.Common{Name: "cred", Kind: "nacos", Domain: "nacos"}, nil)
	cl, err := reg.(*Registry).newClient()
	if err != nil {
		t.Fatal(err)
	}
	if cl.username != "alice" || cl.password != "s3cr3t-pass" {
		t.Errorf("read %q/%q, want the first lines trimmed", cl.username, cl.password)
	}
}

// TestSignature checks the access-key headers against a signature computed
// with openssl for the same input (HMAC-SHA1, base64, as Nacos clients).
func TestSignature(t *testing.T) {
	t.Parallel()
	// echo -n '1700000000000@@DEFAULT_GROUP@@orders' | openssl dgst -sha1 -hmac secret -binary | base64
	if got, want := sign("1700000000000@@DEFAULT_GROUP@@orders", "secret"), "M2kcI6q+u/mbeEqpJkEfvnz+S+0="; got != want {
		t.Errorf("sign = %q, want %q", got, want)
	}
	cl := &client{accessKey: "ak1", secretKey: "secret", token: "tok"}
	h := cl.authHeaders("DEFAULT_GROUP@@orders")
	if h["ak"] != "ak1" || h["accessToken"] != "tok" || !strings.HasSuffix(h["data"], "@@DEFAULT_GROUP@@orders") || h["signature"] != sign(h["data"], "secret") {
		t.Errorf("headers = %v", h)
	}
}
