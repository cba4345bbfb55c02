package eureka

import (
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

func TestConfigGood(t *testing.T) {
	t.Parallel()
	registrytest.CheckGoodConfigs[Config](t, []registrytest.GoodConfig[Config]{{File: "good.yaml", Want: Config{
		URLs:         []string{"http://eureka-1:8761/eureka/", "http://user:secret@eureka-2:8761/eureka"},
		PollInterval: registries.Duration(15 * time.Second), Timeout: registries.Duration(5 * time.Second),
		Format: FormatXML, UseHostName: true, Protocol: model.ProtocolGRPC,
	}, Check: func(t *testing.T, c *Config) {
		reg, err := c.New(registries.Common{Name: "legacy", Kind: "eureka", Domain: "eureka"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		eps := reg.(*Registry).endpoints
		if eps[0].raw != "http://eureka-1:8761/eureka" || strings.Contains(eps[1].redacted, "secret") {
			t.Errorf("endpoints = %+v: want trailing slash trimmed and the password redacted", eps)
		}
	}}}, nil)
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	var c Config
	registrytest.CheckDefaults(t, &c)
	if len(c.URLs) != 1 || c.URLs[0] != DefaultURL || c.PollInterval.Std() != 30*time.Second ||
		c.Timeout.Std() != 10*time.Second || c.Format != FormatJSON || c.Protocol != model.ProtocolHTTP || c.UseHostName {
		t.Errorf("defaults = %+v", c)
	}
}

func TestConfigBad(t *testing.T) {
	t.Parallel()
	registrytest.BadConfigs[Config](t, []registrytest.BadConfig{
		{File: "bad-url-scheme.yaml", Key: "urls[0]", Err: "not an http or https URL"},
		{File: "bad-url-host.yaml", Key: "urls[0]", Err: "has no host"},
		{File: "bad-url-twice.yaml", Key: "urls[1]", Err: "listed twice"},
		{File: "bad-poll.yaml", Key: "pollInterval", Err: "out of range"},
		{File: "bad-timeout.yaml", Err: `bad duration "-1s": must be positive`}, // durations are positive when read
		{File: "bad-format.yaml", Key: "format", Err: "not json or xml"},
		{File: "bad-protocol.yaml", Key: "protocol", Err: "unknown protocol"},
		{File: "bad-duration.yaml", Err: "bad duration"},
		{File: "bad-unknown-key.yaml", Err: "unknown key"},
	}, "secret")
}
