package consul

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

// load reads a testdata block as the clusters.yaml loader does.
func load(t *testing.T, name string) (*Config, error) {
	t.Helper()
	var c Config
	return &c, registrytest.LoadConfig(t, filepath.Join("testdata", name), &c)
}

func TestConfigGood(t *testing.T) {
	t.Parallel()
	c, err := load(t, "good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.ResolvePaths("/etc/meshfed")
	want := Config{
		Address: "consul.internal:8501", Scheme: "https", Datacenter: "dc2",
		TokenFile: "/etc/meshfed/secrets/consul.token",
		TLS: TLS{CAFile: "/etc/meshfed/ca.pem", CertFile: "/etc/meshfed/client.pem",
			KeyFile: "/etc/meshfed/client-key.pem", ServerName: "consul.internal"},
		PassingOnly: true, Tags: []string{"mesh"}, WaitTime: registries.Duration(2 * time.Minute), AllowStale: true,
		MaxConcurrentWatches: 64,
		Backoff:              BackoffConfig{Initial: registries.Duration(100 * time.Millisecond), Max: registries.Duration(10 * time.Second)},
	}
	if got := *c; !reflect.DeepEqual(got, want) {
		t.Errorf("config:\n got %+v\nwant %+v", got, want)
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	var c Config
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("empty block after defaults: %v", err)
	}
	if c.Address != "127.0.0.1:8500" || c.Scheme != "http" || c.WaitTime.Std() != 5*time.Minute || c.MaxConcurrentWatches != 128 {
		t.Errorf("defaults = %+v", c)
	}
}

func TestConfigBad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file    string
		wantKey string // FieldError key; "" for a decode error
		wantErr string
	}{
		{file: "bad-address.yaml", wantKey: "address", wantErr: "not host:port"},
		{file: "bad-scheme.yaml", wantKey: "scheme", wantErr: "not http or https"},
		{file: "bad-waittime.yaml", wantKey: "waitTime", wantErr: "out of range"},
		{file: "bad-watches.yaml", wantKey: "maxConcurrentWatches", wantErr: "below 1"},
		{file: "bad-tls-pair.yaml", wantKey: "tls.keyFile", wantErr: "go together"},
		{file: "bad-tls-scheme.yaml", wantKey: "tls", wantErr: "scheme is http"},
		{file: "bad-backoff.yaml", wantKey: "backoff.max", wantErr: "below backoff.initial"},
		{file: "bad-tag.yaml", wantKey: "tags[0]", wantErr: "empty"},
		{file: "bad-unknown-key.yaml", wantErr: "unknown field"},
		{file: "bad-duration.yaml", wantErr: "bad duration"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			_, err := load(t, tc.file)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q does not contain %q", err, tc.wantErr)
			}
			var fe *registries.FieldError
			if tc.wantKey != "" && (!errors.As(err, &fe) || fe.Key != tc.wantKey) {
				t.Errorf("error %v is not a FieldError for key %q", err, tc.wantKey)
			}
		})
	}
}
