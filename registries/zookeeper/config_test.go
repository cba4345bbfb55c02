package zookeeper

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

func TestConfigGood(t *testing.T) {
	t.Parallel()
	registrytest.CheckGoodConfigs[Config](t, []registrytest.GoodConfig[Config]{
		{File: "good-minimal.yaml", Want: Config{
			Servers: []string{"127.0.0.1:2181"}, Layout: LayoutCurator, Root: "/services",
			SessionTimeout: registries.Duration(10 * time.Second),
		}},
		{File: "good-flow.yaml", Want: Config{
			Servers: []string{"127.0.0.1:2181", "zk-2.internal:2181"}, Layout: LayoutCurator, Root: "/services",
			SessionTimeout: registries.Duration(10 * time.Second),
		}},
		{File: "good-full.yaml", Want: Config{
			Servers: []string{"zk-1.internal:2181", "zk-2.internal:2181", "[::1]:2181"}, Layout: LayoutDubbo,
			Root: "/dubbo-prod", SessionTimeout: registries.Duration(30 * time.Second),
			AuthFile: registrytest.ConfigPath(t, "secrets/zk-auth"), // relative paths resolve against the file's directory
		}},
	}, equalConfig)
}

func equalConfig(a, b Config) bool {
	return strings.Join(a.Servers, ",") == strings.Join(b.Servers, ",") && a.Layout == b.Layout &&
		a.Root == b.Root && a.SessionTimeout == b.SessionTimeout && a.AuthFile == b.AuthFile
}

func TestConfigBad(t *testing.T) {
	t.Parallel()
	registrytest.BadConfigs[Config](t, []registrytest.BadConfig{
		{File: "bad-no-servers.yaml", Key: "servers", Err: "is required"},
		{File: "bad-server-port.yaml", Key: "servers[1]", Err: "want host:port"},
		{File: "bad-server-chroot.yaml", Key: "servers[0]", Err: "a chroot goes in root"},
		{File: "bad-layout.yaml", Key: "layout", Err: `unknown layout "eureka"`},
		{File: "bad-root.yaml", Key: "root", Err: "must start with /"},
		{File: "bad-root-trailing.yaml", Key: "root", Err: "must not end with /"},
		{File: "bad-session-timeout.yaml", Key: "sessionTimeout", Err: "out of range"},
		{File: "bad-duration.yaml", Err: `bad duration "ten seconds"`},
		{File: "bad-unknown-key.yaml", Err: "chroot"},
	})
}

func TestConfigDefaultsPerLayout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		layout Layout
		want   string
	}{
		{name: "curator", layout: LayoutCurator, want: "/services"},
		{name: "dubbo", layout: LayoutDubbo, want: "/dubbo"},
		{name: "unset", layout: "", want: "/services"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := Config{Servers: []string{"127.0.0.1:2181"}, Layout: tt.layout}
			c.ApplyDefaults()
			if c.Root != tt.want {
				t.Errorf("root = %q, want %q", c.Root, tt.want)
			}
		})
	}
}

func TestResolvePaths(t *testing.T) {
	t.Parallel()
	c := Config{AuthFile: "secrets/zk"}
	c.ResolvePaths("/etc/meshfed")
	if c.AuthFile != "/etc/meshfed/secrets/zk" {
		t.Errorf("relative authFile resolved to %q", c.AuthFile)
	}
	c = Config{AuthFile: "/abs/zk"}
	c.ResolvePaths("/etc/meshfed")
	if c.AuthFile != "/abs/zk" {
		t.Errorf("absolute authFile changed to %q", c.AuthFile)
	}
}

func TestAuthFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name    string
		path    string
		want    string
		wantErr string
	}{
		{name: "user and password with newline", path: write("ok", "meshfed:s3cret\n"), want: "meshfed:s3cret"},
		{name: "password with colon", path: write("colon", "u:a:b"), want: "u:a:b"},
		{name: "no colon", path: write("nocolon", "justapassword\n"), wantErr: "want one line user:password"},
		{name: "empty user", path: write("nouser", ":pw"), wantErr: "want one line user:password"},
		{name: "missing file", path: filepath.Join(dir, "missing"), wantErr: "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRegistry(registries.Common{Name: "zk", Kind: "zookeeper"}, Config{AuthFile: tt.path}, nil)
			got, err := r.readAuth()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "justapassword") {
					t.Errorf("error %q shows the secret", err)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	c := &Config{}
	if _, err := c.New(registries.Common{Name: "zk", Kind: "zookeeper", Domain: "zk"}, nil); err == nil {
		t.Error("New accepted a block without servers")
	}
	c = &Config{Servers: []string{"127.0.0.1:2181"}}
	if _, err := c.New(registries.Common{Name: "zk", Kind: "zookeeper", Domain: "zk"}, nil); err != nil {
		t.Errorf("New: %v", err)
	}
}
