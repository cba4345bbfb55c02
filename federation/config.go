// Package federation loads clusters.yaml, wires the registries, the
// aggregator and the xDS server together, and supervises them.
//
// This file holds the clusters.yaml (schema v1) types, their defaults and
// their validation. Load and Parse are strict: unknown keys, missing
// required keys, bad values and cross-entry conflicts are all reported,
// each with the file, line and key it is about.
package federation

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/xds"
)

// Defaults of clusters.yaml. applyDefaults is the only place that applies
// them.
const (
	DefaultXDSAddress    = "127.0.0.1:15010"
	DefaultAdminAddress  = "127.0.0.1:15014"
	DefaultDebounceQuiet = Duration(5 * time.Millisecond)
	// DefaultDebounceMax bounds how long continuous churn (no quiet period)
	// delays a push: at most what Istio adds to every push
	// (PILOT_DEBOUNCE_AFTER, 100ms); see bench/analysis.md (S2).
	DefaultDebounceMax  = Duration(100 * time.Millisecond)
	DefaultSyncTimeout  = Duration(30 * time.Second)
	DefaultOutagePolicy = OutageKeep
	DefaultExpireAfter  = Duration(10 * time.Minute)
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
	Registries []Registry `yaml:"registries"`
	// ConfigSources are directories of Istio networking YAML
	// (VirtualService, DestinationRule): the user traffic API.
	ConfigSources []ConfigSource `yaml:"configSources,omitempty"`
	// Path is the file the config was loaded from.
	Path string `yaml:"-"`
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
	MaxTypeURLs int `yaml:"maxTypeURLs"`
	// MaxNames is how many resource names one stream may subscribe to,
	// over all its type URLs.
	MaxNames int `yaml:"maxNames"`
}

// TLS holds PEM file paths, made absolute against the directory of
// clusters.yaml.
type TLS struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// ClientCA, when set, makes the server require client certificates
	// signed by it (mTLS).
	ClientCA string `yaml:"clientCA,omitempty"`
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

// Admin is the admin HTTP listener (health, debug, metrics).
type Admin struct {
	Address string `yaml:"address"`
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
	Name string `yaml:"name"`
	// Kind is one of Kinds().
	Kind string `yaml:"kind"`
	// Domain is a lowercase DNS name without trailing dot; the registry's
	// hostnames are <service>.<domain>.
	Domain string `yaml:"domain"`
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

// ConfigSource is one entry of `configSources:`: a watched directory of
// multi-document Istio YAML (see package istioconfig).
type ConfigSource struct {
	// Name is unique across configSources and a DNS label.
	Name string `yaml:"name"`
	// Dir is the directory, made absolute against the directory of
	// clusters.yaml.
	Dir string `yaml:"dir"`
}

// Common returns the settings every registry gets from its entry.
func (r Registry) Common() registries.Common {
	loc, _ := model.ParseLocality(r.Locality) // validated by the loader
	return registries.Common{Name: r.Name, Kind: r.Kind, Domain: r.Domain, Locality: loc}
}

// Outage is the freshness policy of a registry.
type Outage struct {
	Policy OutagePolicy `yaml:"policy"`
	// ExpireAfter is how long a registry may be Degraded before it is Stale.
	ExpireAfter Duration `yaml:"expireAfter"`
}

// OutagePolicy says what happens to a Stale registry's endpoints.
type OutagePolicy string

// Outage policies.
const (
	// OutageKeep keeps serving a Stale registry's last endpoints, flagged.
	OutageKeep OutagePolicy = "keep"
	// OutageExpire withdraws a Stale registry's endpoints.
	OutageExpire OutagePolicy = "expire"
)

// Duration is a time.Duration written in YAML as "20ms", "10m": positive
// only. It is the type every registry block uses too.
type Duration = registries.Duration

// applyDefaults fills every unset field of c with its default:
//
//	xds.address             127.0.0.1:15010
//	xds.limits.maxTypeURLs  64 (xds.DefaultMaxTypeURLs)
//	xds.limits.maxNames     100000 (xds.DefaultMaxNames)
//	admin.address           127.0.0.1:15014
//	debounce.quiet          5ms
//	debounce.max            100ms
//	syncTimeout             30s
//	state.maxAge            24h (state.dir has no default: unset is off)
//	registries[].outage.policy       keep
//	registries[].outage.expireAfter  10m
//	registries[].maxDeleteRatio      0.5
//
// Kind blocks default themselves (registries.Config.ApplyDefaults).
func applyDefaults(c *Config) {
	if c.XDS.Address == "" {
		c.XDS.Address = DefaultXDSAddress
	}
	if c.XDS.Limits.MaxTypeURLs == 0 {
		c.XDS.Limits.MaxTypeURLs = xds.DefaultMaxTypeURLs
	}
	if c.XDS.Limits.MaxNames == 0 {
		c.XDS.Limits.MaxNames = xds.DefaultMaxNames
	}
	if c.Admin.Address == "" {
		c.Admin.Address = DefaultAdminAddress
	}
	if c.Debounce.Quiet == 0 {
		c.Debounce.Quiet = DefaultDebounceQuiet
	}
	if c.Debounce.Max == 0 {
		c.Debounce.Max = DefaultDebounceMax
	}
	if c.SyncTimeout == 0 {
		c.SyncTimeout = DefaultSyncTimeout
	}
	if c.State.MaxAge == 0 {
		c.State.MaxAge = DefaultStateMaxAge
	}
	for i := range c.Registries {
		if c.Registries[i].MaxDeleteRatio == nil {
			r := DefaultMaxDeleteRatio
			c.Registries[i].MaxDeleteRatio = &r
		}
		o := &c.Registries[i].Outage
		if o.Policy == "" {
			o.Policy = DefaultOutagePolicy
		}
		if o.ExpireAfter == 0 {
			o.ExpireAfter = DefaultExpireAfter
		}
	}
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

// Problem is one thing wrong with a clusters.yaml.
type Problem struct {
	File   string
	Line   int    // 1-based; 0 when the problem has no position
	Column int    // 1-based; 0 when unknown
	Key    string // path of the key, like registries[1].consul.address; "" for syntax errors
	Msg    string
}

// String formats p as "FILE:LINE:COL: KEY: MSG", leaving out what is unknown.
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
		if p.Column > 0 {
			fmt.Fprintf(&b, ":%d", p.Column)
		}
	}
	b.WriteString(": ")
	if p.Key != "" {
		b.WriteString(p.Key)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// LoadError lists every problem found in a clusters.yaml, in file order.
type LoadError struct {
	Problems []Problem
}

// Error joins the problems one per line.
func (e *LoadError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Load reads, defaults and validates the clusters.yaml at path. On any
// problem it returns a nil Config and a *LoadError.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		msg := err.Error()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			msg = "cannot read: " + pe.Err.Error()
		}
		return nil, &LoadError{Problems: []Problem{{File: path, Msg: msg}}}
	}
	return Parse(path, data)
}

// Parse is Load on data already read from path. path names the file in
// problems, and relative paths inside the file (file registry paths, TLS
// files) are resolved against its directory.
//
// For each registry the kind block is decoded strictly into the kind's
// registries.Config, then ApplyDefaults, ResolvePaths (if it is a
// registries.PathResolver) and Validate are called, in that order.
func Parse(path string, data []byte) (*Config, error) {
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		dir = filepath.Dir(path)
	}
	l := &loader{file: path, dir: dir, nodes: map[string]ast.Node{}}
	cfg := l.parse(data)
	if len(l.problems) > 0 {
		slices.SortStableFunc(l.problems, func(a, b Problem) int {
			if a.Line != b.Line {
				return a.Line - b.Line
			}
			return a.Column - b.Column
		})
		return nil, &LoadError{Problems: l.problems}
	}
	cfg.Path = path
	return cfg, nil
}

// loader walks the YAML tree of one file and collects problems.
type loader struct {
	file     string
	dir      string
	anchors  map[string]ast.Node
	nodes    map[string]ast.Node // key path → node to point at for it
	problems []Problem
}

func (l *loader) parse(data []byte) *Config {
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		var ye yaml.Error
		if errors.As(err, &ye) {
			if tk := ye.GetToken(); tk != nil && tk.Position != nil {
				l.problems = append(l.problems, Problem{File: l.file, Line: tk.Position.Line, Column: tk.Position.Column, Msg: "YAML syntax error: " + ye.GetMessage()})
				return nil
			}
		}
		l.addf(nil, "", "YAML syntax error: %v", err)
		return nil
	}
	var docs []*ast.DocumentNode
	for _, d := range f.Docs {
		if d != nil && d.Body != nil {
			docs = append(docs, d)
		}
	}
	if len(docs) == 0 {
		l.addf(nil, "", "the file is empty; want at least a registries: list")
		return nil
	}
	if len(docs) > 1 {
		l.addf(docs[1].Body, "", "the file holds %d YAML documents; want one", len(docs))
		return nil
	}
	l.anchors = map[string]ast.Node{}
	for _, n := range ast.FilterFile(ast.AnchorType, f) {
		if a, ok := n.(*ast.AnchorNode); ok && a.Name != nil {
			l.anchors[a.Name.String()] = a.Value
		}
	}

	cfg := &Config{}
	root := docs[0].Body
	l.mapping("", root, root, []field{
		{key: "xds", set: func(p string, v ast.Node) { l.xds(p, v, &cfg.XDS) }},
		{key: "admin", set: func(p string, v ast.Node) {
			l.mapping(p, v, v, []field{
				{key: "address", set: func(p string, v ast.Node) { cfg.Admin.Address, _ = l.address(p, v) }},
			})
		}},
		{key: "debounce", set: func(p string, v ast.Node) {
			l.mapping(p, v, v, []field{
				{key: "quiet", set: func(p string, v ast.Node) { cfg.Debounce.Quiet, _ = l.duration(p, v) }},
				{key: "max", set: func(p string, v ast.Node) { cfg.Debounce.Max, _ = l.duration(p, v) }},
			})
		}},
		{key: "syncTimeout", set: func(p string, v ast.Node) { cfg.SyncTimeout, _ = l.duration(p, v) }},
		{key: "state", set: func(p string, v ast.Node) {
			l.mapping(p, v, v, []field{
				{key: "dir", set: func(p string, v ast.Node) { cfg.State.Dir = l.filePath(p, v) }},
				{key: "maxAge", set: func(p string, v ast.Node) { cfg.State.MaxAge, _ = l.duration(p, v) }},
			})
		}},
		{key: "registries", required: true, set: func(p string, v ast.Node) { cfg.Registries = l.registries(p, v) }},
		{key: "configSources", set: func(p string, v ast.Node) { cfg.ConfigSources = l.configSources(p, v) }},
	})

	applyDefaults(cfg)
	l.crossChecks(cfg)
	return cfg
}

func (l *loader) duration(path string, v ast.Node) (Duration, bool) {
	s, ok := l.scalar(path, v)
	if !ok {
		return 0, false
	}
	d, err := registries.ParseDuration(s)
	if err != nil {
		l.addAtKey(path, "%v", err)
		return 0, false
	}
	return d, true
}

func (l *loader) address(path string, v ast.Node) (string, bool) {
	s, ok := l.scalar(path, v)
	if !ok {
		return "", false
	}
	if err := checkAddress(s); err != nil {
		l.addAtKey(path, "%v", err)
		return "", false
	}
	return s, true
}

// filePath reads a path and makes it absolute against the config's dir.
func (l *loader) filePath(path string, v ast.Node) string {
	s, ok := l.scalar(path, v)
	if !ok {
		return ""
	}
	if s == "" {
		l.addAtKey(path, "must not be empty")
		return ""
	}
	if !filepath.IsAbs(s) {
		s = filepath.Join(l.dir, s)
	}
	return s
}

func (l *loader) xds(path string, v ast.Node, x *XDS) {
	l.mapping(path, v, v, []field{
		{key: "address", set: func(p string, v ast.Node) { x.Address, _ = l.address(p, v) }},
		{key: "tls", set: func(p string, v ast.Node) {
			t := &TLS{}
			x.TLS = t
			l.mapping(p, v, v, []field{
				{key: "cert", required: true, set: func(p string, v ast.Node) { t.Cert = l.filePath(p, v) }},
				{key: "key", required: true, set: func(p string, v ast.Node) { t.Key = l.filePath(p, v) }},
				{key: "clientCA", set: func(p string, v ast.Node) { t.ClientCA = l.filePath(p, v) }},
			})
		}},
		{key: "limits", set: func(p string, v ast.Node) {
			l.mapping(p, v, v, []field{
				{key: "maxTypeURLs", set: func(p string, v ast.Node) { x.Limits.MaxTypeURLs = l.positiveInt(p, v) }},
				{key: "maxNames", set: func(p string, v ast.Node) { x.Limits.MaxNames = l.positiveInt(p, v) }},
			})
		}},
	})
}

// positiveInt reads an integer of at least 1; 0 after a problem.
func (l *loader) positiveInt(path string, v ast.Node) int {
	n := l.resolve(v)
	if n == nil {
		l.addAtKey(path, "missing value")
		return 0
	}
	if _, ok := n.(*ast.IntegerNode); !ok {
		l.addf(n, path, "want a whole number of at least 1, got %s", describe(n))
		return 0
	}
	i, err := strconv.Atoi(n.GetToken().Value)
	if err != nil || i < 1 {
		l.addf(n, path, "want a whole number of at least 1, got %s", n.GetToken().Value)
		return 0
	}
	return i
}

func (l *loader) registries(path string, v ast.Node) []Registry {
	n := l.resolve(v)
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		if n == nil {
			l.addAtKey(path, "want a list of registries, got nothing")
		} else {
			l.addf(n, path, "want a list of registries, got %s", describe(n))
		}
		return nil
	}
	if len(seq.Values) == 0 {
		l.addf(seq, path, "want at least one registry")
		return nil
	}
	out := make([]Registry, len(seq.Values))
	for i, e := range seq.Values {
		p := fmt.Sprintf("%s[%d]", path, i)
		if r := l.resolve(e); r != nil {
			l.nodes[p] = r
		} else {
			l.nodes[p] = e
		}
		out[i] = l.registry(p, e)
	}
	return out
}

func (l *loader) configSources(path string, v ast.Node) []ConfigSource {
	seq, ok := l.resolve(v).(*ast.SequenceNode)
	if !ok {
		l.addAtKey(path, "want a list of {name, dir}")
		return nil
	}
	out := make([]ConfigSource, len(seq.Values))
	seen := map[string]bool{}
	for i, e := range seq.Values {
		p := fmt.Sprintf("%s[%d]", path, i)
		l.nodes[p] = e
		cs := &out[i]
		l.mapping(p, e, e, []field{
			{key: "name", required: true, set: func(p string, v ast.Node) {
				s, ok := l.scalar(p, v)
				switch {
				case !ok:
				case checkName(s) != nil:
					l.addAtKey(p, "%v", checkName(s))
				case seen[s]:
					l.addAtKey(p, "duplicate config source name %q", s)
				default:
					seen[s] = true
					cs.Name = s
				}
			}},
			{key: "dir", required: true, set: func(p string, v ast.Node) { cs.Dir = l.filePath(p, v) }},
		})
	}
	return out
}

// block is a kind block found in a registry entry.
type block struct {
	key  string
	path string
	node ast.Node // the value; nil for null
}

func (l *loader) registry(path string, v ast.Node) Registry {
	var r Registry
	var blocks []block
	var kindOK bool
	fields := []field{
		{key: "name", required: true, set: func(p string, v ast.Node) {
			s, ok := l.scalar(p, v)
			if ok {
				if err := checkName(s); err != nil {
					l.addAtKey(p, "%v", err)
				} else {
					r.Name = s
				}
			}
		}},
		{key: "kind", required: true, set: func(p string, v ast.Node) {
			s, ok := l.scalar(p, v)
			if !ok {
				return
			}
			if _, ok := kinds[s]; ok {
				r.Kind, kindOK = s, true
			} else if slices.Contains(schemaKinds, s) {
				l.addAtKey(p, "kind %q is not supported by this build (supported: %s)", s, strings.Join(Kinds(), ", "))
			} else {
				l.addAtKey(p, "unknown kind %q (supported by this build: %s)", s, strings.Join(Kinds(), ", "))
			}
		}},
		{key: "domain", required: true, set: func(p string, v ast.Node) {
			s, ok := l.scalar(p, v)
			if !ok {
				return
			}
			d, err := normalizeDomain(s)
			if err != nil {
				l.addAtKey(p, "%v", err)
				return
			}
			r.Domain = d
		}},
		{key: "locality", set: func(p string, v ast.Node) {
			s, ok := l.scalar(p, v)
			if !ok {
				return
			}
			if _, err := model.ParseLocality(s); err != nil {
				l.addAtKey(p, "%v", err)
				return
			}
			r.Locality = s
		}},
		{key: "outage", set: func(p string, v ast.Node) {
			l.mapping(p, v, v, []field{
				{key: "policy", set: func(p string, v ast.Node) {
					s, ok := l.scalar(p, v)
					if !ok {
						return
					}
					switch pol := OutagePolicy(s); pol {
					case OutageKeep, OutageExpire:
						r.Outage.Policy = pol
					default:
						l.addAtKey(p, "unknown outage policy %q (want keep or expire)", s)
					}
				}},
				{key: "expireAfter", set: func(p string, v ast.Node) { r.Outage.ExpireAfter, _ = l.duration(p, v) }},
			})
		}},
		{key: "maxDeleteRatio", set: func(p string, v ast.Node) {
			n := l.resolve(v)
			switch n.(type) {
			case *ast.IntegerNode, *ast.FloatNode:
			case nil:
				l.addAtKey(p, "missing value")
				return
			default:
				l.addf(n, p, "want a number between 0 (off) and 1, got %s", describe(n))
				return
			}
			f, err := strconv.ParseFloat(n.GetToken().Value, 64)
			if err != nil || f < 0 || f > 1 {
				l.addf(n, p, "want a number between 0 (off) and 1, got %s", n.GetToken().Value)
				return
			}
			r.MaxDeleteRatio = &f
		}},
	}
	for _, k := range blockKeys() {
		fields = append(fields, field{key: k, set: func(p string, v ast.Node) {
			blocks = append(blocks, block{key: k, path: p, node: l.resolve(v)})
		}})
	}
	l.mapping(path, v, v, fields)

	if !kindOK {
		return r // the kind is missing or unsupported: that is the error
	}
	var match *block
	for i := range blocks {
		b := &blocks[i]
		if b.key != r.Kind {
			l.addAtKey(b.path, "a %s block does not belong in a registry of kind %q", b.key, r.Kind)
			continue
		}
		match = b
	}
	if match == nil {
		l.addAtKey(joinPath(path, r.Kind), "missing required key: kind %q needs a %s: block", r.Kind, r.Kind)
		return r
	}
	r.Block = l.decodeBlock(kinds[r.Kind], match)
	return r
}

// decodeBlock decodes a kind block strictly into a new Config, then
// defaults, resolves paths and validates it. It returns nil if any of
// that failed.
func (l *loader) decodeBlock(newConfig func() registries.Config, b *block) registries.Config {
	cfg := newConfig()
	if b.node != nil {
		if _, ok := mappingValues(b.node); !ok {
			l.addf(b.node, b.path, "want a mapping, got %s", describe(b.node))
			return nil
		}
		if err := yaml.NodeToValue(b.node, cfg, yaml.DisallowUnknownField()); err != nil {
			l.blockDecodeErr(b, err)
			return nil
		}
	}
	cfg.ApplyDefaults()
	if pr, ok := cfg.(registries.PathResolver); ok {
		pr.ResolvePaths(l.dir)
	}
	ok := true
	for _, err := range leafErrors(cfg.Validate()) {
		ok = false
		var fe *registries.FieldError
		if errors.As(err, &fe) {
			// Point at the key, or at its nearest parent when it is absent.
			n, _ := lookup(b.node, fe.Key)
			if n == nil {
				n = l.nodes[b.path]
			}
			l.addf(n, b.path+"."+fe.Key, "%v", fe.Err)
			continue
		}
		l.addAtKey(b.path, "%v", err)
	}
	if !ok {
		return nil
	}
	return cfg
}

// leafErrors flattens errors.Join trees.
func leafErrors(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leafErrors(e)...)
		}
		return out
	}
	return []error{err}
}

// crossChecks finds problems that involve more than one key, after
// defaults.
// Checks whose inputs already have a problem are skipped: a bad value was
// replaced by its default and would only give a misleading second error.
func (l *loader) crossChecks(c *Config) {
	if c.Debounce.Max < c.Debounce.Quiet && !l.hasProblem("debounce") {
		key := "debounce.max"
		if _, ok := l.nodes[key]; !ok {
			key = "debounce.quiet"
		}
		l.addAtKey(key, "debounce.max (%s) must not be less than debounce.quiet (%s)", c.Debounce.Max, c.Debounce.Quiet)
	}
	if c.XDS.Address == c.Admin.Address && !l.hasProblem("xds.address") && !l.hasProblem("admin.address") {
		key := "admin.address"
		if _, ok := l.nodes[key]; !ok {
			key = "xds.address"
		}
		l.addAtKey(key, "xds and admin both listen on %s", c.XDS.Address)
	}
	first := map[string]int{}
	for i, r := range c.Registries {
		if r.Name == "" {
			continue
		}
		if j, dup := first[r.Name]; dup {
			l.addAtKey(fmt.Sprintf("registries[%d].name", i), "duplicate name %q (also registries[%d].name, line %d)",
				r.Name, j, l.lineOf(fmt.Sprintf("registries[%d].name", j)))
			continue
		}
		first[r.Name] = i
	}
	for _, pair := range domainConflicts(c.Registries) {
		i, j := pair[0], pair[1]
		a, b := c.Registries[i], c.Registries[j]
		l.addAtKey(fmt.Sprintf("registries[%d].domain", j),
			"domain %q of registry %q overlaps domain %q of registry %q (registries[%d].domain, line %d): domains must not be equal or nested, except kubernetes registries sharing one",
			b.Domain, b.Name, a.Domain, a.Name, i, l.lineOf(fmt.Sprintf("registries[%d].domain", i)))
	}
}

// hasProblem reports whether a problem about key or below it was found.
func (l *loader) hasProblem(key string) bool {
	return slices.ContainsFunc(l.problems, func(p Problem) bool {
		return p.Key == key || strings.HasPrefix(p.Key, key+".") || strings.HasPrefix(p.Key, key+"[")
	})
}

// domainConflicts returns the index pairs (i < j) of registries whose
// domains overlap where DESIGN §4 forbids it: equal, or one a suffix of
// the other at a label boundary — except two kubernetes registries with an
// equal domain, which form one multicluster set. Registries without a
// domain are skipped.
func domainConflicts(regs []Registry) [][2]int {
	var out [][2]int
	for j := range regs {
		for i := range j {
			a, b := regs[i], regs[j]
			if a.Domain == "" || b.Domain == "" || !domainsOverlap(a.Domain, b.Domain) {
				continue
			}
			if a.Kind == "kubernetes" && b.Kind == "kubernetes" && a.Domain == b.Domain {
				continue
			}
			out = append(out, [2]int{i, j})
		}
	}
	return out
}

// domainsOverlap reports whether a and b (lowercase, no trailing dot) are
// equal or one is a suffix of the other at a label boundary.
func domainsOverlap(a, b string) bool {
	return a == b || strings.HasSuffix(a, "."+b) || strings.HasSuffix(b, "."+a)
}

var labelRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// checkName checks an RFC 1123 label.
func checkName(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	if len(s) > 63 || !labelRE.MatchString(s) {
		return fmt.Errorf("bad name %q: want a DNS label (at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit)", s)
	}
	return nil
}

// isDNSName reports whether s (lowercase) is a DNS name of RFC 1123
// labels, at most 253 long.
func isDNSName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, lab := range strings.Split(s, ".") {
		if len(lab) > 63 || !labelRE.MatchString(lab) {
			return false
		}
	}
	return true
}

// normalizeDomain lowercases a domain, drops one trailing dot and checks
// it is a DNS name.
func normalizeDomain(s string) (string, error) {
	d := strings.TrimSuffix(strings.ToLower(s), ".")
	if d == "" {
		return "", errors.New("must not be empty")
	}
	if !isDNSName(d) {
		return "", fmt.Errorf("bad domain %q: want a DNS name like vm.internal", s)
	}
	return d, nil
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
	if !isDNSName(strings.ToLower(host)) {
		return fmt.Errorf("bad address %q: host %q is neither an IP address nor a hostname", s, host)
	}
	return nil
}
