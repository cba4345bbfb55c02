// Package yamlconf is meshfed's one YAML decoding path: clusters.yaml, the
// kind blocks in it, services files and the tests' block loader all go
// through Decode. It decodes a YAML node tree strictly into typed structs
// and reports every problem of a file in one pass, each with file, line,
// column and the key it is about.
//
// # Parser
//
// It reads YAML with go.yaml.in/yaml/v4. That parser follows YAML 1.2 (so
// `{urls: [http://host:8761/eureka]}` holds a string, `yes` is a string,
// not a bool), accepts a byte-order mark, gives every node its line and
// column, and reports syntax errors as a *yaml.LoadError with a line and
// column — go.yaml.in/yaml/v3 formats only "line N" into its message text,
// and github.com/goccy/go-yaml (used before) misreads plain scalars with
// ':' inside flow collections. Only the parser's node tree is used:
// decoding into Go values is done here, so that the positions of problems
// come from the nodes, never from error text.
//
// # Types
//
// A struct field is decoded from the key named by its `yaml` tag ("-"
// skips it). A field tagged `yamlconf:"required"` must be present; a
// number field tagged `yamlconf:"positive"` must, when given, be at least
// 1 (integers) or above 0, so that 0 cannot pass for "unset". Unknown
// keys are problems with a "did you mean" hint. Supported field types:
// string, bool, integers, floats, time.Duration and registries.Duration
// (positive, "20ms"), encoding.TextUnmarshaler, pointers, slices,
// map[string]T and structs. A type may take over its own decoding by
// implementing Unmarshaler.
//
// After a struct is decoded, Decode calls its methods ApplyDefaults (if
// the type has one), ResolvePaths(dir) (registries.PathResolver) and
// Validate (if it has one), in that order, deepest first. Validate
// reports problems about its keys as *registries.FieldError (any number,
// joined with errors.Join): Decode points each at the key's node, or at
// the nearest enclosing node present when the key is absent. A FieldError
// whose key (or Also key) already has a problem is dropped: a bad value
// was left at its default and would only cause a misleading second error.
package yamlconf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v4"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/yamlconf/yamlpath"
)

// Problem is one thing wrong with a YAML file.
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

// Error lists every problem found in a file, in file order.
type Error struct {
	Problems []Problem
}

// Error joins the problems one per line.
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Unmarshaler is implemented by types that decode themselves from a node,
// such as a registry entry whose kind block depends on its kind. n is
// never an alias and never null (a null value of such a type is the
// problem "missing value"); path is the key path of n.
type Unmarshaler interface {
	UnmarshalYAMLNode(d *Decoder, path string, n *yaml.Node)
}

// Parse reads data as one YAML document (a leading byte-order mark is
// accepted) and returns its root node, nil when the file holds no document
// or only null. Syntax errors and a second document are problems.
func Parse(file string, data []byte) (*yaml.Node, []Problem) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, []Problem{syntaxProblem(file, data, err)}
		}
		if len(docs) == 1 {
			at := &n
			if len(n.Content) > 0 {
				at = n.Content[0]
			}
			return nil, []Problem{{File: file, Line: at.Line, Column: at.Column, Msg: "the file holds more than one YAML document; want one"}}
		}
		docs = append(docs, &n)
	}
	if len(docs) == 0 {
		return nil, nil
	}
	root := docs[0]
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, nil
		}
		root = root.Content[0]
	}
	if yamlpath.IsNull(root) {
		return nil, nil
	}
	return root, nil
}

func syntaxProblem(file string, data []byte, err error) Problem {
	var le *yaml.LoadError
	if errors.As(err, &le) {
		msg := le.Message
		if le.ContextMsg != "" {
			msg = le.ContextMsg + ": " + msg
		}
		line, col := le.Mark.Line, le.Mark.Column
		if line < 1 {
			// Reader errors (bad encoding) may carry no line: point at the
			// first byte that is not UTF-8, else at the start.
			line, col = positionOf(data, firstInvalidUTF8(data))
		}
		return Problem{File: file, Line: line, Column: max(col, 1), Msg: "YAML syntax error: " + msg}
	}
	return Problem{File: file, Line: 1, Column: 1, Msg: "YAML syntax error: " + err.Error()}
}

// firstInvalidUTF8 returns the offset of the first byte of data that is
// not valid UTF-8, 0 if all is.
func firstInvalidUTF8(data []byte) int {
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return 0
}

// positionOf returns the 1-based line and column (in characters) of byte
// offset off in data.
func positionOf(data []byte, off int) (line, col int) {
	off = min(off, len(data))
	before := data[:off]
	line = 1 + bytes.Count(before, []byte("\n"))
	if i := bytes.LastIndexByte(before, '\n'); i >= 0 {
		before = before[i+1:]
	}
	return line, 1 + utf8.RuneCount(before)
}

// Decoder decodes the nodes of one file and collects its problems.
type Decoder struct {
	file string
	dir  string
	// budget bounds how many nodes one file may decode to, aliases
	// expanded, so that nested aliases cannot make decoding exponential.
	budget   int
	values   int // decoded so far
	over     bool
	problems []Problem
	// bad holds the keys with a problem and every ancestor of them.
	bad     map[string]bool
	badLeaf map[string]bool
}

// NewDecoder returns a Decoder for file; dir is what relative paths are
// resolved against (registries.PathResolver), size the file's length.
func NewDecoder(file, dir string, size int) *Decoder {
	return &Decoder{file: file, dir: dir, budget: MaxValues(size), bad: map[string]bool{}, badLeaf: map[string]bool{}}
}

// MaxValues is how many values a Decoder for a file of size bytes
// decodes, aliases expanded, before it reports that the file expands to
// too many.
func MaxValues(size int) int { return 1000 + 20*size }

// Values returns how many values the Decoder has decoded so far, aliases
// expanded (what MaxValues bounds).
func (d *Decoder) Values() int { return d.values }

// File returns the name of the file being decoded.
func (d *Decoder) File() string { return d.file }

// Dir returns the directory relative paths are resolved against.
func (d *Decoder) Dir() string { return d.dir }

// Problems returns the problems found so far, in file order.
func (d *Decoder) Problems() []Problem {
	out := slices.Clone(d.problems)
	slices.SortStableFunc(out, func(a, b Problem) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Column - b.Column
	})
	return out
}

// Err returns an *Error with the problems found so far, nil if none.
func (d *Decoder) Err() error {
	if len(d.problems) == 0 {
		return nil
	}
	return &Error{Problems: d.Problems()}
}

// Addf records a problem about key at the position of node n (nil: no
// position).
func (d *Decoder) Addf(n *yaml.Node, key, format string, args ...any) {
	p := Problem{File: d.file, Key: key, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		p.Line, p.Column = n.Line, n.Column
	}
	d.problems = append(d.problems, p)
	d.badLeaf[key] = true
	for k := key; ; k = yamlpath.Parent(k) {
		d.bad[k] = true
		if k == "" {
			break
		}
	}
}

// HasProblem reports whether key, a key above it or a key below it has a
// problem.
func (d *Decoder) HasProblem(key string) bool {
	if d.bad[key] {
		return true
	}
	for k := yamlpath.Parent(key); ; k = yamlpath.Parent(k) {
		if d.badLeaf[k] {
			return true
		}
		if k == "" {
			return false
		}
	}
}

// Decode decodes the file's root node n (nil for an empty file) into v, a
// pointer.
func Decode(file, dir string, data []byte, v any) error {
	root, probs := Parse(file, data)
	if len(probs) > 0 {
		return &Error{Problems: probs}
	}
	d := NewDecoder(file, dir, len(data))
	d.Decode("", root, root, v)
	return d.Err()
}

// Decode decodes n, the node at path, into v (a pointer). owner is where
// to point when n is null or absent (nil: no position). Null leaves v's
// zero value, then defaults apply.
func (d *Decoder) Decode(path string, owner, n *yaml.Node, v any) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		panic(fmt.Sprintf("yamlconf: Decode into %T, want a non-nil pointer", v))
	}
	d.value(path, owner, n, rv.Elem())
}

// Report records err, returned by a Validate of the value decoded from n
// at path, as problems: each *registries.FieldError at its key below n,
// any other error at n (or owner when n is nil).
func (d *Decoder) Report(path string, owner, n *yaml.Node, err error) {
	for _, e := range yamlpath.Leaves(err) {
		var fe *registries.FieldError
		if !errors.As(e, &fe) {
			if d.HasProblem(path) {
				continue
			}
			at := owner
			if at == nil {
				at = n
			}
			d.Addf(at, path, "%v", e)
			continue
		}
		key, also := yamlpath.JoinPath(path, fe.Key), ""
		if fe.Also != "" {
			also = yamlpath.JoinPath(path, fe.Also)
		}
		if d.HasProblem(key) || (also != "" && d.HasProblem(also)) {
			continue
		}
		at, found := yamlpath.Lookup(n, fe.Key)
		if !found && fe.Also != "" {
			// The key is absent (a default): point at the other key.
			if at2, ok := yamlpath.Lookup(n, fe.Also); ok {
				key, also, at, found = also, "", at2, true
			}
		}
		if at == nil {
			at = owner
			if at == nil {
				at = n
			}
		}
		msg := fe.Err.Error()
		if also != "" {
			if an, ok := yamlpath.Lookup(n, fe.Also); ok {
				msg += fmt.Sprintf(" (also %s, line %d)", also, an.Line)
			}
		}
		d.Addf(at, key, "%s", msg)
	}
}
