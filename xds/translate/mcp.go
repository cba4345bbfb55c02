package translate

import (
	"strings"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcp "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/model"
)

// MCP-over-xDS (docs/architecture.md, §4 "istiod"): istiod's configSources
// client (Istio's pkg/adsc) opens one SotW ADS stream and asks, by
// <group>/<version>/<Kind> type URL, for MeshConfig and every config
// collection it knows; it becomes ready only after each of them was
// answered once, and each SotW response replaces the whole collection. The
// resources are istio.mcp.v1alpha1.Resource messages: metadata (name
// "<namespace>/<name>", labels, version) and the config as an Any body.
//
// meshfed serves every merged service as a ServiceEntry, translated from
// the same snapshot as the proxies' resources (so quarantine, domain
// ownership, hold-down and fail-static apply alike), and answers every
// other collection in mcpTypes empty.

// mcpResourceType is the Any type URL of each MCP resource.
const mcpResourceType = "type.googleapis.com/istio.mcp.v1alpha1.Resource"

// serviceEntryAnyType is the Any type URL of a ServiceEntry body: one
// proto (v1alpha3) for every version of the collection.
const serviceEntryAnyType = "type.googleapis.com/istio.networking.v1alpha3.ServiceEntry"

// MCPNamespace is the namespace of every ServiceEntry meshfed serves.
// Exported to every namespace ("*"), the ServiceEntries are visible to
// all proxies; DestinationRules for them may live in any namespace that
// imports them, as for Istio's own ServiceEntries.
const MCPNamespace = "meshfed"

// Labels meshfed sets on the ServiceEntries it serves.
const (
	// LabelManagedBy is app.kubernetes.io/managed-by=meshfed on every one.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelRegistries lists the source registries, sorted, joined by "_"
	// (registry names are DNS labels, so "_" cannot occur in them).
	LabelRegistries = "meshfed.io/registries"
	// LabelRegistryPrefix + <registry> = "true" marks each source registry
	// (select with registry.meshfed.io/<name>=true); endpoints carry
	// LabelRegistry=<registry>.
	LabelRegistryPrefix = "registry.meshfed.io/"
	// LabelRegistry on a ServiceEntry endpoint is the registry it came from.
	LabelRegistry = "meshfed.io/registry"
)

// mcpType is one Istio config collection meshfed answers over MCP. build
// returns the resource of a service for that collection, or nil when the
// collection holds nothing per service, and the state to pass as prev to
// its next build for the same service (prev is nil the first time), so
// builders can work incrementally. Adding a collection (e.g.
// VirtualService from a config source) is one entry here plus its
// builder; the store, subscription index and protocol handling are
// shared with every other type.
type mcpType struct {
	kind     string   // short name, used as the metrics label
	typeURLs []string // <group>/<version>/<Kind>, every version istiod may ask for
	build    func(svc *model.Service, prev any) (*mcp.Resource, any)
	// config is the model.ConfigObject kind served in this collection
	// (from the config sources), "" for none.
	config string
}

// mcpTypes are the collections of Istio's pilot schema set
// (collections.Pilot) and MeshConfig. istiod waits for an answer to each
// collection it asked for, so every one is answered, empty until meshfed
// holds that type.
var mcpTypes = []mcpType{
	{kind: "ServiceEntry", build: buildServiceEntryAny, typeURLs: gvks("networking.istio.io", "ServiceEntry", "v1", "v1beta1", "v1alpha3")},
	{kind: "WorkloadEntry", typeURLs: gvks("networking.istio.io", "WorkloadEntry", "v1", "v1beta1", "v1alpha3")},
	{kind: "WorkloadGroup", typeURLs: gvks("networking.istio.io", "WorkloadGroup", "v1", "v1beta1", "v1alpha3")},
	{kind: "VirtualService", config: "VirtualService", typeURLs: gvks("networking.istio.io", "VirtualService", "v1", "v1beta1", "v1alpha3")},
	{kind: "DestinationRule", config: "DestinationRule", typeURLs: gvks("networking.istio.io", "DestinationRule", "v1", "v1beta1", "v1alpha3")},
	{kind: "Gateway", typeURLs: gvks("networking.istio.io", "Gateway", "v1", "v1beta1", "v1alpha3")},
	{kind: "Sidecar", typeURLs: gvks("networking.istio.io", "Sidecar", "v1", "v1beta1", "v1alpha3")},
	{kind: "EnvoyFilter", typeURLs: gvks("networking.istio.io", "EnvoyFilter", "v1alpha3")},
	{kind: "ProxyConfig", typeURLs: gvks("networking.istio.io", "ProxyConfig", "v1beta1")},
	{kind: "AuthorizationPolicy", typeURLs: gvks("security.istio.io", "AuthorizationPolicy", "v1", "v1beta1")},
	{kind: "PeerAuthentication", typeURLs: gvks("security.istio.io", "PeerAuthentication", "v1", "v1beta1")},
	{kind: "RequestAuthentication", typeURLs: gvks("security.istio.io", "RequestAuthentication", "v1", "v1beta1")},
	{kind: "Telemetry", typeURLs: gvks("telemetry.istio.io", "Telemetry", "v1", "v1alpha1")},
	{kind: "WasmPlugin", typeURLs: gvks("extensions.istio.io", "WasmPlugin", "v1alpha1")},
	{kind: "TrafficExtension", typeURLs: gvks("extensions.istio.io", "TrafficExtension", "v1alpha1")},
	{kind: "MeshConfig", typeURLs: []string{"core/v1alpha1/MeshConfig"}},
}

func gvks(group, kind string, versions ...string) []string {
	out := make([]string, len(versions))
	for i, v := range versions {
		out[i] = group + "/" + v + "/" + kind
	}
	return out
}

// mcpByURL maps each MCP type URL to its type.
var mcpByURL = func() map[string]*mcpType {
	m := map[string]*mcpType{}
	for i := range mcpTypes {
		for _, u := range mcpTypes[i].typeURLs {
			m[u] = &mcpTypes[i]
		}
	}
	return m
}()

// MCPTypeURLs lists every MCP type URL meshfed answers, in table order.
func MCPTypeURLs() []string {
	var out []string
	for _, t := range mcpTypes {
		out = append(out, t.typeURLs...)
	}
	return out
}

// IsMCPType reports whether typeURL is an Istio config collection served
// over MCP.
func IsMCPType(typeURL string) bool { return mcpByURL[typeURL] != nil }

// ServiceEntryTypeURL is the collection a current istiod asks for.
const ServiceEntryTypeURL = "networking.istio.io/v1/ServiceEntry"

// mcpKinds are the store collections of the MCP types: one per type URL,
// shared by every client class.
func mcpKinds() []Kind {
	var out []Kind
	for _, u := range MCPTypeURLs() {
		out = append(out, Kind{TypeURL: u})
	}
	return out
}

// requiresFullState reports whether a SotW response of typeURL must carry
// every resource the client subscribes to (absence means removal): Envoy's
// LDS and CDS, and every MCP collection.
func requiresFullState(typeURL string) bool {
	return cache.ResourceRequiresFullStateInSotw(typeURL) || IsMCPType(typeURL)
}

// anyTypeURL is the Any type URL of resources served under typeURL: the
// type URL itself for Envoy's types, the MCP Resource for MCP collections.
func anyTypeURL(typeURL string) string {
	if IsMCPType(typeURL) {
		return mcpResourceType
	}
	return typeURL
}

// mcpShortType is the metrics label of an MCP type URL ("" if none).
func mcpShortType(typeURL string) string {
	if t := mcpByURL[typeURL]; t != nil {
		return t.kind
	}
	return ""
}

func buildServiceEntryAny(svc *model.Service, prev any) (*mcp.Resource, any) {
	p, _ := prev.(*seState)
	if r, st := buildServiceEntry(svc, p); r != nil {
		return r, st
	}
	return nil, nil
}

// addMCP adds the MCP resources of svc to res, built from prev (the
// state returned by its previous call for the service, may be nil), and
// returns the state to keep.
func addMCP(svc *model.Service, prev map[string]any, res map[Kind]map[string]types.Resource) map[string]any {
	state := map[string]any{}
	for i := range mcpTypes {
		t := &mcpTypes[i]
		if t.build == nil {
			continue
		}
		r, st := t.build(svc, prev[t.kind])
		if st != nil {
			state[t.kind] = st
		}
		if r == nil {
			continue
		}
		for _, u := range t.typeURLs {
			k := Kind{TypeURL: u}
			if res[k] == nil {
				res[k] = map[string]types.Resource{}
			}
			res[k][r.GetMetadata().GetName()] = r
		}
	}
	return state
}

// EnableMCP makes the translator build the per-service MCP resources
// (ServiceEntries) from now on and returns them, as changes, for every
// service it serves. Until then none are built (see Translator); the
// Server calls it when the first stream subscribes to an MCP collection.
// Calling it again returns no changes.
func (t *Translator) EnableMCP() Changes {
	ch := Changes{}
	if t.mcp {
		return ch
	}
	t.mcp = true
	for _, st := range t.services {
		if st.res == nil {
			continue // left out: invalid
		}
		built := map[Kind]map[string]types.Resource{}
		st.mcp = addMCP(st.svc, nil, built)
		for k, rs := range built {
			if st.res[k] == nil {
				st.res[k] = map[string]types.Resource{}
			}
			for name, r := range rs {
				st.res[k][name] = r
				t.current[k][name] = r
				ch.Update(k, name, r)
			}
		}
	}
	return ch
}

// configResource wraps a config object in force as the MCP Resource istiod
// receives: named <namespace>/<name>, the Istio message as an Any body
// (type networking.v1alpha3.<Kind>, the one proto of every version), its
// version a hash of the body. nil when the object holds no Istio message.
func configResource(o *model.ConfigObject) *mcp.Resource {
	m, ok := o.Spec.(proto.Message)
	if !ok {
		return nil
	}
	b, err := deterministic.Marshal(m)
	if err != nil {
		return nil // not expected: a decoded message always marshals
	}
	return &mcp.Resource{
		Metadata: &mcp.Metadata{
			Name:    o.Namespace + "/" + o.Name,
			Version: cache.HashResource(b),
			Labels:  map[string]string{LabelManagedBy: "meshfed"},
		},
		Body: &anypb.Any{TypeUrl: "type.googleapis.com/istio.networking.v1alpha3." + o.Kind, Value: b},
	}
}

// translateConfig serves the config objects of cfg in the MCP collections
// of their kind; an object whose pointer did not change is skipped.
func (t *Translator) translateConfig(cfg *model.ConfigSnapshot, ch Changes) {
	put := func(o *model.ConfigObject, r types.Resource) {
		for i := range mcpTypes {
			if mcpTypes[i].config != o.Kind {
				continue
			}
			for _, u := range mcpTypes[i].typeURLs {
				k, name := Kind{TypeURL: u}, o.Namespace+"/"+o.Name
				if r == nil {
					if _, had := t.current[k][name]; had {
						delete(t.current[k], name)
						ch.Remove(k, name)
					}
					continue
				}
				if prev, had := t.current[k][name]; had && proto.Equal(prev, r) {
					continue
				}
				t.current[k][name] = r
				ch.Update(k, name, r)
			}
		}
	}
	seen := map[string]bool{}
	for _, o := range cfg.Objects() {
		seen[o.Key()] = true
		if t.config[o.Key()] == o {
			continue
		}
		t.config[o.Key()] = o
		if r := configResource(o); r != nil {
			put(o, r)
		} else {
			put(o, nil)
		}
	}
	for key, o := range t.config {
		if !seen[key] {
			put(o, nil)
			delete(t.config, key)
		}
	}
}

// Istio's validation of names and labels (pkg/config/labels): port names
// are DNS-1123 labels (letters of either case); label keys are Kubernetes
// qualified names with an optional DNS-1123 subdomain prefix; values are
// qualified names or empty. Written as byte loops, not regexes: every
// endpoint label of every ServiceEntry goes through them (the regexes
// they replace are the reference in mcp_test.go).

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// dnsLabel reports whether s matches [a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?.
func dnsLabel(s string) bool {
	if s == "" || !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if c := s[i]; !alnum(c) && c != '-' {
			return false
		}
	}
	return true
}

// qualifiedPart reports whether s matches ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9].
func qualifiedPart(s string) bool {
	if s == "" || !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if c := s[i]; !alnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

func validPortName(n string) bool { return len(n) <= 63 && dnsLabel(n) }

func validLabel(k, v string) bool {
	name := k
	if i := strings.IndexByte(k, '/'); i >= 0 {
		prefix := k[:i]
		if len(prefix) > 253 {
			return false
		}
		for l := range strings.SplitSeq(prefix, ".") {
			if !dnsLabel(l) {
				return false
			}
		}
		name = k[i+1:]
	}
	if len(name) > 63 || !qualifiedPart(name) {
		return false
	}
	return len(v) <= 63 && (v == "" || qualifiedPart(v))
}

// serviceEntryResource translates a service into the ServiceEntry istiod
// receives, wrapped as an MCP Resource named <MCPNamespace>/<hostname>.
//
// Mapping (documented in docs/istiod.md):
//   - hosts: the hostname; location MESH_INTERNAL (endpoints without an
//     Istio sidecar get plain text: Istio's auto mTLS only applies to
//     endpoints labelled security.istio.io/tlsMode=istio); exportTo "*".
//   - resolution STATIC with IP endpoints, DNS for DNS services.
//   - ports: protocol as in meshfed; a port name that Istio would refuse
//     (not a DNS-1123 label, or repeated) becomes <protocol>-<number>.
//   - endpoints: address, the port per service port name, labels (plus
//     meshfed.io/registry; labels Istio would refuse are left out),
//     locality, network, weight. Istio sends every ServiceEntry endpoint
//     to proxies as healthy, so only HEALTHY and DEGRADED endpoints are
//     listed: UNHEALTHY and DRAINING ones, which proxies of meshfed never
//     pick for new requests, are left out. An endpoint that does not
//     serve every port of the service is left out too (a ServiceEntry
//     endpoint serves all its ports).
//
// Its metadata version is a hash of the ServiceEntry's encoded parts, so
// it changes exactly when the content does. It is built incrementally
// (buildServiceEntry). Everything built here passes Istio's
// ServiceEntry validation, which refuses an entry whole on one bad field.
func serviceEntryResource(svc *model.Service) *mcp.Resource {
	r, _ := buildServiceEntry(svc, nil)
	return r
}

// workloadEntry is the ServiceEntry endpoint of e, or nil when it is left
// out (see serviceEntryResource).
func workloadEntry(e *model.Endpoint, ports []model.Port, names []string) *networking.WorkloadEntry {
	if ServiceEntryOmission(e, ports) != "" {
		return nil
	}
	we := &networking.WorkloadEntry{Address: e.Address, Network: e.Source.Network, Locality: e.Locality.String()}
	if e.Weight > 1 {
		we.Weight = e.Weight
	}
	for i, p := range ports {
		n, _ := e.PortFor(p)
		if n != p.Number {
			if we.Ports == nil {
				we.Ports = map[string]uint32{}
			}
			we.Ports[names[i]] = n
		}
	}
	for k, v := range e.Labels {
		if validLabel(k, v) {
			if we.Labels == nil {
				we.Labels = map[string]string{}
			}
			we.Labels[k] = v
		}
	}
	if e.Source.Registry != "" && validLabel(LabelRegistry, e.Source.Registry) {
		if we.Labels == nil {
			we.Labels = map[string]string{}
		}
		we.Labels[LabelRegistry] = e.Source.Registry
	}
	return we
}
