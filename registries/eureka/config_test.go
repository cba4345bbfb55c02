package eureka

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/model"
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
	want := Config{
		URLs:         []string{"http://eureka-1:8761/eureka/", "http://user:secret@eureka-2:8761/eureka"},
		PollInterval: registries.Duration(15 * time.Second), Timeout: registries.Duration(5 * time.Second),
		Format: FormatXML, UseHostName: true, Protocol: model.ProtocolGRPC,
	}
	if !reflect.DeepEqual(*c, want) {
		t.Errorf("config:\n got %+v\nwant %+v", *c, want)
	}
	reg, err := c.New(registries.Common{Name: "legacy", Kind: "eureka", Domain: "eureka"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eps := reg.(*Registry).endpoints
	if eps[0].raw != "http://eureka-1:8761/eureka" || strings.Contains(eps[1].redacted, "secret") {
		t.Errorf("endpoints = %+v: want trailing slash trimmed and the password redacted", eps)
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	var c Config
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("empty block after defaults: %v", err)
	}
	if len(c.URLs) != 1 || c.URLs[0] != DefaultURL || c.PollInterval.Std() != 30*time.Second ||
		c.Timeout.Std() != 10*time.Second || c.Format != FormatJSON || c.Protocol != model.ProtocolHTTP || c.UseHostName {
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
		{file: "bad-url-scheme.yaml", wantKey: "urls[0]", wantErr: "not an http or https URL"},
		{file: "bad-url-host.yaml", wantKey: "urls[0]", wantErr: "has no host"},
		{file: "bad-url-twice.yaml", wantKey: "urls[1]", wantErr: "listed twice"},
		{file: "bad-poll.yaml", wantKey: "pollInterval", wantErr: "out of range"},
		{file: "bad-timeout.yaml", wantErr: `bad duration "-1s": must be positive`}, // durations are positive when read
		{file: "bad-format.yaml", wantKey: "format", wantErr: "not json or xml"},
		{file: "bad-protocol.yaml", wantKey: "protocol", wantErr: "unknown protocol"},
		{file: "bad-duration.yaml", wantErr: "bad duration"},
		{file: "bad-unknown-key.yaml", wantErr: "unknown field"},
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
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q shows the password", err)
			}
			var fe *registries.FieldError
			if tc.wantKey == "" {
				return
			}
			if !errors.As(err, &fe) || fe.Key != tc.wantKey {
				t.Errorf("error %v: want a FieldError for key %q", err, tc.wantKey)
			}
		})
	}
}
