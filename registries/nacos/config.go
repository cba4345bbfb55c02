package nacos

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/validate"
)

// Defaults of the `nacos:` block.
const (
	DefaultServer    = "127.0.0.1:8848"
	DefaultNamespace = "public"
	DefaultGroup     = "DEFAULT_GROUP"
	DefaultTransport = TransportGRPC
	// DefaultGRPCPortOffset is Nacos 2.x's: the gRPC port is the HTTP
	// port + 1000.
	DefaultGRPCPortOffset = 1000
	// DefaultListInterval: Nacos has no push for the list of services, so
	// it is read again this often (Nacos' own clients re-read it for
	// Spring Cloud's gateway every 30s; meshfed picks up new services
	// sooner).
	DefaultListInterval = registries.Duration(10 * time.Second)
	// DefaultResyncInterval: every subscribed service is read again this
	// often, repairing a push that was lost.
	DefaultResyncInterval = registries.Duration(2 * time.Minute)
	// DefaultPollInterval is how often the http transport fetches every
	// service's instances (Nacos 1.x clients' cacheMillis is 10s).
	DefaultPollInterval = registries.Duration(10 * time.Second)
	DefaultTimeout      = registries.Duration(10 * time.Second)
	DefaultProtocol     = model.ProtocolHTTP
	// defaultPageSize is how many service names one list request asks for.
	defaultPageSize = 500
)

// Transports: how the registry talks to Nacos.
const (
	// TransportGRPC is Nacos 2.x's gRPC API: service instances are pushed
	// on a subscription.
	TransportGRPC = "grpc"
	// TransportHTTP is Nacos 1.x's open API (/nacos/v1/ns/...), polled:
	// for 1.x servers or networks that block the gRPC port.
	TransportHTTP = "http"
)

// Config is the `nacos:` block of a clusters.yaml entry. One entry watches
// one Nacos namespace (list one entry per namespace, each with its own
// domain).
type Config struct {
	// Servers are the Nacos servers' HTTP addresses, host:port, as Nacos
	// clients list them (serverAddr). They are tried in order; the one
	// that answered stays current. Default [127.0.0.1:8848].
	Servers []string `yaml:"servers"`
	// ContextPath of the HTTP API. Default /nacos.
	ContextPath string `yaml:"contextPath"`
	// Transport is grpc (Nacos 2.x, push; default) or http (Nacos 1.x
	// open API, polled every pollInterval).
	Transport string `yaml:"transport"`
	// GRPCPortOffset is added to a server's HTTP port to reach its gRPC
	// port. Default 1000, as Nacos.
	GRPCPortOffset int `yaml:"grpcPortOffset"`
	// Namespace is the namespace id to watch. Default public.
	Namespace string `yaml:"namespace"`
	// Groups to watch. Default [DEFAULT_GROUP].
	Groups []string `yaml:"groups"`
	// Services keeps only services whose name matches one of these
	// patterns (path.Match syntax: *, ?, [a-z]). Default: every service of
	// the groups, as they come and go.
	Services []string `yaml:"services"`
	// ListInterval is how often the list of services is read again (Nacos
	// pushes instances, not service lists). Default 10s.
	ListInterval registries.Duration `yaml:"listInterval"`
	// ResyncInterval is how often the grpc transport reads every subscribed
	// service again, as a safety net: Nacos pushes are sent once and not
	// repeated, and Polaris 1.18 never pushes changes of services outside
	// DEFAULT_GROUP. Default 2m.
	ResyncInterval registries.Duration `yaml:"resyncInterval"`
	// PollInterval is how often the http transport fetches the instances
	// of every service. Default 10s; unused by grpc.
	PollInterval registries.Duration `yaml:"pollInterval"`
	// Timeout bounds one request. Default 10s.
	Timeout registries.Duration `yaml:"timeout"`
	// UsernameFile and PasswordFile hold Nacos auth credentials (first
	// line, trimmed); AccessKeyFile and SecretKeyFile an access key pair
	// (Alibaba Cloud MSE/ACM). Relative paths are resolved against the
	// directory of clusters.yaml. The files are read by each Run; their
	// contents never appear in logs, errors or debug output.
	UsernameFile  string `yaml:"usernameFile"`
	PasswordFile  string `yaml:"passwordFile"`
	AccessKeyFile string `yaml:"accessKeyFile"`
	SecretKeyFile string `yaml:"secretKeyFile"`
	// TLS, when set, makes both the HTTP and the gRPC connections TLS.
	TLS TLS `yaml:"tls"`
	// Protocol of an instance's port when its metadata declares none:
	// HTTP, HTTP2, GRPC or TCP. Default HTTP.
	Protocol model.Protocol `yaml:"protocol"`
}

// TLS configures TLS to the servers: the shared block plus enabled, for
// TLS with the system's CAs and nothing else set.
type TLS struct {
	Enabled        bool `yaml:"enabled"`
	registries.TLS `yaml:",inline"`
}

var (
	_ registries.Config       = (*Config)(nil)
	_ registries.PathResolver = (*Config)(nil)
	_ registries.FileReferrer = (*Config)(nil)
)

// ApplyDefaults implements registries.Config.
func (c *Config) ApplyDefaults() {
	if len(c.Servers) == 0 {
		c.Servers = []string{DefaultServer}
	}
	if c.ContextPath == "" {
		c.ContextPath = "/nacos"
	}
	if c.Transport == "" {
		c.Transport = DefaultTransport
	}
	if c.GRPCPortOffset == 0 {
		c.GRPCPortOffset = DefaultGRPCPortOffset
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if len(c.Groups) == 0 {
		c.Groups = []string{DefaultGroup}
	}
	if c.ListInterval == 0 {
		c.ListInterval = DefaultListInterval
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.ResyncInterval == 0 {
		c.ResyncInterval = DefaultResyncInterval
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Protocol == "" {
		c.Protocol = DefaultProtocol
	}
	if c.TLS.IsSet() {
		c.TLS.Enabled = true
	}
}

// Validate implements registries.Config.
func (c *Config) Validate() error {
	seen := map[string]bool{}
	for i, s := range c.Servers {
		key := fmt.Sprintf("servers[%d]", i)
		_, _, err := validate.HostPort(s)
		switch {
		case errors.Is(err, validate.ErrPort):
			return registries.FieldErr(key, "%q: port is not 1-65535", s)
		case err != nil:
			return registries.FieldErr(key, "%q is not host:port", s)
		}
		if seen[s] {
			return registries.FieldErr(key, "%q is listed twice", s)
		}
		seen[s] = true
	}
	if !strings.HasPrefix(c.ContextPath, "/") {
		return registries.FieldErr("contextPath", "%q does not start with /", c.ContextPath)
	}
	if c.Transport != TransportGRPC && c.Transport != TransportHTTP {
		return registries.FieldErr("transport", "%q is not grpc or http", c.Transport)
	}
	if c.GRPCPortOffset < -65535 || c.GRPCPortOffset > 65535 {
		return registries.FieldErr("grpcPortOffset", "%d is out of range", c.GRPCPortOffset)
	}
	if c.Transport == TransportGRPC {
		for i, s := range c.Servers {
			_, port, _ := net.SplitHostPort(s)
			n, _ := strconv.Atoi(port)
			if g := n + c.GRPCPortOffset; g < 1 || g > 65535 {
				return registries.FieldErr(fmt.Sprintf("servers[%d]", i), "gRPC port %d (port + grpcPortOffset) is not 1-65535", g)
			}
		}
	}
	groups := map[string]bool{}
	for i, g := range c.Groups {
		key := fmt.Sprintf("groups[%d]", i)
		if strings.TrimSpace(g) == "" {
			return registries.FieldErr(key, "is empty")
		}
		if groups[g] {
			return registries.FieldErr(key, "%q is listed twice", g)
		}
		groups[g] = true
	}
	for i, p := range c.Services {
		if _, err := path.Match(p, ""); err != nil || strings.TrimSpace(p) == "" {
			return registries.FieldErr(fmt.Sprintf("services[%d]", i), "%q is not a pattern", p)
		}
	}
	if d := c.ListInterval.Std(); d < 100*time.Millisecond || d > time.Hour {
		return registries.FieldErr("listInterval", "%v is out of range [100ms, 1h]", d)
	}
	if d := c.PollInterval.Std(); d < 100*time.Millisecond || d > time.Hour {
		return registries.FieldErr("pollInterval", "%v is out of range [100ms, 1h]", d)
	}
	if d := c.ResyncInterval.Std(); d < 100*time.Millisecond || d > 24*time.Hour {
		return registries.FieldErr("resyncInterval", "%v is out of range [100ms, 24h]", d)
	}
	if c.Timeout <= 0 {
		return registries.FieldErr("timeout", "must be positive")
	}
	if (c.UsernameFile == "") != (c.PasswordFile == "") {
		return registries.FieldErr("passwordFile", "usernameFile and passwordFile go together")
	}
	if (c.AccessKeyFile == "") != (c.SecretKeyFile == "") {
		return registries.FieldErr("secretKeyFile", "accessKeyFile and secretKeyFile go together")
	}
	if err := c.TLS.CheckPair(); err != nil {
		return err
	}
	p, err := model.ParseProtocol(string(c.Protocol))
	if err != nil {
		return registries.FieldErr("protocol", "%v", err)
	}
	c.Protocol = p
	return nil
}

// ResolvePaths implements registries.PathResolver.
func (c *Config) ResolvePaths(dir string) {
	for _, p := range append([]*string{&c.UsernameFile, &c.PasswordFile, &c.AccessKeyFile, &c.SecretKeyFile},
		c.TLS.FilePaths()...) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
}

// Files implements registries.FileReferrer: the credential and TLS files,
// for `meshfed validate`.
func (c *Config) Files() []registries.FileRef {
	var out []registries.FileRef
	for _, f := range []struct{ key, path string }{
		{"usernameFile", c.UsernameFile}, {"passwordFile", c.PasswordFile},
		{"accessKeyFile", c.AccessKeyFile}, {"secretKeyFile", c.SecretKeyFile},
	} {
		if f.path != "" {
			out = append(out, registries.FileRef{Key: f.key, Path: f.path, Check: registries.CheckNotEmpty})
		}
	}
	return append(out, c.TLS.Files()...)
}

// New implements registries.Config. It does no network I/O; credential
// files are read by each Run, so rotated credentials are picked up on
// restart.
func (c *Config) New(common registries.Common, log *slog.Logger) (registries.Registry, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := *c
	cfg.Servers = append([]string(nil), c.Servers...)
	cfg.Groups = append([]string(nil), c.Groups...)
	cfg.Services = append([]string(nil), c.Services...)
	cfg.ContextPath = "/" + strings.Trim(c.ContextPath, "/")
	return &Registry{
		cfg:    cfg,
		common: common,
		log:    log.With("registry", common.Name, "kind", common.Kind),
		m:      newMetrics(common.Name),
	}, nil
}

// wanted reports whether a service name passes the services filter.
func (c *Config) wanted(name string) bool {
	if len(c.Services) == 0 {
		return true
	}
	for _, p := range c.Services {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

func init() {
	registries.Register(registries.Kind{Name: "nacos", NewConfig: func() registries.Config { return new(Config) }, Collectors: Collectors})
}
