package zookeeper

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

// loadBlock reads a testdata block as the clusters.yaml loader does.
func loadBlock(t *testing.T, file string) (*Config, error) {
	t.Helper()
	var c Config
	return &c, registrytest.LoadConfig(t, filepath.Join("testdata", "config", file), &c)
}

func TestConfigGood(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file string
		want Config
	}{
		{file: "good-minimal.yaml", want: Config{
			Servers: []string{"127.0.0.1:2181"}, Layout: LayoutCurator, Root: "/services",
			SessionTimeout: registries.Duration(10 * time.Second),
		}},
		{file: "good-flow.yaml", want: Config{
			Servers: []string{"127.0.0.1:2181", "zk-2.internal:2181"}, Layout: LayoutCurator, Root: "/services",
			SessionTimeout: registries.Duration(10 * time.Second),
		}},
		{file: "good-full.yaml", want: Config{
			Servers: []string{"zk-1.internal:2181", "zk-2.internal:2181", "[::1]:2181"}, Layout: LayoutDubbo,
			Root: "/dubbo-prod", SessionTimeout: registries.Duration(30 * time.Second), AuthFile: "secrets/zk-auth",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			got, err := loadBlock(t, tt.file)
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !equalConfig(*got, tt.want) {
				t.Errorf("got %+v, want %+v", *got, tt.want)
			}
		})
	}
}

func equalConfig(a, b Config) bool {
	return strings.Join(a.Servers, ",") == strings.Join(b.Servers, ",") && a.Layout == b.Layout &&
		a.Root == b.Root && a.SessionTimeout == b.SessionTimeout && a.AuthFile == b.AuthFile
}

func TestConfigBad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file    string
		wantKey string // the FieldError key; "" for a decoding error
		wantMsg string
	}{
		{file: "bad-no-servers.yaml", wantKey: "servers", wantMsg: "is required"},
		{file: "bad-server-port.yaml", wantKey: "servers[1]", wantMsg: "want host:port"},
		{file: "bad-server-chroot.yaml", wantKey: "servers[0]", wantMsg: "a chroot goes in root"},
		{file: "bad-layout.yaml", wantKey: "layout", wantMsg: `unknown layout "eureka"`},
		{file: "bad-root.yaml", wantKey: "root", wantMsg: "must start with /"},
		{file: "bad-root-trailing.yaml", wantKey: "root", wantMsg: "must not end with /"},
		{file: "bad-session-timeout.yaml", wantKey: "sessionTimeout", wantMsg: "out of range"},
		{file: "bad-duration.yaml", wantMsg: `bad duration "ten seconds"`},
		{file: "bad-unknown-key.yaml", wantMsg: "chroot"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			_, err := loadBlock(t, tt.file)
			if err == nil {
				t.Fatal("no error")
			}
			var fe *registries.FieldError
			if tt.wantKey != "" {
				if !errors.As(err, &fe) || fe.Key != tt.wantKey {
					t.Errorf("error %v: want a FieldError for key %q", err, tt.wantKey)
				}
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not contain %q", err, tt.wantMsg)
			}
		})
	}
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
			r := newRegistry(Config{AuthFile: tt.path}, registries.Common{Name: "zk", Kind: "zookeeper"}, nil)
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
