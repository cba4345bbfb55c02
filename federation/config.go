// Package federation loads clusters.yaml, wires the registries, the
// aggregator and the xDS server together, and supervises them.
//
// This file holds the clusters.yaml (schema v1) types with their defaults
// and validation, each type in its own ApplyDefaults and Validate methods.
// load.go reads the file through registries/yamlconf, the one decoding
// path (YAML 1.2): unknown keys, missing required keys, bad values and
// cross-entry conflicts are all reported in one pass, each with the file,
// line, column and key it is about. Adding a key is adding a field with a
// yaml tag, its default in ApplyDefaults and its checks in Validate.
package federation

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"
	"golang.org/x/net/idna"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/validate"
	"github.com/meshfed/meshfed/registries/yamlconf"
	"github.com/meshfed/meshfed/xds"
)

// Defaults of clusters.yaml. The ApplyDefaults methods are the only place
// that applies them.
const (
	DefaultXDSAddress    = "127.0.0.1:15010"
	DefaultAdminAddress  = "127.0.0.1:15014"
	DefaultDebounceQuiet = Duration(5 * time.Millisecond)
	// DefaultDebounceMax bounds how long continuous churn (no quiet period)
	// delays a push: at most what Istio adds to every push
	// (PILOT_DEBOUNCE_AFTER, 100ms); see bench/analysis.md (S2).
	DefaultDebounceMax  = Duration(100 * time.Millisecond)
	DefaultSyncTimeout  = Duration(30 * time.Second)
	DefaultOutagePolicy = registries.DefaultOutagePolicy
	DefaultExpireAfter  = registries.DefaultExpireAfter
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
	// ConfigSources are directories of Istio networking YAML
	// (VirtualService, DestinationRule): the user traffic API.
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
}

// XDSLimits bound what one ADS stream may subscribe to; a request beyond
// them ends the stream with RESOURCE_EXHAUSTED (see xds.Limits).
type XDSLimits struct {
	// MaxTypeURLs is how many type URLs one stream may subscribe to.
	MaxTypeURLs int `yaml:"maxTypeURLs" yamlconf:"positive"`
	// MaxNames is how many resource names one stream may subscribe to,
	// over all its type URLs.
	MaxNames int `yaml:"maxNames" yamlconf:"positive"`
}

// ApplyDefaults sets 64 type URLs and 100,000 names.
func (l *XDSLimits) ApplyDefaults() {
	if l.MaxTypeURLs == 0 {
		l.MaxTypeURLs = xds.DefaultMaxTypeURLs
	}
	if l.MaxNames == 0 {
		l.MaxNames = xds.DefaultMaxNames
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
// multi-document Istio YAML (see package istioconfig).
type ConfigSource struct {
	// Name is unique across configSources and a DNS label.
	Name string `yaml:"name" yamlconf:"required"`
	// Dir is the directory, made absolute against the directory of
	// clusters.yaml.
	Dir string `yaml:"dir" yamlconf:"required"`
}

// ResolvePaths makes Dir absolute against dir, the directory of
// clusters.yaml.
func (c *ConfigSource) ResolvePaths(dir string) {
	if c.Dir != "" && !filepath.IsAbs(c.Dir) {
		c.Dir = filepath.Join(dir, c.Dir)
	}
}

// Validate checks the name and that dir is set.
func (c *ConfigSource) Validate() error {
	var errs []error
	if err := checkName(c.Name); err != nil {
		errs = append(errs, registries.FieldErr("name", "%v", err))
	}
	if c.Dir == "" {
		errs = append(errs, registries.FieldErr("dir", "must not be empty"))
	}
	return errors.Join(errs...)
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
	Outage Outage `yaml:"outage"`
	// MaxDeleteRatio, when in (0, 1], refuses to drop more than this share
	// of the registry's endpoints in one update (hold-down); 0 is off; nil
	// (unset) is DefaultMaxDeleteRatio after defaults.
	MaxDeleteRatio *float64 `yaml:"maxDeleteRatio,omitempty"`
	// Block is the kind-specific block (`file:`, `consul:`...), decoded,
	// defaulted, path-resolved and validated.
	Block registries.Config `yaml:"-"`
}

// Common returns the settings every registry gets from its entry.
func (r Registry) Common() registries.Common {
	loc, _ := model.ParseLocality(r.Locality) // validated by the loader
	return registries.Common{Name: r.Name, Kind: r.Kind, Domain: r.Domain, Locality: loc}
}

// Outage is the freshness policy of a registry (the one type, shared with
// the aggregator).
type Outage = registries.Outage

// OutagePolicy says what happens to a Stale registry's endpoints.
type OutagePolicy = registries.OutagePolicy

// Outage policies.
const (
	OutageKeep   = registries.OutageKeep
	OutageExpire = registries.OutageExpire
)

// Duration is a time.Duration written in YAML as "20ms", "10m": positive
// only. It is the type every registry block uses too.
type Duration = registries.Duration

// ApplyDefaults fills every unset top-level field with its default:
//
//	xds.address             127.0.0.1:15010
//	admin.address           127.0.0.1:15014
//	admin.pprof             false
//	debounce.quiet          5ms
//	debounce.max            100ms
//	syncTimeout             30s
//	xds.limits              maxTypeURLs 64, maxNames 100000 (XDSLimits)
//	state.maxAge            24h (state.dir has no default: unset is off)
//	registries[].outage     keep, expireAfter 10m (registries.Outage)
//	registries[].maxDeleteRatio  0.5
//
// Kind blocks default themselves (registries.Config.ApplyDefaults).
func (c *Config) ApplyDefaults() {
	if c.SyncTimeout == 0 {
		c.SyncTimeout = DefaultSyncTimeout
	}
}

// ApplyDefaults sets the default listen address.
func (x *XDS) ApplyDefaults() {
	if x.Address == "" {
		x.Address = DefaultXDSAddress
	}
}

// Validate checks the address.
func (x *XDS) Validate() error {
	if err := checkAddress(x.Address); err != nil {
		return registries.FieldErr("address", "%v", err)
	}
	return nil
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

// Validate checks the address and that the token file holds a token.
func (a *Admin) Validate() error {
	var errs []error
	if err := checkAddress(a.Address); err != nil {
		errs = append(errs, registries.FieldErr("address", "%v", err))
	}
	if a.TokenFile != "" {
		if _, err := ReadToken(a.TokenFile); err != nil {
			errs = append(errs, registries.FieldErr("tokenFile", "%v", err))
		}
	}
	return errors.Join(errs...)
}

// Validate checks that no path is empty.
func (t *TLS) Validate() error {
	var errs []error
	for key, p := range map[string]string{"cert": t.Cert, "key": t.Key} {
		if p == "" {
			errs = append(errs, registries.FieldErr(key, "must not be empty"))
		}
	}
	return errors.Join(errs...)
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

// Validate checks max >= quiet.
func (d *Debounce) Validate() error {
	if d.Max < d.Quiet {
		return registries.FieldErrAlso("max", "quiet", "debounce.max (%s) must not be less than debounce.quiet (%s)", d.Max, d.Quiet)
	}
	return nil
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

// Validate checks the entry's own keys; the kind block validates itself.
func (r *Registry) Validate() error {
	var errs []error
	if err := checkName(r.Name); err != nil {
		errs = append(errs, registries.FieldErr("name", "%v", err))
	}
	if _, ok := registries.LookupKind(r.Kind); !ok {
		errs = append(errs, registries.FieldErr("kind", "unknown kind %q (supported by this build: %s)", r.Kind, strings.Join(Kinds(), ", ")))
	}
	if err := checkDomain(r.Domain); err != nil {
		errs = append(errs, registries.FieldErr("domain", "%v", err))
	}
	if r.Locality != "" {
		if _, err := model.ParseLocality(r.Locality); err != nil {
			errs = append(errs, registries.FieldErr("locality", "%v", err))
		}
	}
	if m := r.MaxDeleteRatio; m != nil && (*m < 0 || *m > 1) {
		errs = append(errs, registries.FieldErr("maxDeleteRatio", "want a number between 0 (off) and 1, got %v", *m))
	}
	return errors.Join(errs...)
}

// Validate checks what involves more than one key: at least one registry,
// unique names, domains that do not overlap, distinct listeners.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Registries) == 0 {
		errs = append(errs, registries.FieldErr("registries", "want at least one registry"))
	}
	if listenersCollide(c.XDS.Address, c.Admin.Address) {
		errs = append(errs, registries.FieldErrAlso("admin.address", "xds.address", "xds (%s) and admin (%s) listen on the same port", c.XDS.Address, c.Admin.Address))
	}
	first := make(map[string]int, len(c.Registries))
	for i, r := range c.Registries {
		if r.Name == "" {
			continue
		}
		if j, dup := first[r.Name]; dup {
			errs = append(errs, registries.FieldErrAlso(fmt.Sprintf("registries[%d].name", i), fmt.Sprintf("registries[%d].name", j), "duplicate name %q", r.Name))
			continue
		}
		first[r.Name] = i
	}
	firstSource := make(map[string]int, len(c.ConfigSources))
	for i, cs := range c.ConfigSources {
		if j, dup := firstSource[cs.Name]; dup && cs.Name != "" {
			errs = append(errs, registries.FieldErrAlso(fmt.Sprintf("configSources[%d].name", i), fmt.Sprintf("configSources[%d].name", j), "duplicate config source name %q", cs.Name))
			continue
		}
		firstSource[cs.Name] = i
	}
	for _, pair := range domainConflicts(c.Registries) {
		i, j := pair[0], pair[1]
		a, b := c.Registries[i], c.Registries[j]
		errs = append(errs, registries.FieldErrAlso(fmt.Sprintf("registries[%d].domain", j), fmt.Sprintf("registries[%d].domain", i),
			"domain %q of registry %q overlaps domain %q of registry %q: domains must not be equal or nested, except kubernetes registries sharing one",
			b.Domain, b.Name, a.Domain, a.Name))
	}
	return errors.Join(errs...)
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

// UnmarshalYAMLNode decodes a registry entry: its own keys, then the kind
// block named after its kind into a new registries.Config of that kind
// (decoded, defaulted, path-resolved and validated by yamlconf).
func (r *Registry) UnmarshalYAMLNode(d *yamlconf.Decoder, path string, n *yaml.Node) {
	type block struct {
		key    string
		k, val *yaml.Node
	}
	var blocks []block
	keys := Kinds() // a kind's block key is its name
	d.Struct(path, n, n, r, func(key string, k, v *yaml.Node) bool {
		if !slices.Contains(keys, key) {
			return false
		}
		blocks = append(blocks, block{key: key, k: k, val: v})
		return true
	}, keys)
	kind, ok := registries.LookupKind(r.Kind)
	if !ok || d.HasProblem(path+".kind") {
		return // the kind is missing or unsupported: that is the error
	}
	var match *block
	for i := range blocks {
		b := &blocks[i]
		if b.key != r.Kind {
			d.Addf(b.k, path+"."+b.key, "a %s block does not belong in a registry of kind %q", b.key, r.Kind)
			continue
		}
		match = b
	}
	if match == nil {
		d.Addf(n, path+"."+r.Kind, "missing required key: kind %q needs a %s: block", r.Kind, r.Kind)
		return
	}
	p := path + "." + r.Kind
	cfg := kind.NewConfig()
	d.Decode(p, match.k, match.val, cfg)
	if !d.HasProblem(p) {
		r.Block = cfg
	}
}

// domainConflicts returns the index pairs (i < j) of registries whose
// domains overlap where docs/architecture.md forbids it: equal, or one a
// suffix of the other at a label boundary — except two kubernetes
// registries with an equal domain, which form one multicluster set.
// Registries without a domain are skipped. It looks up each domain's
// suffixes in a map, so its time grows with the number of registries
// times their labels, plus the pairs it returns.
func domainConflicts(regs []Registry) [][2]int {
	byDomain := map[string][]int{}
	for i, r := range regs {
		if r.Domain != "" {
			byDomain[r.Domain] = append(byDomain[r.Domain], i)
		}
	}
	var out [][2]int
	for j, b := range regs {
		if b.Domain == "" {
			continue
		}
		// Equal domains declared earlier.
		for _, i := range byDomain[b.Domain] {
			if i >= j {
				break
			}
			if regs[i].Kind == b.Kind && multicluster(b.Kind) {
				continue
			}
			out = append(out, [2]int{i, j})
		}
		// Earlier registries whose domain is a proper suffix of b's, or
		// which b's domain is a proper suffix of.
		for d := b.Domain; ; {
			k := strings.IndexByte(d, '.')
			if k < 0 {
				break
			}
			d = d[k+1:]
			for _, i := range byDomain[d] {
				out = append(out, [2]int{min(i, j), max(i, j)})
			}
		}
	}
	slices.SortFunc(out, func(a, b [2]int) int {
		if a[1] != b[1] {
			return a[1] - b[1]
		}
		return a[0] - b[0]
	})
	return slices.Compact(out)
}

// checkName checks an RFC 1123 label.
func checkName(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	if !validate.Label(s) {
		return fmt.Errorf("bad name %q: want a DNS label (at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit)", s)
	}
	return nil
}

// checkDomain checks a normalized domain: ASCII (an internationalized
// name is written in punycode, and the error gives it), a DNS name.
func checkDomain(d string) error {
	if d == "" {
		return errors.New("must not be empty")
	}
	if strings.ContainsFunc(d, func(r rune) bool { return r > 0x7f }) {
		if ascii, err := idna.Lookup.ToASCII(d); err == nil && validate.Name(ascii) {
			return fmt.Errorf("bad domain %q: domains must be ASCII; write the IDNA form %q", d, ascii)
		}
		return fmt.Errorf("bad domain %q: domains must be ASCII (an internationalized name in its IDNA punycode form, xn--...)", d)
	}
	if !validate.Name(d) {
		return fmt.Errorf("bad domain %q: want a DNS name like vm.internal", d)
	}
	return nil
}

// checkAddress checks host:port with a port 1..65535 and a host that is an
// IP address or a hostname.
func checkAddress(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("bad address %q: want host:port, like 127.0.0.1:15010", s)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strings.TrimLeft(port, "0123456789") != "" {
		return fmt.Errorf("bad address %q: port %q is not in 1-65535", s, port)
	}
	if host == "" {
		return fmt.Errorf("bad address %q: no host; write 0.0.0.0:%s to listen on every interface", s, port)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	if !validate.Name(strings.ToLower(host)) {
		return fmt.Errorf("bad address %q: host %q is neither an IP address nor a hostname", s, host)
	}
	return nil
}

// listenersCollide reports whether two listen addresses (valid for
// checkAddress) would take the same port: equal port numbers (026110 is
// 26110) and hosts that are equal, the same IP written differently
// (::ffff:127.0.0.1), both loopback names (localhost, 127.0.0.1, ::1) or
// either one every interface (0.0.0.0, ::).
func listenersCollide(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil {
		return false
	}
	na, err1 := strconv.Atoi(pa)
	nb, err2 := strconv.Atoi(pb)
	if err1 != nil || err2 != nil || na != nb {
		return false
	}
	type host struct {
		ip       netip.Addr
		name     string
		loopback bool
	}
	parse := func(h string) host {
		if ip, err := netip.ParseAddr(h); err == nil {
			ip = ip.Unmap().WithZone("")
			return host{ip: ip, loopback: ip == netip.AddrFrom4([4]byte{127, 0, 0, 1}) || ip == netip.IPv6Loopback()}
		}
		h = strings.TrimSuffix(strings.ToLower(h), ".")
		return host{name: h, loopback: h == "localhost"}
	}
	x, y := parse(ha), parse(hb)
	switch {
	case x.ip.IsUnspecified() || y.ip.IsUnspecified():
		return true
	case x.ip.IsValid() && y.ip.IsValid():
		return x.ip == y.ip
	case x.loopback && y.loopback: // localhost and 127.0.0.1 or ::1
		return true
	}
	return x.name != "" && x.name == y.name
}
