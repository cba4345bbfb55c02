package file

import (
	"bytes"
	"slices"
	"sort"

	"github.com/meshfed/meshfed/registries/filewatch"
)

// The split: a services file cut into one byte range per service, so that
// an edit re-parses only the services whose bytes changed
// (docs/architecture.md §3.1.1, cost per change follows the change). It is not
// a YAML parser: it only finds where the items of the top-level
// `services` sequence begin and end, and each range is then parsed by
// itself with the real parser (items.go), which checks everything. It
// tracks what can hide an item boundary — quoted scalars (with their
// escapes), flow collections across lines and comments — and gives up (ok
// false, the whole file takes the full parse) on anything it does not
// follow: block scalars (| and >) it cannot place, directives, a second
// document, tags or anchors on the sequence itself, a tab in
// indentation, a byte-order mark other than the file's first bytes, a
// line break other than LF and CRLF (plainBytes), anything after the
// sequence.

// itemRange is one item of the services sequence: data[start:end]. line
// is the 1-based line of start; a block item starts at the beginning of
// its line (its "- " is at column indent+1), a flow item at its '{'.
type itemRange struct {
	start, end int
	line       int
	flow       bool
}

// blockSpecial and flowSpecial are the bytes the split looks at in block
// and flow context; it steps over every other byte.
var blockSpecial, flowSpecial [256]bool

func init() {
	for _, c := range []byte("\n#\"'[{|>") {
		blockSpecial[c] = true
	}
	for _, c := range []byte("\n#\"'[]{}") {
		flowSpecial[c] = true
	}
}

// seqForm is how the file holds its services sequence.
type seqForm uint8

const (
	formBlock seqForm = iota + 1 // services:\n  - ...
	formFlow                     // services: [ {...}, ... ]
	formJSON                     // {"services": [ {...}, ... ]}
)

// splitter walks data once.
type splitter struct {
	data []byte
	pos  int // current byte
	line int // 1-based line of pos
	// stop, when set, is asked at each item start but the first whether
	// the rest of the file is known (resplit): the split then ends the
	// previous item there and returns, with stopped set.
	stop    func(pos, line int) bool
	stopped bool
	// rootFlow: the services sequence is in a flow mapping at the root
	// (formJSON), not in a block mapping.
	rootFlow bool
	// start: where the file's text begins (after a byte-order mark).
	start int
}

var bom = []byte("\xef\xbb\xbf")

// blank: c separates tokens within a line (a space or a tab; YAML
// indents with spaces only, so the split counts indentation in spaces
// and gives up on a line indented with a tab).
func blank(c byte) bool { return c == ' ' || c == '\t' }

// atColumn0: a line of b after its first begins with something other
// than a space or a line break.
func atColumn0(b []byte) bool {
	return followedBy(b, '\n', func(c byte) bool { return c != ' ' && c != '\n' && c != '\r' })
}

// followedBy: some byte x of b is followed by a byte for which f holds.
func followedBy(b []byte, x byte, f func(byte) bool) bool {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], x)
		if j < 0 || i+j+1 >= len(b) {
			return false
		}
		i += j + 1
		if f(b[i]) {
			return true
		}
	}
}

// splitServices cuts a services file into its items; ok false when the
// file is not in a shape it follows (the caller then parses it whole).
func splitServices(data []byte) (items []itemRange, form seqForm, ok bool) {
	// A byte-order mark may begin the file (editors on Windows write
	// one); the YAML parser skips it there.
	start := len(data) - len(bytes.TrimPrefix(data, bom))
	if !plainBytes(data[start:]) {
		return nil, 0, false
	}
	s := &splitter{data: data, pos: start, start: start, line: 1}
	form = s.head()
	if form == 0 {
		return nil, 0, false
	}
	items, ok = s.rest(form)
	return items, form, ok
}

// resplit cuts data into its items knowing that the file's previous
// bytes, e.Prev, were cut into prevItems (form) and share e's head and
// tail with data (e is filewatch.Diff(e.Prev, data)): only the bytes from the
// last item that begins before the first changed byte up to the first
// item start in the unchanged tail are split again, so that an edit
// costs the items it touched, not the file (docs/architecture.md §3.1.1).
// It returns the new items and where they differ: items[a:bNew] replace
// prevItems[a:bOld]; the items before are prevItems[:a], those after are
// prevItems[bOld:] moved by the change's length and by dl lines. items
// reuses prevItems' array (prevItems is not to be used after a
// success). ok false: the file is not in a shape the split follows
// (prevItems unchanged).
func resplit(data []byte, e filewatch.Edit, prevItems []itemRange, form seqForm) (items []itemRange, a, bOld, bNew, dl int, ok bool) {
	p, q := e.Prefix, e.Suffix
	// The last item that begins before the first changed byte: its start
	// is unchanged and is an item start in data too.
	a = sort.Search(len(prevItems), func(i int) bool { return prevItems[i].start >= p }) - 1
	if a < 0 {
		items, _, ok = splitServices(data)
		return items, 0, len(prevItems), len(items), 0, ok
	}
	// The rest was checked when e.Prev was split; a CR before the change
	// may have met its LF in it.
	if !plainBytes(data[max(p-1, 0):min(len(data)-q+1, len(data))]) {
		return nil, 0, 0, 0, 0, false
	}
	delta, tail := len(data)-len(e.Prev), len(data)-q
	s := &splitter{data: data, pos: prevItems[a].start, line: prevItems[a].line}
	bOld = len(prevItems)
	s.stop = func(pos, line int) bool {
		// An item start in the unchanged tail that began an item of
		// e.Prev: the rest of the split is e.Prev's.
		if pos < tail {
			return false
		}
		old := pos - delta
		b := sort.Search(len(prevItems), func(i int) bool { return prevItems[i].start >= old })
		if b == len(prevItems) || prevItems[b].start != old {
			return false
		}
		bOld, dl = b, line-prevItems[b].line
		return true
	}
	mid, ok := s.rest(form)
	if !ok {
		return nil, 0, 0, 0, 0, false
	}
	// In place: the items after the change are moved, not copied into a
	// new list (an edit of one service in 10,000 allocates nothing here).
	items = slices.Replace(prevItems, a, bOld, mid...)
	bNew = a + len(mid)
	if delta != 0 || dl != 0 {
		for i := bNew; i < len(items); i++ {
			items[i].start += delta
			items[i].end += delta
			items[i].line += dl
		}
	}
	return items, a, bOld, bNew, dl, true
}

// plainBytes: b holds nothing that the split does not follow outside
// of the constructs it tracks: no tab (it may be indentation), no
// byte-order mark, and no line break but LF and CRLF (the YAML parser
// also breaks lines at a lone CR and at NEL, LS and PS, and would count
// lines, or see items begin, where the split does not).
func plainBytes(b []byte) bool {
	if bytes.Contains(b, bom) ||
		bytes.Contains(b, []byte("\xc2\x85")) || bytes.Contains(b, []byte("\xe2\x80\xa8")) || bytes.Contains(b, []byte("\xe2\x80\xa9")) {
		return false
	}
	return !followedBy(b, '\r', func(c byte) bool { return c != '\n' })
}

// head reads what comes before the services sequence and says its form;
// 0 when the file is not in a shape the split follows. pos ends at the
// sequence's '[' (flow forms) or at the line after `services:` (block).
func (s *splitter) head() seqForm {
	data := s.data
	s.skipBlankAndComments()
	if s.atDocMarker("---") {
		s.pos += 3
		if !s.restOfLineEmpty() {
			return 0
		}
		s.nextLine()
		s.skipBlankAndComments()
	}
	if s.pos >= len(data) {
		return 0
	}
	switch data[s.pos] {
	case '{':
		// A flow mapping at the root: JSON, {"services": [ ... ]}.
		s.pos++
		s.skipSpace()
		if !s.key() {
			return 0
		}
		s.skipSpace()
		if s.pos >= len(data) || data[s.pos] != '[' {
			return 0
		}
		s.pos++
		return formJSON
	default:
		if !s.key() {
			return 0
		}
		for s.pos < len(data) && blank(data[s.pos]) {
			s.pos++
		}
		if s.pos < len(data) && data[s.pos] == '[' {
			s.pos++
			return formFlow
		}
		if !s.restOfLineEmpty() {
			return 0
		}
		s.nextLine()
		return formBlock
	}
}

// rest reads the services sequence from pos — its first item, or where
// the split resumes at an item start — to the end of the file, checking
// what follows it; it stops early when stop says so.
func (s *splitter) rest(form seqForm) ([]itemRange, bool) {
	s.rootFlow = form == formJSON
	if form == formBlock {
		return s.blockSeq()
	}
	items, ok := s.flowItems()
	if !ok || s.stopped {
		return items, ok
	}
	if form == formJSON {
		s.skipSpace()
		if s.pos >= len(s.data) || s.data[s.pos] != '}' {
			return nil, false
		}
		s.pos++
	}
	return items, s.onlyTrailer()
}

// key reads the root key `services` (plain or quoted) and its ':'.
func (s *splitter) key() bool {
	for _, k := range []string{"services", `"services"`, "'services'"} {
		if bytes.HasPrefix(s.data[s.pos:], []byte(k)) {
			s.pos += len(k)
			if s.pos < len(s.data) && s.data[s.pos] == ':' {
				s.pos++
				return s.pos == len(s.data) || blank(s.data[s.pos]) || s.data[s.pos] == '\n' || s.data[s.pos] == '\r' || k[0] != 's'
			}
			return false
		}
	}
	return false
}

// atDocMarker: a document marker (--- or ...) starts at pos, at the
// beginning of a line.
func (s *splitter) atDocMarker(m string) bool {
	d := s.data[s.pos:]
	return (s.pos == s.start || s.data[s.pos-1] == '\n') && bytes.HasPrefix(d, []byte(m)) &&
		(len(d) == 3 || blank(d[3]) || d[3] == '\n' || d[3] == '\r')
}

// restOfLineEmpty: only blanks and a comment remain on pos's line.
func (s *splitter) restOfLineEmpty() bool {
	for i := s.pos; i < len(s.data); i++ {
		switch c := s.data[i]; {
		case blank(c) || c == '\r':
		case c == '\n':
			return true
		case c == '#':
			return i == s.pos || blank(s.data[i-1])
		default:
			return false
		}
	}
	return true
}

// nextLine moves pos to the beginning of the next line (or the end).
func (s *splitter) nextLine() {
	if i := bytes.IndexByte(s.data[s.pos:], '\n'); i >= 0 {
		s.pos += i + 1
		s.line++
		return
	}
	s.pos = len(s.data)
}

// skipBlankAndComments moves pos over lines that are blank or only a
// comment; pos must be at the beginning of a line.
func (s *splitter) skipBlankAndComments() {
	for s.pos < len(s.data) {
		i := s.pos
		for i < len(s.data) && blank(s.data[i]) {
			i++
		}
		if i < len(s.data) && s.data[i] != '\n' && s.data[i] != '\r' && s.data[i] != '#' {
			return // pos stays at the line's beginning
		}
		s.nextLine()
	}
}

// skipSpace moves pos over spaces, line breaks and comments (flow
// context).
func (s *splitter) skipSpace() {
	for s.pos < len(s.data) {
		switch c := s.data[s.pos]; c {
		case ' ', '\t', '\r':
			s.pos++
		case '\n':
			s.pos++
			s.line++
		case '#':
			if s.pos > 0 && !blank(s.data[s.pos-1]) && s.data[s.pos-1] != '\n' {
				return
			}
			for s.pos < len(s.data) && s.data[s.pos] != '\n' {
				s.pos++
			}
		default:
			return
		}
	}
}

// onlyTrailer: nothing but spaces, line breaks and comments remains.
func (s *splitter) onlyTrailer() bool {
	s.skipSpace()
	return s.pos == len(s.data)
}

// flowItems reads the items of a flow sequence from pos (after its '[',
// or at an item's '{'), each of which must begin with '{' (a service is a
// mapping). pos ends after ']'.
func (s *splitter) flowItems() ([]itemRange, bool) {
	var items []itemRange
	for {
		s.skipSpace()
		if s.pos >= len(s.data) {
			return nil, false
		}
		if s.data[s.pos] == ']' {
			s.pos++
			return items, true
		}
		if s.data[s.pos] != '{' {
			return nil, false
		}
		if len(items) > 0 && s.stop != nil && s.stop(s.pos, s.line) {
			s.stopped = true
			return items, true
		}
		it := itemRange{start: s.pos, line: s.line, flow: true}
		if !s.flowNode() {
			return nil, false
		}
		it.end = s.pos
		if !s.rootFlow && atColumn0(s.data[it.start:it.end]) {
			// In `services: [...]` the sequence is inside a block mapping,
			// which the YAML parser holds against some tokens at column 0
			// (": x" is an error there); the item parsed alone is not.
			return nil, false
		}
		items = append(items, it)
		s.skipSpace()
		if s.pos >= len(s.data) {
			return nil, false
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
		case ']':
		default:
			return nil, false
		}
	}
}

// flowNode moves pos over the flow collection that starts at pos, with
// the quoted scalars and comments in it; false if it does not end.
func (s *splitter) flowNode() bool {
	depth := 0
	for s.pos < len(s.data) {
		for s.pos < len(s.data) && !flowSpecial[s.data[s.pos]] {
			s.pos++
		}
		if s.pos == len(s.data) {
			break
		}
		c := s.data[s.pos]
		switch c {
		case '[', '{':
			depth++
		case ']', '}':
			depth--
			if depth == 0 {
				s.pos++
				return true
			}
		case '"', '\'':
			if p := s.data[s.pos-1]; blank(p) || p == '\n' || p == '[' || p == '{' || p == ',' || p == ':' {
				if !s.quoted(c) {
					return false
				}
				continue
			}
		case '#':
			if p := s.data[s.pos-1]; blank(p) || p == '\n' {
				for s.pos < len(s.data) && s.data[s.pos] != '\n' {
					s.pos++
				}
				continue
			}
		case '\n':
			s.line++
		}
		s.pos++
	}
	return false
}

// blockScalar moves pos over the block scalar (| or >) whose indicator
// is at pos and over its content, to the beginning of the first line
// after it: the content is every following line that is blank or
// indented more than the node holding the scalar (the key of "key: |",
// the "-" of "- |"), which is how YAML ends it. false when the split
// cannot place the indicator (at the beginning of a line, after a tag or
// anchor, inside a plain scalar) or its header is not one.
func (s *splitter) blockScalar() bool {
	ls := bytes.LastIndexByte(s.data[:s.pos], '\n') + 1
	i := ls
	for i < s.pos && s.data[i] == ' ' {
		i++
	}
	owner := i - ls
	for i+1 < s.pos && s.data[i] == '-' && s.data[i+1] == ' ' {
		j := i + 1
		for j < s.pos && s.data[j] == ' ' {
			j++
		}
		if j == s.pos {
			return s.skipBlockScalar(i - ls) // "- |"
		}
		i, owner = j, j-ls
	}
	if i == s.pos {
		return false // its key is on an earlier line
	}
	k := s.pos - 1
	for k > i && blank(s.data[k]) {
		k--
	}
	if s.data[k] != ':' {
		return false
	}
	return s.skipBlockScalar(owner)
}

// skipBlockScalar moves pos from a block scalar's indicator over its
// header and content (the lines blank or indented more than owner).
func (s *splitter) skipBlockScalar(owner int) bool {
	s.pos++
	for n := 0; n < 2 && s.pos < len(s.data); n++ {
		if c := s.data[s.pos]; c != '+' && c != '-' && (c < '1' || c > '9') {
			break
		}
		s.pos++
	}
	if !s.restOfLineEmpty() {
		return false
	}
	s.nextLine()
	for s.pos < len(s.data) {
		i := s.pos
		for i < len(s.data) && s.data[i] == ' ' {
			i++
		}
		if i < len(s.data) && s.data[i] != '\n' && s.data[i] != '\r' && i-s.pos <= owner {
			return true // the first line after the content
		}
		s.nextLine()
	}
	return true
}

// quoted moves pos over the quoted scalar that starts at pos (quote q);
// false if it does not end.
func (s *splitter) quoted(q byte) bool {
	s.pos++
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '\n':
			s.line++
			if s.atDocMarker("---") || s.atDocMarker("...") {
				return false
			}
		case c == '\\' && q == '"':
			s.pos++
			if s.pos < len(s.data) && s.data[s.pos] == '\n' {
				s.line++
			}
		case c == q:
			if q == '\'' && s.pos+1 < len(s.data) && s.data[s.pos+1] == '\'' {
				s.pos++ // '' is an escaped quote
				break
			}
			s.pos++
			return true
		}
		s.pos++
	}
	return false
}

// blockSeq reads the block sequence whose first item is the first
// non-blank line at or after pos: every line at the sequence's indent
// that begins with "-" begins an item; the rest of the file must be its
// items.
func (s *splitter) blockSeq() ([]itemRange, bool) {
	s.skipBlankAndComments()
	if s.pos >= len(s.data) {
		return nil, false
	}
	indent := 0
	for s.data[s.pos+indent] == ' ' {
		indent++
	}
	var items []itemRange
	for s.pos < len(s.data) {
		// pos is at the beginning of a line that is not blank or a comment.
		ind := 0
		for s.pos+ind < len(s.data) && s.data[s.pos+ind] == ' ' {
			ind++
		}
		rest := s.data[s.pos+ind:]
		if s.atDocMarker("---") || s.atDocMarker("...") || (ind == 0 && rest[0] == '%') {
			return nil, false
		}
		switch {
		case ind == indent && rest[0] == '-' && (len(rest) == 1 || rest[1] == ' ' || rest[1] == '\n' || rest[1] == '\r'):
			if len(items) > 0 {
				items[len(items)-1].end = s.pos
				if s.stop != nil && s.stop(s.pos, s.line) {
					s.stopped = true
					return items, true
				}
			}
			items = append(items, itemRange{start: s.pos, line: s.line})
		case ind <= indent || len(items) == 0:
			return nil, false // a key or a value after the sequence
		}
		if !s.blockLine() {
			return nil, false
		}
		s.skipBlankAndComments()
	}
	if len(items) == 0 {
		return nil, false
	}
	items[len(items)-1].end = len(s.data)
	return items, true
}

// blockLine moves pos over one line of block content (from its
// beginning) and over any quoted scalar or flow collection that begins on
// it and continues on later lines; false on what the split does not
// follow (a block scalar, a tag or anchor it cannot place, an unending
// quote).
func (s *splitter) blockLine() bool {
	for s.pos < len(s.data) {
		for s.pos < len(s.data) && !blockSpecial[s.data[s.pos]] {
			s.pos++
		}
		if s.pos == len(s.data) {
			break
		}
		c := s.data[s.pos]
		prev := byte('\n')
		if s.pos > 0 {
			prev = s.data[s.pos-1]
		}
		node := blank(prev) || prev == '\n' // where a node may begin
		switch {
		case c == '\n':
			s.pos++
			s.line++
			return true
		case c == '#' && node:
			s.nextLine()
			return true
		case (c == '"' || c == '\'') && node:
			if !s.quoted(c) {
				return false
			}
			continue
		case (c == '[' || c == '{') && node:
			if !s.flowNode() {
				return false
			}
			continue
		case (c == '|' || c == '>') && node:
			return s.blockScalar()
		}
		s.pos++
	}
	return true
}
