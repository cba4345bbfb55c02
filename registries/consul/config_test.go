package consul

import (
	"testing"
	"time"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

func TestConfigGood(t *testing.T) {
	t.Parallel()
	abs := func(rel string) string { return registrytest.ConfigPath(t, rel) } // relative paths resolve against the file's directory
	registrytest.CheckGoodConfigs[Config](t, []registrytest.GoodConfig[Config]{{File: "good.yaml", Want: Config{
		Address: "consul.internal:8501", Scheme: "https", Datacenter: "dc2",
		TokenFile: abs("secrets/consul.token"),
		TLS: registries.TLS{CAFile: abs("ca.pem"), CertFile: abs("client.pem"),
			KeyFile: abs("client-key.pem"), ServerName: "consul.internal"},
		PassingOnly: true, Tags: []string{"mesh"}, WaitTime: registries.Duration(2 * time.Minute), AllowStale: true,
		MaxConcurrentWatches: 64, Streaming: StreamingOff,
		Backoff: BackoffConfig{Initial: registries.Duration(100 * time.Millisecond), Max: registries.Duration(10 * time.Second)},
	}}}, nil)
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	var c Config
	registrytest.CheckDefaults(t, &c)
	if c.Address != "127.0.0.1:8500" || c.Scheme != "http" || c.WaitTime.Std() != 5*time.Minute || c.MaxConcurrentWatches != 0 || c.Streaming != StreamingAuto {
		t.Errorf("defaults = %+v", c)
	}
}

func TestConfigBad(t *testing.T) {
	t.Parallel()
	registrytest.BadConfigs[Config](t, []registrytest.BadConfig{
		{File: "bad-address.yaml", Key: "address", Err: "not host:port"},
		{File: "bad-scheme.yaml", Key: "scheme", Err: "not http or https"},
		{File: "bad-waittime.yaml", Key: "waitTime", Err: "out of range"},
		{File: "bad-watches.yaml", Key: "maxConcurrentWatches", Err: "below 0"},
		{File: "bad-tls-pair.yaml", Key: "tls.keyFile", Err: "go together"},
		{File: "bad-tls-scheme.yaml", Key: "tls", Err: "scheme is http"},
		{File: "bad-backoff.yaml", Key: "backoff.max", Err: "below backoff.initial"},
		{File: "bad-tag.yaml", Key: "tags[0]", Err: "empty"},
		{File: "bad-streaming.yaml", Key: "streaming", Err: "not auto or off"},
		{File: "bad-unknown-key.yaml", Err: "unknown key"},
		{File: "bad-duration.yaml", Err: "bad duration"},
	})
}
