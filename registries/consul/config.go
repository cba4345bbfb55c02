package consul

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/validate"
)

// Defaults of the `consul:` block.
const (
	DefaultAddress  = "127.0.0.1:8500"
	DefaultScheme   = "http"
	DefaultWaitTime = registries.Duration(5 * time.Minute)
	// DefaultMaxConcurrentWatches is the budget when maxConcurrentWatches
	// is not set and the agent's connection limit cannot be read: 64 % of
	// Consul's default limits.http_max_conns_per_client (200).
	DefaultMaxConcurrentWatches = 128
	// maxWaitTime is Consul's own cap on a blocking query's wait.
	maxWaitTime = 10 * time.Minute
)

// Config is the `consul:` block of a clusters.yaml entry. One entry watches
// one datacenter; list one entry per datacenter, each with its own domain
// (e.g. dc1.consul, dc2.consul).
type Config struct {
	// Address of the Consul agent's HTTP API, host:port. Default
	// 127.0.0.1:8500.
	Address string `yaml:"address"`
	// Scheme is http or https. Default http, or https when tls is set.
	Scheme string `yaml:"scheme"`
	// Datacenter to watch; "" is the agent's own datacenter. It is also the
	// region of endpoints whose node carries no region meta.
	Datacenter string `yaml:"datacenter"`
	// TokenFile holds the ACL token (first line, trimmed); "" for none.
	// Relative paths are resolved against the directory of clusters.yaml.
	// The token itself never appears in logs, errors or debug output.
	TokenFile string `yaml:"tokenFile"`
	// TLS configures HTTPS to the agent.
	TLS registries.TLS `yaml:"tls"`
	// PassingOnly drops instances whose checks are not all passing.
	PassingOnly bool `yaml:"passingOnly"`
	// Tags keeps only instances that carry every one of these tags.
	Tags []string `yaml:"tags"`
	// WaitTime is the longest a blocking query waits (Consul caps it at
	// 10m). Default 5m.
	WaitTime registries.Duration `yaml:"waitTime"`
	// AllowStale lets any Consul server answer blocking queries, not only
	// the leader: cheaper, may lag the leader slightly. First queries are
	// consistent regardless. Default false.
	AllowStale bool `yaml:"allowStale"`
	// MaxConcurrentWatches bounds the connections the service queries
	// hold (the catalog and health-state watches come on top): over plain
	// HTTP one blocking query each, over HTTPS (HTTP/2) 250 each. Unset
	// (0), each Run sizes it from the agent's
	// limits.http_max_conns_per_client (/v1/agent/self): 64 % of it, 128
	// at the agent's default 200 (watchBudget). A value that leaves no
	// room under the agent's limit for the other watches is lowered to
	// that automatic size.
	MaxConcurrentWatches int `yaml:"maxConcurrentWatches"`
	// Streaming is auto or off. auto (the default): when the agent speaks
	// plain HTTP and there are more than 128 services (or more than
	// maxConcurrentWatches blocking queries can hold, if fewer), they are
	// served from the Consul servers' event stream (the one client agents
	// use, on the servers' RPC port), so a change is served at once; if
	// the servers refuse it, blocking queries serve them (taking turns
	// beyond maxConcurrentWatches). off: always blocking queries.
	Streaming string `yaml:"streaming"`
	// Backoff bounds the jittered reconnect delay after errors. Defaults
	// 200ms initial, 30s max.
	Backoff BackoffConfig `yaml:"backoff"`
}

// BackoffConfig bounds reconnect delays.
type BackoffConfig struct {
	Initial registries.Duration `yaml:"initial"`
	Max     registries.Duration `yaml:"max"`
}

var (
	_ registries.Config       = (*Config)(nil)
	_ registries.PathResolver = (*Config)(nil)
	_ registries.FileReferrer = (*Config)(nil)
)

// ApplyDefaults implements registries.Config.
func (c *Config) ApplyDefaults() {
	if c.Address == "" {
		c.Address = DefaultAddress
	}
	if c.Scheme == "" {
		c.Scheme = DefaultScheme
		if c.TLS.IsSet() {
			c.Scheme = "https"
		}
	}
	if c.WaitTime == 0 {
		c.WaitTime = DefaultWaitTime
	}
	if c.Streaming == "" {
		c.Streaming = StreamingAuto
	}
	if c.Backoff.Initial == 0 {
		c.Backoff.Initial = registries.Duration(200 * time.Millisecond)
	}
	if c.Backoff.Max == 0 {
		c.Backoff.Max = registries.Duration(30 * time.Second)
	}
}

// Validate implements registries.Config.
func (c *Config) Validate() error {
	if _, _, err := validate.HostPort(c.Address); err != nil {
		return registries.FieldErr("address", "%q is not host:port", c.Address)
	}
	if c.Scheme != "http" && c.Scheme != "https" {
		return registries.FieldErr("scheme", "%q is not http or https", c.Scheme)
	}
	if c.TLS.IsSet() && c.Scheme != "https" {
		return registries.FieldErr("tls", "is set but scheme is %s", c.Scheme)
	}
	if err := c.TLS.CheckPair(); err != nil {
		return err
	}
	for i, t := range c.Tags {
		if strings.TrimSpace(t) == "" {
			return registries.FieldErr(fmt.Sprintf("tags[%d]", i), "is empty")
		}
	}
	if w := c.WaitTime.Std(); w < time.Second || w > maxWaitTime {
		return registries.FieldErr("waitTime", "%v is out of range [1s, 10m]", w)
	}
	if c.MaxConcurrentWatches < 0 {
		return registries.FieldErr("maxConcurrentWatches", "%d is below 0 (0 or unset: sized from the agent's connection limit)", c.MaxConcurrentWatches)
	}
	if c.Streaming != StreamingAuto && c.Streaming != StreamingOff {
		return registries.FieldErr("streaming", "%q is not auto or off", c.Streaming)
	}
	if c.Backoff.Initial <= 0 {
		return registries.FieldErr("backoff.initial", "must be positive")
	}
	if c.Backoff.Max < c.Backoff.Initial {
		return registries.FieldErr("backoff.max", "%v is below backoff.initial %v", c.Backoff.Max, c.Backoff.Initial)
	}
	return nil
}

// ResolvePaths implements registries.PathResolver.
func (c *Config) ResolvePaths(dir string) {
	for _, p := range append([]*string{&c.TokenFile}, c.TLS.FilePaths()...) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
}

// New implements registries.Config. It does no network I/O; the token file
// is read by each Run, so a rotated token is picked up on restart.
func (c *Config) New(common registries.Common, log *slog.Logger) (registries.Registry, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := *c
	cfg.Tags = append([]string(nil), c.Tags...)
	return &Registry{
		cfg:    cfg,
		common: common,
		log:    log, // carries registry and kind (registries.Config.New)
		m:      newMetrics(common.Name),
	}, nil
}

// Files implements registries.FileReferrer: the token file and the TLS
// files.
func (c *Config) Files() []registries.FileRef {
	var out []registries.FileRef
	if c.TokenFile != "" {
		out = append(out, registries.FileRef{Key: "tokenFile", Path: c.TokenFile, Check: registries.CheckNotEmpty})
	}
	return append(out, c.TLS.Files()...)
}

func init() {
	registries.Register(registries.Kind{Name: "consul", NewConfig: func() registries.Config { return new(Config) }, Collectors: Collectors})
}
