// Package istioconfig is meshfed's user traffic API: Istio networking
// objects (VirtualService, DestinationRule) read from watched directories
// of multi-document, kubectl-style YAML files. Each object is decoded into
// its istio.io/api type and validated alone; an invalid or conflicting
// object is rejected alone, with its source and reason, while the last
// good version of that object stays in force. The objects in force are
// published as immutable model.ConfigSnapshots, which the gateway hands
// to the aggregator so they reach xds through the same debounce as
// registry changes (docs/architecture.md §3.6).
package istioconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

// Kinds this package reads.
const (
	KindVirtualService  = "VirtualService"
	KindDestinationRule = "DestinationRule"
)

// DefaultNamespace is the namespace of an object whose metadata has none,
// as kubectl applies it.
const DefaultNamespace = "default"

// apiVersions Istio accepts for networking objects; all decode into the
// same v1alpha3 message (v1 and v1beta1 are aliases of it in istio.io/api).
var apiVersions = []string{"networking.istio.io/v1", "networking.istio.io/v1beta1", "networking.istio.io/v1alpha3"}

// Rejection is an object (or a document that could not become one) that is
// not in force as read, with why.
type Rejection struct {
	Kind      string `json:"kind,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	// Source is "<file>:<line>" of the document.
	Source string `json:"source"`
	Reason string `json:"reason"`
	// KeptLastGood: an earlier version of this object stays in force.
	KeptLastGood bool `json:"keptLastGood"`
}

func (r Rejection) String() string {
	id := r.Source
	if r.Kind != "" {
		id += " " + r.Kind + " " + r.Namespace + "/" + r.Name
	}
	return id + ": " + r.Reason
}

// parsed is one decoded document: an object with its spec, or a document
// that failed (err set; kind/name may be known).
type parsed struct {
	kind, namespace, name string
	source                string
	file                  string
	spec                  proto.Message
	hash                  string
	err                   error
}

func (p *parsed) key() string { return p.kind + "/" + p.namespace + "/" + p.name }

// decodeFile decodes every YAML document of one file. A syntax error
// fails the whole file (returned as err): which objects it held is
// unknown, so the caller keeps that file's last good objects. Documents
// of kinds this package does not read (Services, Gateways...) are
// skipped, as are empty documents.
func decodeFile(file string, data []byte) ([]*parsed, error) {
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		var ye yaml.Error
		if errors.As(err, &ye) {
			if tk := ye.GetToken(); tk != nil && tk.Position != nil {
				return nil, fmt.Errorf("%s:%d: YAML syntax error: %s", file, tk.Position.Line, ye.GetMessage())
			}
		}
		return nil, fmt.Errorf("%s: YAML syntax error: %v", file, err)
	}
	var out []*parsed
	for _, d := range f.Docs {
		if d == nil || d.Body == nil {
			continue
		}
		if _, ok := d.Body.(*ast.NullNode); ok {
			continue
		}
		line := 1
		if tk := d.Body.GetToken(); tk != nil && tk.Position != nil {
			line = tk.Position.Line
		}
		p := decodeDoc(d.Body)
		if p == nil {
			continue
		}
		p.file = file
		p.source = file + ":" + strconv.Itoa(line)
		out = append(out, p)
	}
	return out, nil
}

// decodeDoc decodes one document; nil for a kind this package skips.
func decodeDoc(body ast.Node) *parsed {
	var doc struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name      string `yaml:"name"`
			Namespace string `yaml:"namespace"`
		} `yaml:"metadata"`
		Spec any `yaml:"spec"`
	}
	var generic map[string]any
	if err := yaml.NodeToValue(body, &generic); err != nil {
		return &parsed{err: fmt.Errorf("want a mapping with apiVersion, kind, metadata and spec: %v", err)}
	}
	if err := yaml.NodeToValue(body, &doc); err != nil {
		return &parsed{err: fmt.Errorf("bad object header: %v", err)}
	}
	if doc.Kind != KindVirtualService && doc.Kind != KindDestinationRule {
		return nil
	}
	p := &parsed{kind: doc.Kind, name: doc.Metadata.Name, namespace: doc.Metadata.Namespace}
	if p.namespace == "" {
		p.namespace = DefaultNamespace
	}
	switch {
	case !slices.Contains(apiVersions, doc.APIVersion):
		p.err = fmt.Errorf("apiVersion %q: want one of %s", doc.APIVersion, strings.Join(apiVersions, ", "))
	case p.name == "":
		p.err = errors.New("metadata.name is required")
	case !dns1123Subdomain(p.name):
		p.err = fmt.Errorf("metadata.name %q: want a DNS-1123 subdomain (lowercase letters, digits, '-' and '.')", p.name)
	case !dns1123Label(p.namespace):
		p.err = fmt.Errorf("metadata.namespace %q: want a DNS-1123 label", p.namespace)
	case doc.Spec == nil:
		p.err = errors.New("spec is required")
	}
	if p.err != nil {
		return p
	}
	normalizeDurations(doc.Spec)
	js, err := json.Marshal(doc.Spec)
	if err != nil {
		p.err = fmt.Errorf("spec: %v", err)
		return p
	}
	var msg proto.Message
	switch p.kind {
	case KindVirtualService:
		msg = &networking.VirtualService{}
	case KindDestinationRule:
		msg = &networking.DestinationRule{}
	}
	if err := protojson.Unmarshal(js, msg); err != nil {
		p.err = fmt.Errorf("spec: %v", cleanProtoErr(err))
		return p
	}
	p.spec = msg
	p.hash = hashOf(p.kind, p.namespace, p.name, msg)
	return p
}

// cleanProtoErr drops protojson's "proto: " prefix and its unstable
// non-breaking spaces.
func cleanProtoErr(err error) string {
	s := strings.ReplaceAll(err.Error(), "\u00a0", " ")
	return strings.TrimPrefix(s, "proto: ")
}

// hashOf hashes an object's identity and deterministic wire form.
func hashOf(kind, ns, name string, m proto.Message) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil { // cannot happen for a message protojson produced
		b = []byte(err.Error())
	}
	h := sha256.New()
	h.Write([]byte(kind + "\x00" + ns + "\x00" + name + "\x00"))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// durationKeys are the keys of the duration fields of VirtualService and
// DestinationRule.
var durationKeys = map[string]bool{
	"timeout": true, "perTryTimeout": true, "fixedDelay": true, "exponentialDelay": true,
	"interval": true, "baseEjectionTime": true, "connectTimeout": true, "idleTimeout": true,
	"maxConnectionDuration": true, "time": true, "maxAge": true, "ttl": true, "baseInterval": true, "maxInterval": true,
}

// normalizeDurations rewrites Go-style durations ("500ms", "1m30s"), which
// Istio's CRDs accept, into the seconds form protojson reads ("0.500s"),
// in place; only string values under durationKeys are touched.
func normalizeDurations(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if s, ok := x.(string); ok && durationKeys[k] {
				if d, err := time.ParseDuration(s); err == nil {
					t[k] = strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
				}
				continue
			}
			normalizeDurations(x)
		}
	case []any:
		for _, x := range t {
			normalizeDurations(x)
		}
	}
}
