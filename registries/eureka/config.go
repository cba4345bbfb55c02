package eureka

import (
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// Defaults of the `eureka:` block.
const (
	DefaultURL = "http://127.0.0.1:8761/eureka"
	// DefaultPollInterval is what Eureka's own clients use
	// (registryFetchIntervalSeconds), so meshfed adds no staleness on top
	// of what Eureka clients already accept.
	DefaultPollInterval = registries.Duration(30 * time.Second)
	DefaultTimeout      = registries.Duration(10 * time.Second)
	DefaultFormat       = FormatJSON
	DefaultProtocol     = model.ProtocolHTTP
)

// Wire formats the registry asks for. Both are always understood; the
// format only sets the Accept header.
const (
	FormatJSON = "json"
	FormatXML  = "xml"
)

// Config is the `eureka:` block of a clusters.yaml entry. One entry watches
// one Eureka cluster (its peers are listed in urls).
type Config struct {
	// URLs are the Eureka servers' service URLs as Eureka clients spell
	// them (defaultZone), e.g. http://eureka-1:8761/eureka. They are tried
	// in order: on an error the next one is used, and the one that answered
	// stays current. Basic-auth credentials may be given in a URL
	// (http://user:pass@host/eureka); they never appear in logs or errors.
	// Default [http://127.0.0.1:8761/eureka].
	URLs []string `yaml:"urls"`
	// PollInterval between fetches of /apps/delta. Default 30s, as Eureka
	// clients do.
	PollInterval registries.Duration `yaml:"pollInterval"`
	// Timeout bounds one HTTP request. Default 10s.
	Timeout registries.Duration `yaml:"timeout"`
	// Format is json or xml: what the Accept header asks for. Answers in
	// either format are parsed whatever this says. Default json.
	Format string `yaml:"format"`
	// UseHostName publishes each instance's hostName instead of its ipAddr
	// (services whose instances all give hostnames are resolved by DNS).
	// Default false.
	UseHostName bool `yaml:"useHostName"`
	// Protocol of the http port (the instance's `port`) of every app: HTTP,
	// HTTP2, GRPC or TCP. An instance's metadata key meshfed.protocol
	// overrides it for its app. Default HTTP.
	Protocol model.Protocol `yaml:"protocol"`
}

var _ registries.Config = (*Config)(nil)

// ApplyDefaults implements registries.Config.
func (c *Config) ApplyDefaults() {
	if len(c.URLs) == 0 {
		c.URLs = []string{DefaultURL}
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Format == "" {
		c.Format = DefaultFormat
	}
	if c.Protocol == "" {
		c.Protocol = DefaultProtocol
	}
}

// Validate implements registries.Config.
func (c *Config) Validate() error {
	seen := map[string]bool{}
	for i, raw := range c.URLs {
		key := fmt.Sprintf("urls[%d]", i)
		u, err := url.Parse(raw)
		if err != nil {
			return registries.FieldErr(key, "is not a URL")
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return registries.FieldErr(key, "%q is not an http or https URL", u.Redacted())
		}
		if u.Host == "" {
			return registries.FieldErr(key, "%q has no host", u.Redacted())
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return registries.FieldErr(key, "%q has a query or fragment; give the service URL only", u.Redacted())
		}
		norm := strings.TrimRight(u.String(), "/")
		if seen[norm] {
			return registries.FieldErr(key, "%q is listed twice", u.Redacted())
		}
		seen[norm] = true
	}
	if p := c.PollInterval.Std(); p < 100*time.Millisecond || p > time.Hour {
		return registries.FieldErr("pollInterval", "%v is out of range [100ms, 1h]", p)
	}
	if c.Timeout <= 0 {
		return registries.FieldErr("timeout", "must be positive")
	}
	if c.Format != FormatJSON && c.Format != FormatXML {
		return registries.FieldErr("format", "%q is not json or xml", c.Format)
	}
	p, err := model.ParseProtocol(string(c.Protocol))
	if err != nil {
		return registries.FieldErr("protocol", "%v", err)
	}
	c.Protocol = p
	return nil
}

// New implements registries.Config. It does no network I/O.
func (c *Config) New(common registries.Common, log *slog.Logger) (registries.Registry, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := *c
	cfg.URLs = make([]string, len(c.URLs))
	for i, raw := range c.URLs {
		cfg.URLs[i] = strings.TrimRight(raw, "/")
	}
	endpoints := make([]endpoint, 0, len(cfg.URLs))
	for _, raw := range cfg.URLs {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("eureka url: %w", err)
		}
		endpoints = append(endpoints, endpoint{raw: raw, redacted: u.Redacted()})
	}
	return &Registry{
		cfg:       cfg,
		common:    common,
		endpoints: endpoints,
		log:       log, // carries registry and kind (registries.Config.New)
		m:         newMetrics(common.Name),
	}, nil
}

func init() {
	registries.Register(registries.Kind{Name: "eureka", NewConfig: func() registries.Config { return new(Config) }, Collectors: Collectors})
}
