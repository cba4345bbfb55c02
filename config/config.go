// Package config is clusters.yaml: its schema, defaults, loading and
// validation, and the files it references. Package gateway runs a loaded
// Config; package admin serves the admin API.
//
// The clusters.yaml loader is split by layer:
//
//   - config.go: the schema (v1) types, their defaults (ApplyDefaults) and
//     path resolution (ResolvePaths);
//   - load.go: the loader, which reads the file through package yamlconf,
//     the one decoding path (YAML 1.2), and decodes each registry's kind
//     block;
//   - validate.go: each type's Validate and the checks they share;
//   - configsources.go: the checks of configSources and of blocks that
//     read clusters, and the binding of those blocks to their clusters;
//   - files.go: CheckFiles, which opens the files the config names;
//   - token.go: ReadToken, the admin token file.
//
// Unknown keys, missing required keys, bad values and cross-entry conflicts
// are all reported in one pass, each with the file, line, column and key it
// is about. Adding a key is adding a field with a yaml tag, its default in
// ApplyDefaults and its checks in Validate.
package config

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/xds/ads"
)

// Defaults of clusters.yaml. The ApplyDefaults methods are the only place
// that applies them.
const (
	DefaultXDSAddress = "127.0.0.1:15010"
	// DefaultRootNamespace is Istio's root namespace (xds.rootNamespace).
	DefaultRootNamespace = "istio-system"
	DefaultAdminAddress  = "127.0.0.1:15014"
	DefaultDebounceQuiet = Duration(5 * time.Millisecond)
	// DefaultDebounceMax bounds how long continuous churn (no quiet period)
	// delays a push: at most what Istio adds to every push
	// (PILOT_DEBOUNCE_AFTER, 100ms); see bench/analysis.md (S2).
	DefaultDebounceMax = Duration(100 * time.Millisecond)
	DefaultSyncTimeout = Duration(30 * time.Second)
	// DefaultMaxDeleteRatio holds back an update that would drop more than
	// half of a registry's endpoints (a truncated services file,
	// `services: []`, a registry answering with an empty catalog) until it
	// is seen again, released or a minute passed; maxDeleteRatio: 0 turns
	// it off.
	DefaultMaxDeleteRatio = 0.5
	// DefaultStateMaxAge: a saved registry state older than this is not
	// restored at start.
	DefaultStateMaxAge = Duration(24 * time.Hour)
)

// Config is a loaded, defaulted and validated clusters.yaml.
type Config struct {
	XDS      XDS      `yaml:"xds"`
	Admin    Admin    `yaml:"admin"`
	Debounce Debounce `yaml:"debounce"`
	// SyncTimeout bounds how long a registry that has not finished its
	// first sync keeps /readyz at 503.
	SyncTimeout Duration `yaml:"syncTimeout"`
	// State is where each registry's last accepted state is kept for a
	// warm start; off without a dir.
	State      State      `yaml:"state"`
	Registries []Registry `yaml:"registries" yamlconf:"required"`
	// ConfigSources are directories of Istio networking YAML and
	// Kubernetes clusters holding Istio's CRDs (VirtualService,
	// DestinationRule): the user traffic API.
	ConfigSources []ConfigSource `yaml:"configSources,omitempty"`
	// Path is the file the config was loaded from.
	Path string `yaml:"-"`
	// root is the file's node tree, for positions of later problems
	// (CheckFiles).
	root *yaml.Node
}

// XDS is the ADS gRPC listener.
type XDS struct {
	// Address is host:port to listen on.
	Address string `yaml:"address"`
	// TLS, when set, makes the listener serve TLS.
	TLS *TLS `yaml:"tls,omitempty"`
	// Limits bound each ADS stream.
	Limits XDSLimits `yaml:"limits"`
	// RootNamespace is Istio's root namespace: its Sidecar without a
	// workloadSelector is the default of every namespace without one
	// (docs/architecture.md §3.7).
	RootNamespace string `yaml:"rootNamespace,omitempty"`
}

// XDSLimits bound what one ADS stream may subscribe to; a request beyond
// them ends the stream with RESOURCE_EXHAUSTED (see ads.Limits).
type XDSLimits struct {
	// MaxTypeURLs is how many type URLs one stream may subscribe to.
	MaxTypeURLs int `yaml:"maxTypeURLs" yamlconf:"positive"`
	// MaxNames is how many resource names one stream may subscribe to,
	// over all its type URLs.
	MaxNames int `yaml:"maxNames" yamlconf:"positive"`
	// MaxResponseBytes is the largest response sent to a client that is a
	// gRPC library (their default receive limit is 4 MiB): larger ones are
	// split where the protocol allows, and a resource larger on its own is
	// not sent (see ads.Limits and docs/xds.md "Response size").
	MaxResponseBytes int `yaml:"maxResponseBytes" yamlconf:"positive"`
}

// ApplyDefaults sets 64 type URLs, 100,000 names and 4 MiB responses.
func (l *XDSLimits) ApplyDefaults() {
	if l.MaxTypeURLs == 0 {
		l.MaxTypeURLs = ads.DefaultMaxTypeURLs
	}
	if l.MaxNames == 0 {
		l.MaxNames = ads.DefaultMaxNames
	}
	if l.MaxResponseBytes == 0 {
		l.MaxResponseBytes = ads.DefaultMaxResponseBytes
	}
}

// State is the warm-start state directory (`state:`).
type State struct {
	// Dir, when set, holds one file per registry with its last accepted
	// state, restored at start. Made absolute against the directory of
	// clusters.yaml.
	Dir string `yaml:"dir,omitempty"`
	// MaxAge: saved states older than this are not restored.
	MaxAge Duration `yaml:"maxAge"`
}

// ApplyDefaults sets maxAge 24h; dir has no default (unset is off).
func (s *State) ApplyDefaults() {
	if s.MaxAge == 0 {
		s.MaxAge = DefaultStateMaxAge
	}
}

// ResolvePaths makes Dir absolute against dir, the directory of
// clusters.yaml.
func (s *State) ResolvePaths(dir string) {
	if s.Dir != "" && !filepath.IsAbs(s.Dir) {
		s.Dir = filepath.Join(dir, s.Dir)
	}
}

// ConfigSource is one entry of `configSources:`: a watched directory of
// multi-document Istio YAML (see package istioconfig), or the Istio CRDs of
// Kubernetes clusters (package istioconfig/crd). Exactly one of Dir and
// Kubernetes is set.
type ConfigSource struct {
	// Name is unique across configSources and a DNS label.
	Name string `yaml:"name" yamlconf:"required"`
	// Dir is the directory, made absolute against the directory of
	// clusters.yaml.
	Dir string `yaml:"dir,omitempty"`
	// Kubernetes reads VirtualServices and DestinationRules from clusters.
	Kubernetes *KubernetesConfigSource `yaml:"kubernetes,omitempty"`
}

// KubernetesConfigSource is the `kubernetes:` block of a config source.
type KubernetesConfigSource struct {
	// Clusters are names of registries of kind kubernetes (not ones found
	// by secretDiscovery): each is read with that registry's kubeconfig
	// and context, or the in-cluster credentials.
	Clusters []string `yaml:"clusters" yamlconf:"required"`
	// Namespaces limits the source to these namespaces; empty: all.
	Namespaces []string `yaml:"namespaces,omitempty"`
}

// ResolvePaths makes Dir absolute against dir, the directory of
// clusters.yaml.
func (c *ConfigSource) ResolvePaths(dir string) {
	if c.Dir != "" && !filepath.IsAbs(c.Dir) {
		c.Dir = filepath.Join(dir, c.Dir)
	}
}

// TLS holds PEM file paths, made absolute against the directory of
// clusters.yaml.
type TLS struct {
	Cert string `yaml:"cert" yamlconf:"required"`
	Key  string `yaml:"key" yamlconf:"required"`
	// ClientCA, when set, makes the server require client certificates
	// signed by it (mTLS).
	ClientCA string `yaml:"clientCA,omitempty"`
}

// Admin is the admin HTTP listener (health, debug, metrics).
//
// /healthz, /readyz, /healthz/registries[/{name}] and /metrics are always
// open. Everything else (the status page, /debug/*, pprof) requires what
// is configured: the bearer token of TokenFile, a client certificate
// signed by TLS.ClientCA, or both; with neither it is open, which suits a
// loopback address only. Mutating endpoints require the token whenever
// TokenFile is set. See docs/architecture.md (admin API).
type Admin struct {
	Address string `yaml:"address"`
	// TokenFile, when set, holds the bearer token (surrounding whitespace
	// ignored) that protected endpoints require in
	// "Authorization: Bearer <token>". It is read at start; the token is
	// never logged or echoed.
	TokenFile string `yaml:"tokenFile,omitempty"`
	// TLS, when set, makes the admin listener serve HTTPS; with ClientCA it
	// asks for client certificates, and protected endpoints require one
	// signed by ClientCA (the open endpoints do not, so probes work).
	TLS *TLS `yaml:"tls,omitempty"`
	// Pprof serves /debug/pprof/ (protected like /debug/*); off by default.
	Pprof bool `yaml:"pprof,omitempty"`
}

// Debounce sets how snapshot rebuilds are coalesced: a rebuild happens
// once no change arrived for Quiet, and at the latest Max after the first
// pending change. Max >= Quiet.
type Debounce struct {
	Quiet Duration `yaml:"quiet"`
	Max   Duration `yaml:"max"`
}

// Registry is one entry of `registries:`.
type Registry struct {
	// Name is unique across the file and a DNS label.
	Name string `yaml:"name" yamlconf:"required"`
	// Kind is one of Kinds().
	Kind string `yaml:"kind" yamlconf:"required"`
	// Domain is a lowercase ASCII DNS name without trailing dot (IDNA
	// names in their punycode form); the registry's hostnames are
	// <service>.<domain>.
	Domain string `yaml:"domain" yamlconf:"required"`
	// Locality is the default region/zone/subzone of endpoints that carry
	// none; "" for none. It is valid for model.ParseLocality.
	Locality string `yaml:"locality,omitempty"`
	// Outage is what happens to the registry's endpoints while its backend
	// is unreachable.
	Outage aggregate.Outage `yaml:"outage"`
	// MaxDeleteRatio, when in (0, 1], refuses to drop more than this share
	// of the registry's endpoints in one update (hold-down); 0 is off; nil
	// (unset) is DefaultMaxDeleteRatio after defaults.
	MaxDeleteRatio *float64 `yaml:"maxDeleteRatio,omitempty"`
	// ExportTo is the default exportTo of the registry's services
	// (Istio's: "*" every namespace, "." the service's own, "~" none, or
	// namespace names), for those that set none themselves (the
	// Kubernetes annotation networking.istio.io/exportTo, a
	// ServiceEntry's exportTo); empty: every namespace
	// (docs/architecture.md §3.7).
	ExportTo []string `yaml:"exportTo,omitempty"`
	// Block is the kind-specific block (`file:`, `consul:`...), decoded,
	// defaulted, path-resolved and validated.
	Block registries.Config `yaml:"-"`
}

// Common returns the settings every registry gets from its entry.
func (r Registry) Common() registries.Common {
	loc, _ := model.ParseLocality(r.Locality) // validated by the loader
	return registries.Common{Name: r.Name, Kind: r.Kind, Domain: r.Domain, Locality: loc}
}

// Duration is a time.Duration written in YAML as "20ms", "10m": positive
// only. It is the type every registry block uses too.
type Duration = registries.Duration

// ApplyDefaults fills every unset top-level field with its default:
//
//	xds.address             127.0.0.1:15010
//	xds.rootNamespace       istio-system
//	admin.address           127.0.0.1:15014
//	admin.pprof             false
//	debounce.quiet          5ms
//	debounce.max            100ms
//	syncTimeout             30s
//	xds.limits              maxTypeURLs 64, maxNames 100000, maxResponseBytes 4194304 (XDSLimits)
//	state.maxAge            24h (state.dir has no default: unset is off)
//	registries[].outage     keep, expireAfter 10m (aggregate.Outage)
//	registries[].maxDeleteRatio  0.5
//
// Kind blocks default themselves (registries.Config.ApplyDefaults).
func (c *Config) ApplyDefaults() {
	if c.SyncTimeout == 0 {
		c.SyncTimeout = DefaultSyncTimeout
	}
}

// ApplyDefaults sets the default listen address and root namespace.
func (x *XDS) ApplyDefaults() {
	if x.Address == "" {
		x.Address = DefaultXDSAddress
	}
	if x.RootNamespace == "" {
		x.RootNamespace = DefaultRootNamespace
	}
}

// ApplyDefaults sets the default listen address.
func (a *Admin) ApplyDefaults() {
	if a.Address == "" {
		a.Address = DefaultAdminAddress
	}
}

// ResolvePaths makes TokenFile absolute against dir, the directory of
// clusters.yaml (the TLS block resolves its own).
func (a *Admin) ResolvePaths(dir string) {
	if a.TokenFile != "" && !filepath.IsAbs(a.TokenFile) {
		a.TokenFile = filepath.Join(dir, a.TokenFile)
	}
}

// ResolvePaths makes the paths absolute against dir, the directory of
// clusters.yaml.
func (t *TLS) ResolvePaths(dir string) {
	for _, p := range []*string{&t.Cert, &t.Key, &t.ClientCA} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
}

// ApplyDefaults sets 5ms and 100ms.
func (d *Debounce) ApplyDefaults() {
	if d.Quiet == 0 {
		d.Quiet = DefaultDebounceQuiet
	}
	if d.Max == 0 {
		d.Max = DefaultDebounceMax
	}
}

// ApplyDefaults normalizes the domain: ASCII letters lowercased (others
// are left for Validate to refuse, never folded), no trailing dot; and
// sets maxDeleteRatio 0.5 when unset.
func (r *Registry) ApplyDefaults() {
	if r.MaxDeleteRatio == nil {
		d := DefaultMaxDeleteRatio
		r.MaxDeleteRatio = &d
	}
	r.Domain = strings.TrimSuffix(strings.Map(func(c rune) rune {
		if c >= 'A' && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}, r.Domain), ".")
}

// Summary describes c in one line, for `meshfed validate`.
func (c *Config) Summary() string {
	var b strings.Builder
	name := c.Path
	if name == "" {
		name = "clusters.yaml"
	}
	plural := "registries"
	if len(c.Registries) == 1 {
		plural = "registry"
	}
	fmt.Fprintf(&b, "%s: %d %s (", name, len(c.Registries), plural)
	for i, r := range c.Registries {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %s %s", r.Name, r.Kind, r.Domain)
	}
	fmt.Fprintf(&b, "); xds %s", c.XDS.Address)
	if t := c.XDS.TLS; t != nil {
		if t.ClientCA != "" {
			b.WriteString(" (mTLS)")
		} else {
			b.WriteString(" (TLS)")
		}
	}
	fmt.Fprintf(&b, "; admin %s; debounce %s/%s; syncTimeout %s",
		c.Admin.Address, c.Debounce.Quiet, c.Debounce.Max, c.SyncTimeout)
	if c.State.Dir != "" {
		fmt.Fprintf(&b, "; state %s (maxAge %s)", c.State.Dir, c.State.MaxAge)
	}
	return b.String()
}
