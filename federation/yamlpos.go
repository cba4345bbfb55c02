package federation

// This file holds the clusters.yaml loader's YAML mechanics, apart from the
// schema in config.go: decoding mappings and scalars strictly, following
// anchors and aliases, and finding the line and column of a key path, a
// token or a quoted value so that every problem points at its place.

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// addf records a problem about key at the position of node n.
func (l *loader) addf(n ast.Node, key, format string, args ...any) {
	line, col := position(n)
	l.problems = append(l.problems, Problem{File: l.file, Line: line, Column: col, Key: key, Msg: fmt.Sprintf(format, args...)})
}

// addAtKey records a problem about key at the node recorded for key, or
// for its nearest recorded parent.
func (l *loader) addAtKey(key, format string, args ...any) {
	for p := key; p != ""; p = parentPath(p) {
		if n, ok := l.nodes[p]; ok {
			l.addf(n, key, format, args...)
			return
		}
	}
	l.addf(nil, key, format, args...)
}

func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// lineOf returns the line recorded for key, 0 if none.
func (l *loader) lineOf(key string) int {
	line, _ := position(l.nodes[key])
	return line
}

// position returns where n starts; 0, 0 for nil.
func position(n ast.Node) (line, col int) {
	if n == nil {
		return 0, 0
	}
	var tk *token.Token
	switch n := n.(type) {
	case *ast.MappingNode:
		if len(n.Values) > 0 {
			tk = n.Values[0].Key.GetToken()
		} else {
			tk = n.Start
		}
	case *ast.MappingValueNode:
		tk = n.Key.GetToken()
	default:
		tk = n.GetToken()
	}
	if tk == nil || tk.Position == nil {
		return 0, 0
	}
	return tk.Position.Line, tk.Position.Column
}

// yamlErr records a decoding or syntax error from go-yaml.
func (l *loader) yamlErr(key string, err error) {
	var ye yaml.Error
	if errors.As(err, &ye) {
		msg := ye.GetMessage()
		if tk := ye.GetToken(); tk != nil && tk.Position != nil {
			l.problems = append(l.problems, Problem{File: l.file, Line: tk.Position.Line, Column: tk.Position.Column, Key: key, Msg: msg})
			return
		}
		err = errors.New(msg)
	}
	l.addAtKey(key, "%v", err)
}

// field is a known key of a mapping; set decodes its value v at path p.
type field struct {
	key      string
	required bool
	set      func(p string, v ast.Node)
}

// resolve follows anchors, aliases and tags to the node that holds the
// value. It returns nil for null.
func (l *loader) resolve(n ast.Node) ast.Node {
	for range 16 {
		switch t := n.(type) {
		case nil, *ast.NullNode:
			return nil
		case *ast.AnchorNode:
			n = t.Value
		case *ast.TagNode:
			n = t.Value
		case *ast.AliasNode:
			target, ok := l.anchors[t.Value.String()]
			if !ok {
				return n
			}
			n = target
		default:
			return n
		}
	}
	return n
}

// mappingValues returns the entries of a mapping node.
func mappingValues(n ast.Node) ([]*ast.MappingValueNode, bool) {
	switch t := n.(type) {
	case *ast.MappingNode:
		return t.Values, true
	case *ast.MappingValueNode:
		return []*ast.MappingValueNode{t}, true
	}
	return nil, false
}

// mapping decodes the mapping v at path (null counts as empty) with the
// given fields: unknown keys, non-mappings and missing required keys are
// problems. owner is where to point when v is null.
func (l *loader) mapping(path string, owner, v ast.Node, fields []field) {
	v = l.resolve(v)
	var entries []*ast.MappingValueNode
	if v != nil {
		var ok bool
		if entries, ok = mappingValues(v); !ok {
			l.addf(v, path, "want a mapping, got %s", describe(v))
			return
		}
		owner = v
	}
	seen := map[string]bool{}
	for _, mv := range entries {
		key := keyString(mv.Key)
		p := joinPath(path, key)
		if mv.Key.IsMergeKey() {
			l.addf(mv.Key, path, "merge keys (<<) are not supported")
			continue
		}
		i := slices.IndexFunc(fields, func(f field) bool { return f.key == key })
		if i < 0 {
			l.addf(mv.Key, p, "unknown key%s", suggest(key, fields))
			continue
		}
		seen[key] = true
		// Point at a scalar value itself, at the key of anything else.
		if val, ok := l.resolve(mv.Value).(ast.ScalarNode); ok {
			l.nodes[p] = val
		} else {
			l.nodes[p] = mv
		}
		fields[i].set(p, mv.Value)
	}
	for _, f := range fields {
		if f.required && !seen[f.key] {
			l.addf(owner, joinPath(path, f.key), "missing required key")
		}
	}
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func keyString(k ast.MapKeyNode) string {
	if s, ok := k.(*ast.StringNode); ok {
		return s.Value
	}
	if tk := k.GetToken(); tk != nil {
		return tk.Value
	}
	return k.String()
}

// suggest returns ` (did you mean "x"?)` for a known key close to key.
func suggest(key string, fields []field) string {
	best, bestD := "", 3
	for _, f := range fields {
		d := editDistance(strings.ToLower(key), strings.ToLower(f.key))
		if d < bestD {
			best, bestD = f.key, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func describe(n ast.Node) string {
	switch n.(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case nil, *ast.NullNode:
		return "nothing"
	}
	return fmt.Sprintf("%q", n.String())
}

// scalar returns the text of the scalar at path; null and collections are
// problems.
func (l *loader) scalar(path string, v ast.Node) (string, bool) {
	n := l.resolve(v)
	switch t := n.(type) {
	case nil:
		l.addAtKey(path, "missing value")
		return "", false
	case *ast.StringNode:
		return t.Value, true
	case *ast.LiteralNode:
		return strings.TrimSpace(t.Value.Value), true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode:
		return t.GetToken().Value, true
	}
	l.addf(n, path, "want a single value, got %s", describe(n))
	return "", false
}

// blockDecodeErr maps a go-yaml decoding error inside block b to a
// problem at the right key.
func (l *loader) blockDecodeErr(b *block, err error) {
	var ye yaml.Error
	if errors.As(err, &ye) {
		tk := ye.GetToken()
		p, n := findToken(b.node, tk, b.path)
		if n == nil {
			l.yamlErr(b.path, err)
			return
		}
		msg := ye.GetMessage()
		var ue *yaml.UnknownFieldError
		var te *yaml.TypeError
		var ne *yaml.UnexpectedNodeTypeError
		switch {
		case errors.As(err, &ue):
			msg = "unknown key"
		case errors.As(err, &te):
			msg = fmt.Sprintf("wrong type: want %s, got %s", te.DstType, describe(n))
		case errors.As(err, &ne):
			want := "a " + ne.Expected.YAMLName()
			if ne.Expected == ast.SequenceType {
				want = "a list"
			}
			msg = fmt.Sprintf("wrong type: want %s, got %s", want, describe(n))
		}
		l.addf(n, p, "%s", msg)
		return
	}
	// Errors from unmarshalers (time.ParseDuration...) carry no position;
	// point at the scalar they quote, if there is one.
	for _, q := range quotedStrings(err.Error()) {
		if p, n := findScalar(b.node, q, b.path); n != nil {
			l.addf(n, p, "%v", err)
			return
		}
	}
	l.addAtKey(b.path, "%v", err)
}

// quotedStrings returns the Go-quoted strings in s, longest first.
func quotedStrings(s string) []string {
	var out []string
	for {
		i := strings.IndexByte(s, '"')
		if i < 0 {
			break
		}
		q, err := strconv.QuotedPrefix(s[i:])
		if err != nil {
			s = s[i+1:]
			continue
		}
		if u, err := strconv.Unquote(q); err == nil && u != "" {
			out = append(out, u)
		}
		s = s[i+len(q):]
	}
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// walk calls fn for every key and value below n with its path; fn returns
// false to stop.
func walk(n ast.Node, path string, fn func(path string, key, val ast.Node) bool) bool {
	if entries, ok := mappingValues(n); ok {
		for _, mv := range entries {
			p := joinPath(path, keyString(mv.Key))
			if !fn(p, mv.Key, mv.Value) || !walk(mv.Value, p, fn) {
				return false
			}
		}
		return true
	}
	if seq, ok := n.(*ast.SequenceNode); ok {
		for i, e := range seq.Values {
			p := fmt.Sprintf("%s[%d]", path, i)
			if !fn(p, nil, e) || !walk(e, p, fn) {
				return false
			}
		}
	}
	return true
}

// findToken returns the path and node below n whose key or value is tk.
func findToken(n ast.Node, tk *token.Token, path string) (string, ast.Node) {
	if tk == nil || tk.Position == nil {
		return "", nil
	}
	same := func(x ast.Node) bool {
		if x == nil {
			return false
		}
		t := x.GetToken()
		return t == tk || (t != nil && t.Position != nil && t.Position.Offset == tk.Position.Offset && t.Position.Line == tk.Position.Line)
	}
	var foundPath string
	var found ast.Node
	walk(n, path, func(p string, key, val ast.Node) bool {
		if same(key) {
			foundPath, found = p, key
			return false
		}
		if same(val) {
			foundPath, found = p, val
			return false
		}
		return true
	})
	return foundPath, found
}

// findScalar returns the path and node of the first scalar below n whose
// text is s.
func findScalar(n ast.Node, s, path string) (string, ast.Node) {
	var foundPath string
	var found ast.Node
	walk(n, path, func(p string, _, val ast.Node) bool {
		if sc, ok := val.(ast.ScalarNode); ok {
			if tk := sc.GetToken(); tk != nil && tk.Value == s {
				foundPath, found = p, val
				return false
			}
		}
		return true
	})
	return foundPath, found
}

var segmentRE = regexp.MustCompile(`[^.\[\]]+|\[\d+\]`)

// lookup finds where to point for a dotted key path ("tls.caFile",
// "servers[1]") below n: the value if it is a scalar, else its key. If the
// full path is absent it returns the deepest key found on the way (nil if
// none) and false.
func lookup(n ast.Node, key string) (ast.Node, bool) {
	var last ast.Node
	cur := n
	for _, seg := range segmentRE.FindAllString(key, -1) {
		var next, at ast.Node
		if strings.HasPrefix(seg, "[") {
			i, _ := strconv.Atoi(seg[1 : len(seg)-1])
			if seq, ok := cur.(*ast.SequenceNode); ok && i < len(seq.Values) {
				next, at = seq.Values[i], seq.Values[i]
			}
		} else if entries, ok := mappingValues(cur); ok {
			for _, mv := range entries {
				if keyString(mv.Key) == seg {
					next, at = mv.Value, mv
					break
				}
			}
		}
		if next == nil {
			return last, false
		}
		last, cur = at, next
	}
	if _, ok := cur.(ast.ScalarNode); ok && last != nil {
		if _, null := cur.(*ast.NullNode); !null {
			last = cur
		}
	}
	return last, last != nil
}
