package zookeeper

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/validate"
)

// Layout is how services are laid out under the root znode.
type Layout string

// Layouts.
const (
	// LayoutCurator: <root>/<service>/<instance-id>, each instance a JSON
	// document written by Curator's JsonInstanceSerializer.
	LayoutCurator Layout = "curator"
	// LayoutDubbo: <root>/<interface>/providers/<url-encoded provider URL>.
	LayoutDubbo Layout = "dubbo"
)

// Defaults of the `zookeeper:` block.
const (
	DefaultLayout         = LayoutCurator
	DefaultCuratorRoot    = "/services"
	DefaultDubboRoot      = "/dubbo"
	DefaultSessionTimeout = registries.Duration(10 * time.Second)
)

// Config is the `zookeeper:` block of a clusters.yaml entry.
type Config struct {
	// Servers are the ensemble's client addresses, host:port. Required.
	Servers Servers `yaml:"servers"`
	// Layout is curator (default) or dubbo.
	Layout Layout `yaml:"layout"`
	// Root is the znode the layout starts at, like a chroot: /services for
	// curator, /dubbo for dubbo by default.
	Root string `yaml:"root"`
	// SessionTimeout is the ZooKeeper session timeout (default 10s; the
	// server clamps it to its min/maxSessionTimeout).
	SessionTimeout registries.Duration `yaml:"sessionTimeout"`
	// AuthFile names a file holding "user:password" for ZooKeeper digest
	// authentication; "" for none. Relative paths are resolved against the
	// directory of clusters.yaml. Its content is never logged.
	AuthFile string `yaml:"authFile"`
}

// ApplyDefaults implements registries.Config.
func (c *Config) ApplyDefaults() {
	if c.Layout == "" {
		c.Layout = DefaultLayout
	}
	if c.Root == "" {
		switch c.Layout {
		case LayoutDubbo:
			c.Root = DefaultDubboRoot
		case LayoutCurator:
			c.Root = DefaultCuratorRoot
		}
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
}

// Validate implements registries.Config.
func (c *Config) Validate() error {
	if len(c.Servers) == 0 {
		return registries.FieldErr("servers", "is required: at least one host:port")
	}
	for i, s := range c.Servers {
		if err := validServer(s); err != nil {
			return registries.FieldErr(fmt.Sprintf("servers[%d]", i), "%v", err)
		}
	}
	switch c.Layout {
	case LayoutCurator, LayoutDubbo:
	default:
		return registries.FieldErr("layout", "unknown layout %q (want curator or dubbo)", c.Layout)
	}
	if err := validRoot(c.Root); err != nil {
		return registries.FieldErr("root", "%v", err)
	}
	if d := c.SessionTimeout.Std(); d < time.Second || d > time.Hour {
		return registries.FieldErr("sessionTimeout", "%v is out of range (want 1s to 1h)", d)
	}
	return nil
}

// ResolvePaths makes AuthFile absolute against dir, the directory of
// clusters.yaml.
func (c *Config) ResolvePaths(dir string) {
	if c.AuthFile != "" && !filepath.IsAbs(c.AuthFile) {
		c.AuthFile = filepath.Join(dir, c.AuthFile)
	}
}

// New implements registries.Config. It does no I/O: the auth file is read
// by Run, on every start.
func (c *Config) New(common registries.Common, log *slog.Logger) (registries.Registry, error) {
	cfg := *c
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Servers = append([]string(nil), c.Servers...)
	return newRegistry(common, cfg, log), nil
}

func validServer(s string) error {
	if strings.Contains(s, "/") {
		return fmt.Errorf("%q: want host:port; a chroot goes in root", s)
	}
	_, _, err := validate.HostPort(s)
	switch {
	case errors.Is(err, validate.ErrPort):
		_, port, _ := net.SplitHostPort(s)
		return fmt.Errorf("%q: bad port %q", s, port)
	case err != nil:
		return fmt.Errorf("%q: %v", s, err)
	}
	return nil
}

// validRoot checks a znode path as ZooKeeper does: absolute, no empty,
// "." or ".." segment, no trailing slash (except "/").
func validRoot(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%q: must start with /", p)
	}
	if p == "/" {
		return nil
	}
	if strings.HasSuffix(p, "/") {
		return fmt.Errorf("%q: must not end with /", p)
	}
	for _, seg := range strings.Split(p[1:], "/") {
		switch seg {
		case "":
			return fmt.Errorf("%q: empty path segment", p)
		case ".", "..":
			return fmt.Errorf("%q: relative path segment %q", p, seg)
		}
		if strings.ContainsFunc(seg, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return fmt.Errorf("%q: control character", p)
		}
	}
	return nil
}

// Servers is a list of host:port. YAML 1.2 reads an unquoted host:port
// as a string, also inside a flow mapping:
// `zookeeper: {servers: [127.0.0.1:2181]}`.
type Servers []string

// Files implements registries.FileReferrer: the auth file, one line
// user:password.
func (c *Config) Files() []registries.FileRef {
	if c.AuthFile == "" {
		return nil
	}
	return []registries.FileRef{{Key: "authFile", Path: c.AuthFile, Check: func(b []byte) error {
		user, _, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
		if !ok || user == "" {
			return fmt.Errorf("want one line user:password")
		}
		return nil
	}}}
}

func init() {
	registries.Register(registries.Kind{Name: "zookeeper", NewConfig: func() registries.Config { return new(Config) }, Collectors: Collectors})
}
