package consul

import (
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

// load reads a testdata block as the clusters.yaml loader does.
func load(t *testing.T, name string) (*Config, error) {
	t.Helper()
	var c Config
	return &c, registrytest.LoadConfig(t, filepath.Join("testdata", "config", name), &c)
}

func TestConfigGood(t *testing.T) {
	t.Parallel()
	c, err := load(t, "good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.Abs(filepath.Join("testdata", "config")) // relative paths resolve against the file's directory
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Address: "consul.internal:8501", Scheme: "https", Datacenter: "dc2",
		TokenFile: filepath.Join(dir, "secrets/consul.token"),
		TLS: registries.TLS{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "client.pem"),
			KeyFile: filepath.Join(dir, "client-key.pem"), ServerName: "consul.internal"},
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
	registrytest.CheckBadConfigs(t, filepath.Join("testdata", "config"), func() registries.Config { return new(Config) }, []registrytest.BadConfig{
		{File: "bad-address.yaml", Key: "address", Err: "not host:port"},
		{File: "bad-scheme.yaml", Key: "scheme", Err: "not http or https"},
		{File: "bad-waittime.yaml", Key: "waitTime", Err: "out of range"},
		{File: "bad-watches.yaml", Key: "maxConcurrentWatches", Err: "below 1"},
		{File: "bad-tls-pair.yaml", Key: "tls.keyFile", Err: "go together"},
		{File: "bad-tls-scheme.yaml", Key: "tls", Err: "scheme is http"},
		{File: "bad-backoff.yaml", Key: "backoff.max", Err: "below backoff.initial"},
		{File: "bad-tag.yaml", Key: "tags[0]", Err: "empty"},
		{File: "bad-unknown-key.yaml", Err: "unknown key"},
		{File: "bad-duration.yaml", Err: "bad duration"},
	})
}
