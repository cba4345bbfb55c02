// Package yamlpath finds and names places in a YAML node tree: key paths
// ("a.b[1]"), the node a path points at, what a node is, and the nearest
// known name for a misspelt one. It is the part of yamlconf that other
// decoders (Istio traffic YAML) share; it imports only the YAML library.
package yamlpath

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v4"
)

// Resolve follows aliases to the node holding the value; it returns nil
// for null.
func Resolve(n *yaml.Node) *yaml.Node {
	for range 64 {
		if n == nil {
			return nil
		}
		switch n.Kind {
		case yaml.AliasNode:
			n = n.Alias
			continue
		case yaml.DocumentNode:
			if len(n.Content) == 0 {
				return nil
			}
			n = n.Content[0]
			continue
		}
		if IsNull(n) {
			return nil
		}
		return n
	}
	return nil
}

// IsNull reports whether n is absent or an explicit null.
func IsNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null" || n.Kind == 0
}

// Describe names what n is, for messages: "a mapping", "a list",
// "nothing" or the quoted scalar.
func Describe(n *yaml.Node) string {
	n = Resolve(n)
	switch {
	case n == nil:
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

// JoinPath is the key path of key below path: "a.b", "a[1]", `a["x.y"]`.
func JoinPath(path, key string) string {
	if path == "" {
		return key
	}
	if key == "" {
		return path
	}
	if strings.HasPrefix(key, "[") {
		return path + key
	}
	return path + "." + key
}

// Child is the path of mapping key name below path; names that are not
// plain identifiers are quoted: labels["app.kubernetes.io/name"].
func Child(path, name string) string {
	if name == "" || strings.ContainsFunc(name, func(r rune) bool {
		return !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) {
		return path + "[" + strconv.Quote(name) + "]"
	}
	return JoinPath(path, name)
}

// Index is the path of list item i below path.
func Index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// Parent is the path one level above p ("" at the top).
func Parent(p string) string {
	segs := segments(p)
	if len(segs) <= 1 {
		return ""
	}
	return strings.TrimSuffix(strings.TrimSuffix(p, segs[len(segs)-1]), ".")
}

// Lookup finds where to point for key, a path relative to n ("tls.caFile",
// "servers[1]", `labels["a.b"]`): the value node if it is a non-null
// scalar, else the key node. If the key is absent it returns the deepest
// node found on the way (nil if none) and false.
func Lookup(n *yaml.Node, key string) (*yaml.Node, bool) {
	var last *yaml.Node
	cur := Resolve(n)
	for _, seg := range segments(key) {
		var next, at *yaml.Node
		switch {
		case cur == nil:
		case strings.HasPrefix(seg, `["`):
			name, _ := strconv.Unquote(seg[1 : len(seg)-1])
			next, at = mappingGet(cur, name)
		case strings.HasPrefix(seg, "["):
			i, err := strconv.Atoi(seg[1 : len(seg)-1])
			if err == nil && cur.Kind == yaml.SequenceNode && i >= 0 && i < len(cur.Content) {
				next, at = cur.Content[i], cur.Content[i]
			}
		default:
			next, at = mappingGet(cur, seg)
		}
		if at == nil {
			return last, false
		}
		last, cur = at, Resolve(next)
	}
	if cur != nil && cur.Kind == yaml.ScalarNode {
		last = cur
	}
	return last, last != nil
}

// mappingGet returns the value and key nodes of name in mapping m.
func mappingGet(m *yaml.Node, name string) (val, key *yaml.Node) {
	if m.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == name {
			return m.Content[i+1], m.Content[i]
		}
	}
	return nil, nil
}

func segments(key string) []string {
	var out []string
	for key != "" {
		switch {
		case key[0] == '.':
			key = key[1:]
		case strings.HasPrefix(key, `["`):
			q, err := strconv.QuotedPrefix(key[1:])
			if err != nil || len(key) < len(q)+2 {
				return append(out, key)
			}
			out = append(out, key[:len(q)+2])
			key = key[len(q)+2:]
		case key[0] == '[':
			i := strings.IndexByte(key, ']')
			if i < 0 {
				return append(out, key)
			}
			out = append(out, key[:i+1])
			key = key[i+1:]
		default:
			i := strings.IndexAny(key, ".[")
			if i < 0 {
				return append(out, key)
			}
			out = append(out, key[:i])
			key = key[i:]
		}
	}
	return out
}

// Suggest returns ` (did you mean "x"?)` for a name among known close to
// key, or "".
func Suggest(key string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(strings.ToLower(key), strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		if a == b {
			return 0
		}
		return 64
	}
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

// Leaves flattens an errors.Join tree into its leaf errors, in order, so
// that each problem can be reported at its own place.
func Leaves(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, Leaves(e)...)
		}
		return out
	}
	return []error{err}
}
