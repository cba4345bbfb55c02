package file

import (
	"bytes"
	"strings"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// The fast path: services files as generators and people usually write
// them — block mappings and lists, plain scalars, one-line flow mappings
// of plain scalars, comments — are read line by line straight into the
// typed entries, without building a YAML node tree (go.yaml.in/yaml/v4's
// scanner and composer were two thirds of a 10,000-endpoint parse: ~130
// ms on one core against ~30 ms this way; BenchmarkParse10k). It
// accepts a strict subset of YAML and gives up (ok false) on anything
// else: quotes, anchors, aliases, tags, block scalars, multi-line
// scalars, tabs, non-ASCII bytes, a second document, a scalar that YAML
// would not read as the plain string or decimal integer the field wants,
// an unknown or repeated key. Parse then takes the positioned node path,
// as it does whenever the fast path's result has a problem, so every
// error still carries its file:line:col. FuzzParseFastPath checks that
// whatever the fast path accepts, the node path reads the same.

// fnode is a value of the subset: a scalar, a mapping or a list.
type fnode struct {
	line   int32 // 1-based line of the value (of its first key for a mapping)
	kind   byte  // 's' scalar, 'm' mapping, 'l' list, 'n' null
	scalar string
	keys   []string // of a mapping
	vals   []*fnode // of a mapping: the values of keys; of a list: the items
}

type fline struct {
	no     int // 1-based
	indent int
	text   string // without indentation and comment, right-trimmed
}

// fastParser reads the lines of a file in the subset; bad: it is not.
type fastParser struct {
	lines []fline
	pos   int
	bad   bool
}

func fastLines(data []byte) ([]fline, bool) {
	out := make([]fline, 0, bytes.Count(data, []byte("\n"))+1)
	// One copy of the file: lines and scalars are substrings of it.
	all := string(data)
	off := 0
	no := 0
	for len(data) > 0 {
		no++
		i := bytes.IndexByte(data, '\n')
		var raw []byte
		start := off
		if i < 0 {
			raw, data = data, nil
			off += len(raw)
		} else {
			raw, data = data[:i], data[i+1:]
			off += i + 1
		}
		indent := 0
		for indent < len(raw) && raw[indent] == ' ' {
			indent++
		}
		text := raw[indent:]
		// Comments: '#' at the start or after a space (quotes are refused).
		for j, c := range text {
			if c < 0x20 || c >= 0x7f || c == '"' || c == '\'' || c == '\\' {
				return nil, false
			}
			if c == '#' && (j == 0 || text[j-1] == ' ') {
				text = text[:j]
				break
			}
		}
		text = bytes.TrimRight(text, " ")
		if len(text) == 0 {
			continue
		}
		if indent == 0 && (bytes.HasPrefix(text, []byte("---")) || bytes.HasPrefix(text, []byte("...")) || text[0] == '%') {
			return nil, false
		}
		out = append(out, fline{no: no, indent: indent, text: all[start+indent : start+indent+len(text)]})
	}
	return out, true
}

// block reads the value that starts at the current line, indented at
// least min.
func (p *fastParser) block(min int) *fnode {
	if p.pos >= len(p.lines) || p.lines[p.pos].indent < min {
		return &fnode{kind: 'n'}
	}
	l := p.lines[p.pos]
	if l.text == "-" || strings.HasPrefix(l.text, "- ") {
		return p.list(l.indent)
	}
	return p.mapping(l.indent, l.no, "", 0)
}

// list reads the items of a block list at indent.
func (p *fastParser) list(indent int) *fnode {
	n := &fnode{kind: 'l', line: int32(p.lines[p.pos].no)}
	for !p.bad && p.pos < len(p.lines) && p.lines[p.pos].indent == indent {
		item := p.item(indent)
		if item == nil {
			break
		}
		n.vals = append(n.vals, item)
	}
	return n
}

// item reads the list item at the current line (at indent); nil if that
// line is not one.
func (p *fastParser) item(indent int) *fnode {
	l := p.lines[p.pos]
	if l.text != "-" && !strings.HasPrefix(l.text, "- ") {
		return nil
	}
	rest := strings.TrimLeft(strings.TrimPrefix(l.text, "-"), " ")
	col := indent + (len(l.text) - len(rest))
	switch {
	case rest == "":
		p.pos++
		return p.block(indent + 1)
	case rest == "-" || strings.HasPrefix(rest, "- "):
		p.bad = true // a list in a list on one line
		return &fnode{kind: 'n'}
	case isKeyLine(rest):
		return p.mapping(col, l.no, rest, 1)
	default:
		p.pos++
		return p.flowOrScalar(rest, l.no)
	}
}

// isKeyLine: text starts with "key:" followed by the end or a space.
func isKeyLine(text string) bool {
	i := strings.Index(text, ":")
	return i > 0 && (i == len(text)-1 || text[i+1] == ' ') && !strings.ContainsAny(text[:i], "{}[],")
}

// mapping reads a block mapping whose keys are at indent; first, when not
// "", is its first line's text (after a list's "- "), which is line no.
func (p *fastParser) mapping(indent, no int, first string, _ int) *fnode {
	n := &fnode{kind: 'm', line: int32(no), keys: make([]string, 0, 4), vals: make([]*fnode, 0, 4)}
	for !p.bad {
		var text string
		var lineNo int
		if first != "" {
			text, lineNo, first = first, no, ""
		} else {
			if p.pos >= len(p.lines) || p.lines[p.pos].indent != indent {
				break
			}
			text, lineNo = p.lines[p.pos].text, p.lines[p.pos].no
		}
		if !isKeyLine(text) {
			p.bad = true
			break
		}
		i := strings.Index(text, ":")
		key, rest := text[:i], strings.TrimLeft(text[i+1:], " ")
		if !plainOK(key, false) {
			p.bad = true
			break
		}
		for _, k := range n.keys {
			if k == key {
				p.bad = true // the node path reports it
			}
		}
		p.pos++
		var v *fnode
		if rest == "" {
			// A nested block, or a list at the same indent as the key.
			if p.pos < len(p.lines) && p.lines[p.pos].indent == indent && (p.lines[p.pos].text == "-" || strings.HasPrefix(p.lines[p.pos].text, "- ")) {
				v = p.list(indent)
			} else {
				v = p.block(indent + 1)
			}
		} else {
			v = p.flowOrScalar(rest, lineNo)
		}
		n.keys = append(n.keys, key)
		n.vals = append(n.vals, v)
	}
	return n
}

// flowOrScalar reads a one-line value: {k: v, ...}, {}, [] or a plain
// scalar.
func (p *fastParser) flowOrScalar(text string, no int) *fnode {
	switch {
	case text == "[]":
		return &fnode{kind: 'l', line: int32(no)}
	case strings.HasPrefix(text, "{") && strings.HasSuffix(text, "}"):
		n := &fnode{kind: 'm', line: int32(no)}
		body := strings.TrimSpace(text[1 : len(text)-1])
		if body == "" {
			return n
		}
		for part := range strings.SplitSeq(body, ",") {
			part = strings.TrimSpace(part)
			i := strings.Index(part, ":")
			if i <= 0 || i == len(part)-1 || part[i+1] != ' ' {
				p.bad = true
				return n
			}
			k, v := part[:i], strings.TrimSpace(part[i+1:])
			if !plainOK(k, true) || !plainOK(v, true) || slicesContains(n.keys, k) {
				p.bad = true
				return n
			}
			n.keys = append(n.keys, k)
			n.vals = append(n.vals, &fnode{kind: 's', line: int32(no), scalar: v})
		}
		return n
	}
	if !plainOK(text, false) {
		p.bad = true
	}
	return &fnode{kind: 's', line: int32(no), scalar: text}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// plainOK: s is a plain scalar of the subset: not starting with an
// indicator, no ": " or " #" inside, nothing that ends a flow value.
func plainOK(s string, flow bool) bool {
	if s == "" || strings.ContainsAny(s[:1], "-?:,[]{}#&*!|>'\"%@` ") || s[len(s)-1] == ' ' {
		return false
	}
	if strings.Contains(s, ": ") || strings.Contains(s, " #") || strings.HasSuffix(s, ":") {
		return false
	}
	if flow && strings.ContainsAny(s, ",[]{}") {
		return false
	}
	return !strings.ContainsAny(s, "{}[]") || !flow
}

// str is a scalar for a string field. The node path keeps the text of
// any scalar for a string field, whatever YAML would resolve it to, except
// null (the zero value): null is left to the node path.
func (n *fnode) str(ok *bool) string {
	if n.kind != 's' {
		*ok = false
		return ""
	}
	switch n.scalar {
	case "~", "null", "Null", "NULL":
		*ok = false
	}
	return n.scalar
}

// num is a scalar for an integer field: a plain decimal without leading
// zeros, at most 9 digits.
func (n *fnode) num(ok *bool) int64 {
	s := n.scalar
	if n.kind != 's' || s == "" || len(s) > 9 || s[0] == '0' && len(s) > 1 {
		*ok = false
		return 0
	}
	var v int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			*ok = false
			return 0
		}
		v = v*10 + int64(s[i]-'0')
	}
	return v
}

// fastParse is Parse on the fast path; ok false when data is outside the
// subset or has a problem. Each service is decoded and converted as soon
// as its lines are read, so that only the converted services stay.
func fastParse(name string, data []byte, c registries.Common) (services []model.Service, ok bool) {
	lines, ok := fastLines(data)
	if !ok || len(lines) < 2 || lines[0].indent != 0 || lines[0].text != "services:" {
		return nil, false
	}
	fp := &fastParser{lines: lines, pos: 1}
	indent := lines[1].indent
	if lines[1].text != "-" && !strings.HasPrefix(lines[1].text, "- ") {
		return nil, false
	}
	p := &parse{file: name, fast: true}
	services = []model.Service{}
	for i := 0; !fp.bad && fp.pos < len(lines) && fp.lines[fp.pos].indent == indent; i++ {
		item := fp.item(indent)
		if item == nil || fp.bad {
			return nil, false
		}
		se, epLines, ok := decodeService(item)
		if !ok {
			return nil, false
		}
		services = append(services, p.service(i, se, epLines, c))
		if p.failed {
			return nil, false
		}
	}
	if fp.bad || fp.pos != len(lines) {
		return nil, false
	}
	return services, true
}

// fastDecode reads data into the typed entries, with each endpoint's
// line; ok false when data is outside the subset. (Tests compare it with
// the node path.)
func fastDecode(data []byte) (entries []serviceEntry, epLines [][]int, ok bool) {
	lines, ok := fastLines(data)
	if !ok || len(lines) == 0 || lines[0].indent != 0 {
		return nil, nil, false
	}
	p := &fastParser{lines: lines}
	root := p.block(0)
	if p.bad || p.pos != len(lines) || root.kind != 'm' || len(root.keys) != 1 || root.keys[0] != "services" {
		return nil, nil, false
	}
	list := root.vals[0]
	if list.kind != 'l' {
		return nil, nil, false
	}
	entries = make([]serviceEntry, len(list.vals))
	epLines = make([][]int, len(list.vals))
	for i, item := range list.vals {
		if entries[i], epLines[i], ok = decodeService(item); !ok {
			return nil, nil, false
		}
	}
	return entries, epLines, true
}

// decodeService reads one item of the services list.
func decodeService(item *fnode) (se serviceEntry, epLines []int, ok bool) {
	ok = true
	if item.kind != 'm' {
		return se, nil, false
	}
	for k, key := range item.keys {
		v := item.vals[k]
		switch key {
		case "name":
			se.Name = v.str(&ok)
		case "resolution":
			se.Resolution = v.str(&ok)
		case "ports":
			if v.kind != 'l' {
				return se, nil, false
			}
			se.Ports = make([]portEntry, len(v.vals))
			for j, pn := range v.vals {
				if pn.kind != 'm' {
					return se, nil, false
				}
				for pk, pkey := range pn.keys {
					pv := pn.vals[pk]
					switch pkey {
					case "name":
						se.Ports[j].Name = pv.str(&ok)
					case "protocol":
						se.Ports[j].Protocol = pv.str(&ok)
					case "port":
						n := pv.num(&ok)
						se.Ports[j].Port = &n
					default:
						return se, nil, false
					}
				}
			}
		case "endpoints":
			if v.kind == 'n' {
				continue
			}
			if v.kind != 'l' {
				return se, nil, false
			}
			se.Endpoints = make([]endpointEntry, len(v.vals))
			epLines = make([]int, len(v.vals))
			for j, en := range v.vals {
				if en.kind != 'm' {
					return se, nil, false
				}
				ee := &se.Endpoints[j]
				epLines[j] = int(en.line)
				for ek, ekey := range en.keys {
					ev := en.vals[ek]
					switch ekey {
					case "address":
						ee.Address = ev.str(&ok)
					case "locality":
						ee.Locality = ev.str(&ok)
					case "health":
						ee.Health = ev.str(&ok)
					case "weight":
						n := ev.num(&ok)
						ee.Weight = &n
					case "ports":
						if ev.kind != 'm' {
							return se, nil, false
						}
						ee.Ports = make(map[string]int64, len(ev.keys))
						for x, k := range ev.keys {
							ee.Ports[k] = ev.vals[x].num(&ok)
						}
					case "labels":
						if ev.kind != 'm' {
							return se, nil, false
						}
						ee.Labels = make(map[string]string, len(ev.keys))
						for x, k := range ev.keys {
							ee.Labels[k] = ev.vals[x].str(&ok)
						}
					default:
						return se, nil, false
					}
				}
			}
		default:
			return se, nil, false
		}
		if !ok {
			return se, nil, false
		}
	}
	return se, epLines, true
}
