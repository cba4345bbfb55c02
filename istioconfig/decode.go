// Package istioconfig is meshfed's user traffic API: Istio networking
// objects (VirtualService, DestinationRule, Sidecar) read from watched directories
// of multi-document, kubectl-style YAML files. Each object is decoded into
// its istio.io/api type and validated alone; an invalid or conflicting
// object is rejected alone, with its source and reason, while the last
// good version of that object stays in force. The objects in force are
// published as immutable model.ConfigSnapshots, which the gateway hands
// to the aggregator so they reach xds through the same debounce as
// registry changes (docs/architecture.md §3.6).
package istioconfig

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/yamlconf/yamlpath"
)

// Kinds this package reads.
const (
	KindVirtualService  = "VirtualService"
	KindDestinationRule = "DestinationRule"
	KindSidecar         = "Sidecar"
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
	// Reason is every problem found, one a line ("LINE:COL: MESSAGE" when
	// Problems places them).
	Reason string `json:"reason"`
	// Problems are the problems of a document of a file, each where it is
	// written in the file.
	Problems []Problem `json:"problems,omitempty"`
	// KeptLastGood: an earlier version of this object stays in force.
	KeptLastGood bool `json:"keptLastGood"`
	// Hosts are the hosts the object names (spec.hosts, spec.host) as far
	// as they could be read, so `meshfed describe HOST` finds what was
	// rejected for a host.
	Hosts []string `json:"hosts,omitempty"`
}

// String is "SOURCE KIND NS/NAME: REASON", or, for a rejection with
// Problems, one line per problem: "FILE:LINE:COL KIND NS/NAME: MESSAGE".
func (r Rejection) String() string {
	obj := ""
	if r.Kind != "" {
		obj = " " + r.Kind + " " + r.Namespace + "/" + r.Name
	}
	if len(r.Problems) == 0 {
		return r.Source + obj + ": " + r.Reason
	}
	file := r.Source
	if i := strings.LastIndexByte(file, ':'); i >= 0 {
		file = file[:i]
	}
	lines := make([]string, len(r.Problems))
	for i, p := range r.Problems {
		lines[i] = fmt.Sprintf("%s:%d:%d%s: %s", file, p.Line, p.Column, obj, p.Message)
	}
	return strings.Join(lines, "\n")
}

// rejectionOf is the rejection of p for err (errors joined), its problems
// placed in p's document when p was read from a file.
func rejectionOf(p *parsed, err error) Rejection {
	r := Rejection{Kind: p.kind, Namespace: p.namespace, Name: p.name, Source: p.source, Hosts: hostsOf(p)}
	r.Problems = problemsOf(p.node, err)
	lines := make([]string, 0, len(r.Problems))
	for _, pr := range r.Problems {
		lines = append(lines, fmt.Sprintf("%d:%d: %s", pr.Line, pr.Column, pr.Message))
	}
	if len(lines) == 0 {
		for _, e := range yamlpath.Leaves(err) {
			lines = append(lines, e.Error())
		}
		r.Reason = strings.Join(lines, "; ")
		return r
	}
	r.Reason = strings.Join(lines, "\n")
	return r
}

// parsed is one decoded document: an object with its spec, or a document
// that failed (err set; kind/name may be known).
type parsed struct {
	kind, namespace, name string
	source                string
	fromFeed              bool      // read from a Feed (a Kubernetes cluster), not a file
	created               time.Time // creation time of a Feed object; zero for files
	file                  string
	spec                  proto.Message
	hash                  string
	err                   error
	node                  *yaml.Node // the document's body, for positions below it
	// view is the feedView object p was read from (nil for files and plain
	// Feeds): it keeps p's validation result.
	view *viewObject
}

// hostsOf returns the hosts p names: from its decoded spec, else from the
// scalars under spec.hosts / spec.host of its document; nil if none.
func hostsOf(p *parsed) []string {
	switch sp := p.spec.(type) {
	case *networking.VirtualService:
		if sp != nil {
			return slices.Clone(sp.GetHosts())
		}
	case *networking.DestinationRule:
		if sp != nil && sp.GetHost() != "" {
			return []string{sp.GetHost()}
		}
	}
	spec := mapValue(p.node, "spec")
	if h := mapValue(spec, "host"); h != nil && h.Kind == yaml.ScalarNode && h.Value != "" {
		return []string{h.Value}
	}
	var out []string
	if hs := mapValue(spec, "hosts"); hs != nil && hs.Kind == yaml.SequenceNode {
		for _, h := range hs.Content {
			if h.Kind == yaml.ScalarNode && h.Value != "" {
				out = append(out, h.Value)
			}
		}
	}
	return out
}

// mapValue is the value of key in the mapping n; nil if n is no mapping or
// lacks key.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func (p *parsed) key() string { return p.kind + "/" + p.namespace + "/" + p.name }

// maxNodes bounds the YAML nodes one document may expand to (aliases
// included): a hostile file cannot make the source spin.
const maxNodes = 1 << 20

// walk is the state of one document's nodeValue: the nodes left in the
// budget, and the anchored nodes being expanded (an alias to one of them
// would recurse until the budget ran out: seconds per document).
type walk struct {
	budget int
	open   map[*yaml.Node]bool
	drop   map[*yaml.Node]bool // mapping keys and values, list items to leave out
}

// Kind is a kind of Istio object a file is read for: its spec message and
// the checks of a decoded spec.
type Kind struct {
	// New returns a new, empty spec message of the kind.
	New func() proto.Message
	// Validate returns every problem of a decoded spec, joined, each
	// message starting with the path of its field ("spec.ports[0].name:
	// is required"), so that it is placed at that field's line:column;
	// nil if there is none. A nil Validate checks nothing.
	Validate func(proto.Message) error
}

// trafficKinds are the kinds the config source reads, with their specs.
// Their specs are validated later, once per content (memo.validate).
var trafficKinds = map[string]Kind{
	KindVirtualService:  {New: func() proto.Message { return &networking.VirtualService{} }, Validate: validateSpec},
	KindDestinationRule: {New: func() proto.Message { return &networking.DestinationRule{} }, Validate: validateSpec},
	KindSidecar:         {New: func() proto.Message { return &networking.Sidecar{} }, Validate: validateSpec},
}

// decodeFile decodes every YAML document of one file. A syntax error
// fails the whole file (returned as err): which objects it held is
// unknown, so the caller keeps that file's last good objects. Documents
// of kinds this package does not read (Services, Gateways...) are
// skipped, as are empty documents.
func decodeFile(file string, data []byte) ([]*parsed, error) {
	return decodeFileKinds(file, data, trafficKinds)
}

// decodeFileKinds is decodeFile for the kinds of the table kinds;
// documents of other kinds are skipped.
func decodeFileKinds(file string, data []byte, kinds map[string]Kind) ([]*parsed, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []*parsed
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: YAML syntax error: %v", file, strings.TrimPrefix(err.Error(), "yaml: "))
		}
		body := &doc
		if doc.Kind == yaml.DocumentNode {
			if len(doc.Content) == 0 {
				continue
			}
			body = doc.Content[0]
		}
		if body.Kind == yaml.ScalarNode && body.Tag == "!!null" {
			continue
		}
		v, err := nodeValue(body, &walk{budget: maxNodes, open: map[*yaml.Node]bool{}})
		p := &parsed{}
		if err == nil {
			p = decodeDoc(v, body, kinds)
		} else {
			p.err = err
		}
		if p == nil {
			continue
		}
		p.file, p.node = file, body
		p.source = file + ":" + strconv.Itoa(body.Line)
		out = append(out, p)
	}
}

// nodeValue converts a YAML node to plain Go values (map[string]any,
// []any, string, int64, float64, bool, nil) as JSON would carry them:
// scalars by their resolved tag, timestamps and other tags as the text
// written. Aliases are followed within w's budget of nodes; an alias to a
// node that contains it is an error.
func nodeValue(n *yaml.Node, w *walk) (any, error) {
	if w.budget--; w.budget < 0 {
		return nil, errors.New("the document is too large (aliases expand beyond a million nodes)")
	}
	switch n.Kind {
	case yaml.AliasNode:
		if w.open[n.Alias] {
			return nil, fmt.Errorf("line %d: the alias *%s refers to a node that contains it", n.Line, n.Value)
		}
		w.open[n.Alias] = true
		defer delete(w.open, n.Alias)
		return nodeValue(n.Alias, w)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: a mapping key must be a scalar", k.Line)
			}
			if w.drop[k] || w.drop[n.Content[i+1]] {
				continue
			}
			v, err := nodeValue(n.Content[i+1], w)
			if err != nil {
				return nil, err
			}
			m[k.Value] = v
		}
		return m, nil
	case yaml.SequenceNode:
		l := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			if w.drop[c] {
				continue
			}
			v, err := nodeValue(c, w)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		return l, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err == nil {
				return b, nil
			}
		case "!!int":
			var i int64
			if err := n.Decode(&i); err == nil {
				return i, nil
			}
		case "!!float":
			var f float64
			if err := n.Decode(&f); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
				return f, nil
			}
		}
		return n.Value, nil
	}
	return nil, fmt.Errorf("line %d: unsupported YAML node", n.Line)
}

// decodeDoc decodes one document (v, the value of the YAML body); nil for
// a kind not in kinds. A spec protojson refuses is checked field by field
// against its message (checkSchema): every unknown field and value of the
// wrong type is reported where it is written, and the rest of the spec,
// decoded without them, is validated too (Kind.Validate), so that one
// reading reports every problem of the object.
func decodeDoc(v any, body *yaml.Node, kinds map[string]Kind) *parsed {
	root, ok := v.(map[string]any)
	if !ok {
		return &parsed{err: errors.New("want a mapping with apiVersion, kind, metadata and spec")}
	}
	str := func(m map[string]any, k string) string {
		s, _ := m[k].(string)
		return s
	}
	kind := str(root, "kind")
	k, ok := kinds[kind]
	if !ok {
		return nil
	}
	meta, _ := root["metadata"].(map[string]any)
	p := &parsed{kind: kind, name: str(meta, "name"), namespace: str(meta, "namespace")}
	if p.namespace == "" {
		p.namespace = DefaultNamespace
	}
	apiVersion := str(root, "apiVersion")
	spec := root["spec"]
	// Every problem of the object: its apiVersion, its metadata, then
	// its spec.
	var errs []error
	if !slices.Contains(apiVersions, apiVersion) {
		errs = append(errs, fmt.Errorf("apiVersion %q: want one of %s", apiVersion, strings.Join(apiVersions, ", ")))
	}
	switch {
	case p.name == "":
		errs = append(errs, errors.New("metadata.name is required"))
	case !dns1123Subdomain(p.name):
		errs = append(errs, fmt.Errorf("metadata.name %q: want a DNS-1123 subdomain (lowercase letters, digits, '-' and '.')", p.name))
	}
	if !dns1123Label(p.namespace) {
		errs = append(errs, fmt.Errorf("metadata.namespace %q: want a DNS-1123 label", p.namespace))
	}
	if spec == nil {
		p.err = errors.Join(append(errs, errors.New("spec is required"))...)
		return p
	}
	normalizeDurations(spec)
	js, err := json.Marshal(spec)
	if err != nil {
		p.err = errors.Join(append(errs, fmt.Errorf("spec: %v", err))...)
		return p
	}
	msg := k.New()
	if err := protojson.Unmarshal(js, msg); err != nil {
		specErrs := schemaErrors(body, k)
		if len(specErrs) == 0 {
			specErrs = []error{fmt.Errorf("spec: %v", cleanProtoErr(err))}
		}
		p.err = errors.Join(append(errs, specErrs...)...)
		return p
	}
	if len(errs) > 0 {
		// The spec decodes, but the object is invalid: its spec's problems
		// are reported with the rest.
		if k.Validate != nil {
			errs = append(errs, yamlpath.Leaves(k.Validate(msg))...)
		}
		p.err = errors.Join(errs...)
		return p
	}
	p.spec = msg
	p.hash = hashOf(p.kind, p.namespace, p.name, msg)
	return p
}

// schemaErrors are the problems checkSchema finds in the spec of body,
// then those k.Validate finds in the rest of the spec.
func schemaErrors(body *yaml.Node, k Kind) []error {
	msg := k.New()
	errs, drop := checkSchema(body, msg.ProtoReflect().Descriptor())
	if len(errs) == 0 {
		return nil
	}
	rest, err := nodeValue(body, &walk{budget: maxNodes, open: map[*yaml.Node]bool{}, drop: drop})
	root, _ := rest.(map[string]any)
	if err != nil || root["spec"] == nil {
		return errs
	}
	normalizeDurations(root["spec"])
	js, err := json.Marshal(root["spec"])
	if err != nil || protojson.Unmarshal(js, msg) != nil {
		return errs
	}
	if k.Validate == nil {
		return errs
	}
	// A field left out is not checked again: resolution "MAGIC" left out
	// reads as the default NONE, which is no problem of what was written.
	for _, e := range yamlpath.Leaves(k.Validate(msg)) {
		if !underAny(leadingPath(e.Error()), errs) {
			errs = append(errs, e)
		}
	}
	return errs
}

// underAny: path is the path of one of the fieldErrors in errs or below it.
func underAny(path string, errs []error) bool {
	for _, e := range errs {
		fe, ok := e.(*fieldError)
		if ok && strings.HasPrefix(path, fe.path) && (len(path) == len(fe.path) || path[len(fe.path)] == '.' || path[len(fe.path)] == '[') {
			return true
		}
	}
	return false
}

// cleanProtoErr drops protojson's "proto: " prefix, its unstable
// non-breaking spaces and its "(line 1:98): " position, which is in the
// JSON the spec was converted to, not in the file.
func cleanProtoErr(err error) string {
	s := strings.ReplaceAll(err.Error(), "\u00a0", " ")
	return jsonPosition.ReplaceAllString(strings.TrimPrefix(s, "proto: "), "")
}

var jsonPosition = regexp.MustCompile(`^\(line \d+:\d+\): `)

// hashOf hashes an object's identity and deterministic wire form.
func hashOf(kind, ns, name string, m proto.Message) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil { // cannot happen for a message protojson produced
		b = []byte(err.Error())
	}
	h := sha256.New()
	h.Write([]byte(kind + "\x00" + ns + "\x00" + name + "\x00"))
	h.Write(b)
	// 16 hex digits, not a slice of 64: the hash string is held per object.
	return hex.EncodeToString(h.Sum(nil)[:8])
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
