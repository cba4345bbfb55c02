package serviceentry

import (
	"bytes"
	"hash/maphash"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"go.yaml.in/yaml/v4"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/yamlconf/yamlpath"
)

// An edit costs what the changed objects cost (docs/architecture.md §3.1.1).
// A Run keeps, per file, the decode of every document by the hash of its
// bytes: a read cuts the file at its document markers (--- at the
// beginning of a line, which YAML forbids inside any scalar) and decodes
// and checks only the documents whose bytes changed; a document whose
// bytes are unchanged but that moved to other lines keeps its decode
// with its lines moved. The whole file is decoded at once (Parse) when
// it has a directive (%) or a document end marker (...), when a document
// does not decode alone (a YAML syntax error, which rejects the file as
// before), and for documents with an invalid object (decoded again at
// their place, so that every message is as the full decode gives it).
// Then (keyed.publish) each ServiceEntry is converted again only when
// it, the outcome of its hosts or the WorkloadEntries of its namespace
// changed, and published under its own key.

// docRange is one document of a file: data[start:end], from line.
type docRange struct {
	start, end int
	line       int
}

// splitDocs cuts data at its "---" lines; ok false when it has a
// directive or a document end marker.
func splitDocs(data []byte) (ranges []docRange, ok bool) {
	start, line := 0, 1
	for off, no := 0, 1; off < len(data); no++ {
		rest := data[off:]
		eol := bytes.IndexByte(rest, '\n')
		next := off + eol + 1
		if eol < 0 {
			next = len(data)
		}
		switch {
		case len(rest) > 0 && rest[0] == '%':
			return nil, false
		case marker(rest, "..."):
			return nil, false
		case marker(rest, "---") && off > start:
			ranges = append(ranges, docRange{start: start, end: off, line: line})
			start, line = off, no
		}
		off = next
	}
	if start < len(data) {
		ranges = append(ranges, docRange{start: start, end: len(data), line: line})
	}
	return ranges, true
}

// marker: b begins with the document marker m, followed by a space, a
// line break or the end.
func marker(b []byte, m string) bool {
	return bytes.HasPrefix(b, []byte(m)) && (len(b) == 3 || b[3] == ' ' || b[3] == '\n' || b[3] == '\r' || b[3] == '\t')
}

// docRec is the decode of one document range, by the hash of its bytes.
type docRec struct {
	size int
	line int // the range's first line
	objs []Object
}

// docCache is one file's decoded documents.
type docCache struct {
	recs   map[uint64]*docRec
	labels labelSets
}

// labelSets interns the label maps of a file's WorkloadEntries: endpoints
// mostly carry the same few label sets ({version: v1}), and a small Go
// map is ~300 bytes, a fifth of what a registry held per endpoint. The
// maps are read-only once decoded (the converted endpoints share them).
type labelSets map[string]map[string]string

// maxLabelSets bounds a file's table; past it, the table starts over.
const maxLabelSets = 4096

// intern returns the table's map equal to m, adding m if there is none.
func (t *labelSets) intern(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	keys := slices.Sorted(maps.Keys(m))
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	key := b.String()
	if got, ok := (*t)[key]; ok {
		return got
	}
	if *t == nil || len(*t) >= maxLabelSets {
		*t = labelSets{}
	}
	(*t)[key] = m
	return m
}

// internLabels makes the label maps of the valid objects in objs the
// table's.
func (t *labelSets) internLabels(objs []Object) {
	for _, o := range objs {
		switch spec := o.Spec.(type) {
		case *networking.ServiceEntry:
			for _, we := range spec.GetEndpoints() {
				we.Labels = t.intern(we.Labels)
			}
		case *networking.WorkloadEntry:
			spec.Labels = t.intern(spec.Labels)
		}
	}
}

// work counts what a Run's reads did, for tests and diagnostics.
type work struct {
	decoded   atomic.Uint64 // objects decoded from YAML and checked
	converted atomic.Uint64 // ServiceEntries converted
	compared  atomic.Uint64 // Publisher keys compared (one per ServiceEntry that may have changed)
	whole     atomic.Uint64 // file reads decoded whole
}

var docSeed = maphash.MakeSeed()

// parseDocs is Parse for a Run: only the documents of data whose bytes
// are not in cache are decoded; cache is left holding data's documents.
func parseDocs(path string, data []byte, cache *docCache, w *work) ([]Object, error) {
	ranges, ok := splitDocs(data)
	if !ok {
		return parseWhole(path, data, cache, w)
	}
	next := make(map[uint64]*docRec, len(ranges))
	var out []Object
	for _, rg := range ranges {
		b := data[rg.start:rg.end]
		h := maphash.Bytes(docSeed, b)
		rec := cache.recs[h]
		switch {
		case rec == nil || rec.size != len(b) || next[h] != nil:
			objs, err := decodeAt(path, b, rg.line)
			if err != nil {
				return parseWhole(path, data, cache, w)
			}
			cache.labels.internLabels(objs)
			w.decoded.Add(uint64(len(objs)))
			rec = &docRec{size: len(b), line: rg.line, objs: objs}
		case rec.line != rg.line:
			rec = moved(path, rec, rg.line, b, w)
		}
		if next[h] == nil {
			next[h] = rec
		}
		out = append(out, rec.objs...)
	}
	cache.recs = next
	return out, nil
}

// parseWhole decodes the whole file (Parse); the cache is emptied.
func parseWhole(path string, data []byte, cache *docCache, w *work) ([]Object, error) {
	w.whole.Add(1)
	cache.recs = nil
	objs, err := Parse(path, data)
	w.decoded.Add(uint64(len(objs)))
	return objs, err
}

// decodeAt is Parse of one document range b that begins at line of path.
func decodeAt(path string, b []byte, line int) ([]Object, error) {
	docs, err := Parse(path, b)
	if err != nil {
		return nil, err
	}
	for i := range docs {
		if docs[i].Err != nil {
			// A message may carry a line: decode at the document's place.
			return Parse(path, append(bytes.Repeat([]byte{'\n'}, line-1), b...))
		}
	}
	for i := range docs {
		shift(docs[i].Node, line-1)
		docs[i].Source = path + ":" + strconv.Itoa(docs[i].Node.Line)
		docs[i].Node = slim(docs[i].Node)
	}
	return docs, nil
}

// slim returns what position() reads of a valid object's tree n: its
// line, and the lines of spec.hosts[i] and spec.endpoints[i] as
// yamlpath.Lookup finds them. The decoded tree, ten nodes or more per
// endpoint, was two thirds of the memory a registry of 100,000 endpoints
// held; the Run keeps the slim one. A tree of another shape is kept
// whole.
func slim(n *yaml.Node) *yaml.Node {
	root := yamlpath.Resolve(n)
	if root == nil || root.Kind != yaml.MappingNode {
		return n
	}
	out := &yaml.Node{Kind: yaml.MappingNode, Line: n.Line, Column: n.Column}
	specVal, specKey := mappingGet(root, "spec")
	spec := yamlpath.Resolve(specVal)
	if spec == nil {
		return out
	}
	if spec.Kind != yaml.MappingNode {
		return n
	}
	slimSpec := &yaml.Node{Kind: yaml.MappingNode, Line: spec.Line, Column: spec.Column}
	out.Content = []*yaml.Node{{Kind: yaml.ScalarNode, Value: "spec", Line: specKey.Line, Column: specKey.Column}, slimSpec}
	for _, name := range []string{"hosts", "endpoints"} {
		val, key := mappingGet(spec, name)
		if key == nil {
			continue
		}
		seq := yamlpath.Resolve(val)
		if seq == nil || seq.Kind != yaml.SequenceNode {
			return n
		}
		items := make([]*yaml.Node, len(seq.Content))
		for i, it := range seq.Content {
			// Lookup points at a scalar item's value (through an
			// alias), at any other item itself.
			line, col := it.Line, it.Column
			if v := yamlpath.Resolve(it); v != nil && v.Kind == yaml.ScalarNode {
				line, col = v.Line, v.Column
			}
			items[i] = &yaml.Node{Kind: yaml.MappingNode, Line: line, Column: col}
		}
		slimSpec.Content = append(slimSpec.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name, Line: key.Line, Column: key.Column},
			&yaml.Node{Kind: yaml.SequenceNode, Line: seq.Line, Column: seq.Column, Content: items})
	}
	return out
}

// mappingGet returns the value and key nodes of name in mapping m.
func mappingGet(m *yaml.Node, name string) (val, key *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == name {
			return m.Content[i+1], m.Content[i]
		}
	}
	return nil, nil
}

// moved returns rec for a document that moved to line: its objects with
// their lines moved, or decoded again if one of them is invalid.
func moved(path string, rec *docRec, line int, b []byte, w *work) *docRec {
	for _, o := range rec.objs {
		if o.Err != nil || o.Node == nil {
			objs, err := decodeAt(path, b, line)
			if err != nil {
				return rec // cannot happen: the same bytes decoded before
			}
			w.decoded.Add(uint64(len(objs)))
			return &docRec{size: rec.size, line: line, objs: objs}
		}
	}
	out := &docRec{size: rec.size, line: line, objs: make([]Object, len(rec.objs))}
	for i, o := range rec.objs {
		o.Node = shifted(o.Node, line-rec.line, map[*yaml.Node]*yaml.Node{})
		o.Source = path + ":" + strconv.Itoa(o.Node.Line)
		out.objs[i] = o
	}
	return out
}

// shift moves the lines of the tree n by d, in place.
func shift(n *yaml.Node, d int) {
	if n == nil || d == 0 {
		return
	}
	n.Line += d
	for _, c := range n.Content {
		shift(c, d)
	}
}

// shifted returns a copy of the tree n with its lines moved by d (aliases
// point into the copy).
func shifted(n *yaml.Node, d int, seen map[*yaml.Node]*yaml.Node) *yaml.Node {
	if n == nil {
		return nil
	}
	if c, ok := seen[n]; ok {
		return c
	}
	c := *n
	seen[n] = &c
	c.Line += d
	if len(n.Content) > 0 {
		c.Content = make([]*yaml.Node, len(n.Content))
		for i, k := range n.Content {
			c.Content[i] = shifted(k, d, seen)
		}
	}
	c.Alias = shifted(n.Alias, d, seen)
	return &c
}
