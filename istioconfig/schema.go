package istioconfig

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/meshfed/meshfed/yamlconf/yamlpath"
)

// fieldError is a problem at one node of a document: an unknown field or
// a value of the wrong type, found by checkSchema.
type fieldError struct {
	path string
	node *yaml.Node
	msg  string
}

func (e *fieldError) Error() string { return e.path + ": " + e.msg }

// schemaCheck walks the YAML of a spec against its message descriptor,
// as protojson reads the JSON form: field names (JSON or proto names),
// nested messages, lists, maps and scalar types. It finds what protojson
// would refuse, with the node where it is written; what it does not know
// is left to protojson.
type schemaCheck struct {
	errs []error
	drop map[*yaml.Node]bool // nodes of the problems (keys of unknown fields, bad values), left out of the retry decode
	seen int                 // nodes visited (aliases bounded by maxNodes)
}

func (c *schemaCheck) add(path string, n *yaml.Node, format string, args ...any) {
	c.errs = append(c.errs, &fieldError{path: path, node: n, msg: fmt.Sprintf(format, args...)})
	c.drop[n] = true
}

// got describes a YAML value for a type error: the scalar as written,
// "a mapping" or "a list".
func got(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode && n.Tag != "!!str" {
		return n.Value
	}
	return yamlpath.Describe(n)
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for i := 0; i < 64 && n != nil && n.Kind == yaml.AliasNode; i++ {
		n = n.Alias
	}
	return n
}

func isNullNode(n *yaml.Node) bool {
	return n == nil || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// message checks mapping n against md. A bad value is recorded in drop
// as its node (the key node for an unknown field).
func (c *schemaCheck) message(path string, n *yaml.Node, md protoreflect.MessageDescriptor) {
	if c.seen++; c.seen > maxNodes {
		return
	}
	n = resolveAlias(n)
	if isNullNode(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		c.add(path, n, "want a mapping (%s), got %s", md.Name(), got(n))
		return
	}
	fields := md.Fields()
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			continue // nodeValue reports it
		}
		fd := fields.ByJSONName(k.Value)
		if fd == nil {
			fd = fields.ByName(protoreflect.Name(k.Value))
		}
		p := yamlpath.Child(path, k.Value)
		if fd == nil {
			known := make([]string, 0, fields.Len())
			for j := 0; j < fields.Len(); j++ {
				known = append(known, fields.Get(j).JSONName())
			}
			c.add(p, k, "unknown field %q of %s%s", k.Value, md.Name(), yamlpath.Suggest(k.Value, known))
			continue
		}
		c.field(p, v, fd)
	}
}

// field checks the value n of field fd.
func (c *schemaCheck) field(path string, n *yaml.Node, fd protoreflect.FieldDescriptor) {
	n = resolveAlias(n)
	if isNullNode(n) {
		return
	}
	switch {
	case fd.IsMap():
		if n.Kind != yaml.MappingNode {
			c.add(path, n, "want a mapping, got %s", got(n))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			c.single(yamlpath.Child(path, n.Content[i].Value), n.Content[i+1], fd.MapValue())
		}
	case fd.IsList():
		if n.Kind != yaml.SequenceNode {
			c.add(path, n, "want a list, got %s", got(n))
			return
		}
		for i, e := range n.Content {
			c.single(yamlpath.Index(path, i), e, fd)
		}
	default:
		c.single(path, n, fd)
	}
}

// single checks one value (not a list or map) of fd's type.
func (c *schemaCheck) single(path string, n *yaml.Node, fd protoreflect.FieldDescriptor) {
	n = resolveAlias(n)
	if isNullNode(n) {
		return
	}
	scalar := n.Kind == yaml.ScalarNode
	tag := n.ShortTag()
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		md := fd.Message()
		switch md.FullName() {
		case "google.protobuf.Duration":
			if !scalar || tag != "!!str" {
				c.add(path, n, "want a duration string like \"5s\", got %s", got(n))
			} else if _, err := time.ParseDuration(n.Value); err != nil {
				c.add(path, n, "want a duration like \"5s\" or \"1.5s\", got %q", n.Value)
			}
			return
		case "google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue", "google.protobuf.Any",
			"google.protobuf.Timestamp", "google.protobuf.FieldMask", "google.protobuf.Empty":
			return // left to protojson
		}
		if strings.HasPrefix(string(md.FullName()), "google.protobuf.") && strings.HasSuffix(string(md.Name()), "Value") {
			if v := md.Fields().ByName("value"); v != nil {
				c.single(path, n, v) // a wrapper is written as its value
				return
			}
		}
		c.message(path, n, md)
	case protoreflect.StringKind:
		if !scalar || tag != "!!str" {
			c.add(path, n, "want a string, got %s", got(n))
		}
	case protoreflect.BoolKind:
		if !scalar || tag != "!!bool" {
			c.add(path, n, "want true or false, got %s", got(n))
		}
	case protoreflect.EnumKind:
		ed := fd.Enum()
		if scalar && tag == "!!int" {
			return
		}
		if scalar && tag == "!!str" && ed.Values().ByName(protoreflect.Name(n.Value)) != nil {
			return
		}
		names := make([]string, 0, ed.Values().Len())
		for i := 0; i < ed.Values().Len(); i++ {
			names = append(names, string(ed.Values().Get(i).Name()))
		}
		c.add(path, n, "want one of %s, got %s%s", strings.Join(names, ", "), got(n), yamlpath.Suggest(n.Value, names))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind, protoreflect.Int64Kind,
		protoreflect.Sint64Kind, protoreflect.Sfixed64Kind, protoreflect.Uint32Kind, protoreflect.Fixed32Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if !scalar || tag == "!!bool" {
			c.add(path, n, "want an integer, got %s", got(n))
		} else if tag == "!!str" {
			if _, err := strconv.ParseInt(n.Value, 10, 64); err != nil {
				if _, err := strconv.ParseUint(n.Value, 10, 64); err != nil {
					c.add(path, n, "want an integer, got %s", got(n))
				}
			}
		}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		if !scalar || tag == "!!bool" {
			c.add(path, n, "want a number, got %s", got(n))
		}
	}
}

// checkSchema checks the spec node of a document body against the spec
// message md: nil if nothing was found, else the problems and the key
// nodes of the fields to leave out to decode the rest.
func checkSchema(body *yaml.Node, md protoreflect.MessageDescriptor) ([]error, map[*yaml.Node]bool) {
	body = resolveAlias(body)
	if body == nil || body.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(body.Content); i += 2 {
		if body.Content[i].Value == "spec" {
			c := &schemaCheck{drop: map[*yaml.Node]bool{}}
			c.message("spec", body.Content[i+1], md)
			return c.errs, c.drop
		}
	}
	return nil, nil
}

// prefixed puts prefix before the message of every error joined in err.
func prefixed(prefix string, err error) error {
	var out []error
	for _, e := range yamlpath.Leaves(err) {
		if fe, ok := e.(*fieldError); ok {
			out = append(out, &fieldError{path: prefix + fe.path, node: fe.node, msg: fe.msg})
			continue
		}
		out = append(out, errors.New(prefix+e.Error()))
	}
	return errors.Join(out...)
}

// leadingPath is the field path an error message starts with
// ("spec.http[0].retries.retryOn" of `spec.http[0].retries.retryOn "x": ...`).
func leadingPath(msg string) string {
	for i := 0; i < len(msg); i++ {
		switch msg[i] {
		case ' ', ':', '/':
			return msg[:i]
		case '[':
			if i+1 < len(msg) && msg[i+1] == '"' {
				q, err := strconv.QuotedPrefix(msg[i+1:])
				if err != nil {
					return msg[:i]
				}
				i += len(q)
			}
		}
	}
	return msg
}

// Problem is one problem of a rejected document, where it is written.
type Problem struct {
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Message string `json:"message"`
}

// problemsOf places every error joined in err in body, the document's
// YAML: a fieldError at its node, another error at the field its message
// starts with (or the nearest node found on the way to it).
func problemsOf(body *yaml.Node, err error) []Problem {
	if body == nil {
		return nil
	}
	var out []Problem
	for _, e := range yamlpath.Leaves(err) {
		n := body
		if fe, ok := e.(*fieldError); ok && fe.node != nil {
			n = fe.node
		} else if at, _ := yamlpath.Lookup(body, leadingPath(e.Error())); at != nil {
			n = at
		}
		out = append(out, Problem{Line: n.Line, Column: n.Column, Message: e.Error()})
	}
	return out
}
