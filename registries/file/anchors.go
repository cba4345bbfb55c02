package file

import (
	"encoding/binary"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v4"
)

// Anchors across services (docs/architecture.md §3.1.1). A service that
// takes an anchor defined by an earlier service (`ports: *http`) does not
// parse alone. It is parsed after the services that define the anchors it
// takes — the nearest earlier definition of each, and those that these
// take in turn — as one sequence in file order, so that every alias binds
// to the node it binds to in the whole file. An edit re-parses the
// services it changed and every later service that takes an anchor a
// changed service defines or defined (and, in turn, those taking the
// anchors these define): what the edit changes, not the file. An anchor
// that only moved to other lines changes only the services with an
// endpoint taken from elsewhere (its Origin names the line).

// anchorIndex says, by position in a file's ranges, which services define
// anchors and which take anchors from earlier services.
type anchorIndex struct {
	defs  map[string][]int // anchor → positions of the services defining it, ascending
	users map[string][]int // anchor → positions of the services taking it from an earlier one, ascending
}

// maxTaken bounds how many anchors one service may take from others
// before the file takes the full parse.
const maxTaken = 64

// maxContext bounds how many services one service is parsed after
// before the file takes the full parse: a chain of services each taking
// an anchor from the one before would otherwise cost each service a parse
// of all those before it.
const maxContext = 16

// replace drops the positions in [a, bOld), which an edit replaced by
// [a, bNew), and moves those after by bNew-bOld.
func (x *anchorIndex) replace(a, bOld, bNew int) {
	for _, m := range []map[string][]int{x.defs, x.users} {
		for name, ps := range m {
			i := sort.SearchInts(ps, a)
			j := sort.SearchInts(ps, bOld)
			if d := bNew - bOld; d != 0 {
				for k := j; k < len(ps); k++ {
					ps[k] += d
				}
			}
			if ps = slices.Delete(ps, i, j); len(ps) == 0 {
				delete(m, name)
			} else {
				m[name] = ps
			}
		}
	}
}

// add records what the service at position p defines and takes.
func (x *anchorIndex) add(p int, rec *itemRec) {
	x.defs = insertAll(x.defs, rec.defines, p)
	x.users = insertAll(x.users, rec.uses, p)
}

// remove forgets what add recorded for rec at p.
func (x *anchorIndex) remove(p int, rec *itemRec) {
	for _, m := range []struct {
		m     map[string][]int
		names []string
	}{{x.defs, rec.defines}, {x.users, rec.uses}} {
		for _, name := range m.names {
			ps := m.m[name]
			if i, ok := slices.BinarySearch(ps, p); ok {
				if ps = slices.Delete(ps, i, i+1); len(ps) == 0 {
					delete(m.m, name)
				} else {
					m.m[name] = ps
				}
			}
		}
	}
}

func insertAll(m map[string][]int, names []string, p int) map[string][]int {
	if len(names) > 0 && m == nil {
		m = map[string][]int{}
	}
	for _, name := range names {
		ps := m[name]
		if i, found := slices.BinarySearch(ps, p); !found {
			m[name] = slices.Insert(ps, i, p)
		}
	}
	return m
}

// nearest is the position of the last service before p that defines
// name.
func (x *anchorIndex) nearest(name string, p int) (int, bool) {
	ps := x.defs[name]
	i := sort.SearchInts(ps, p)
	if i == 0 {
		return 0, false
	}
	return ps[i-1], true
}

// context returns, ascending, the positions of the services the service
// at p must be parsed after to take the anchors uses: the nearest earlier
// definer of each, and theirs in turn (rec gives a service's parse).
// false: an anchor has no earlier definition, or they are more than
// maxContext.
func (x *anchorIndex) context(p int, uses []string, rec func(q int) *itemRec) ([]int, bool) {
	set := map[int]bool{}
	var visit func(q int, names []string) bool
	visit = func(q int, names []string) bool {
		for _, name := range names {
			d, ok := x.nearest(name, q)
			if !ok {
				return false
			}
			if set[d] {
				continue
			}
			set[d] = true
			if len(set) > maxContext {
				return false
			}
			r := rec(d)
			if r == nil || !visit(d, r.uses) {
				return false
			}
		}
		return true
	}
	if !visit(p, uses) {
		return nil, false
	}
	out := make([]int, 0, len(set))
	for q := range set {
		out = append(out, q)
	}
	slices.Sort(out)
	return out, true
}

// bound returns what the anchors uses hold (their definitions' sums,
// anchorsIn) for a service at p: the nearest earlier definition of each
// (rec gives a service's parse). false: one has none.
func (x *anchorIndex) bound(uses []string, p int, rec func(q int) *itemRec) ([]uint64, bool) {
	out := make([]uint64, len(uses))
	for i, name := range uses {
		d, ok := x.nearest(name, p)
		if !ok {
			return nil, false
		}
		r := rec(d)
		j := -1
		if r != nil {
			j = slices.Index(r.defines, name)
		}
		if j < 0 {
			return nil, false
		}
		out[i] = r.defSums[j]
	}
	return out, true
}

// binds: a service at p that takes uses takes what they held where it
// was (took, from bound).
func (x *anchorIndex) binds(uses []string, p int, rec func(q int) *itemRec, took []uint64) bool {
	now, ok := x.bound(uses, p, rec)
	return ok && took != nil && slices.Equal(now, took)
}

// affected returns, ascending, the positions of the services that take
// name from a service in [from, until) or before, were the definitions
// there to change: those from from on, up to the first definition of
// name at or after until (included, when that service takes name too).
func (x *anchorIndex) affected(name string, from, until int) []int {
	ps := x.users[name]
	ps = ps[sort.SearchInts(ps, from):]
	defs := x.defs[name]
	if i := sort.SearchInts(defs, until); i < len(defs) {
		ps = ps[:sort.SearchInts(ps, defs[i]+1)]
	}
	return ps
}

// unknownAnchor returns the anchor a YAML syntax error says is taken but
// not defined ("unknown anchor 'x' referenced"), or "".
func unknownAnchor(msg string) string {
	const pre, post = "unknown anchor '", "' referenced"
	i := strings.Index(msg, pre)
	j := strings.LastIndex(msg, post)
	if i < 0 || j < i+len(pre) {
		return ""
	}
	return msg[i+len(pre) : j]
}

// anchorsIn returns the anchors defined in the tree at n, in file order,
// and two hashes of what each holds (its last definition there): its
// values, aliases followed (sums), and those with where in the service
// its nodes are (places: line - first, which the Origin of an endpoint
// taken from it depends on). A service whose edit leaves the hashes as
// they were changes nothing for the services taking them; one that
// leaves the sums changes only the Origin of endpoints taken.
func anchorsIn(n *yaml.Node, first int) (names []string, sums, places []uint64) {
	hash := func(n *yaml.Node, first int) uint64 {
		var h maphash.Hash
		h.SetSeed(itemSeed)
		budget := maxAnchorNodes
		hashNode(&h, n, first, &budget)
		if budget < 0 {
			return rand.Uint64() // too large to tell: never the same
		}
		return h.Sum64()
	}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Anchor != "" {
			sum, place := hash(n, 0), hash(n, first)
			if i := slices.Index(names, n.Anchor); i >= 0 {
				sums[i], places[i] = sum, place
			} else {
				names, sums, places = append(names, n.Anchor), append(sums, sum), append(places, place)
			}
		}
		if n.Kind == yaml.AliasNode {
			return
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(n)
	return names, sums, places
}

// maxAnchorNodes bounds the nodes hashed for one anchor, aliases
// expanded.
const maxAnchorNodes = 1 << 16

// hashNode writes the tree at n to h: kinds, tags and values, and the
// line (relative to first) of the nodes that are not reached through an
// alias, aliases included (first 0: none).
func hashNode(h *maphash.Hash, n *yaml.Node, first int, budget *int) {
	if *budget--; *budget < 0 {
		return
	}
	var buf [8]byte
	line := 0
	if first != 0 {
		line = n.Line - first
	}
	binary.LittleEndian.PutUint64(buf[:], uint64(line)<<8|uint64(n.Kind))
	h.Write(buf[:])
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		// The alias's own line counts too: an endpoint that is an alias
		// (`endpoints: &e [*x]`) has its Origin there.
		hashNode(h, n.Alias, 0, budget)
		return
	}
	h.WriteString(n.ShortTag())
	h.WriteByte(0)
	h.WriteString(n.Value)
	h.WriteByte(0)
	binary.LittleEndian.PutUint64(buf[:], uint64(len(n.Content)))
	h.Write(buf[:])
	for _, c := range n.Content {
		hashNode(h, c, first, budget)
	}
}

// changedAnchors returns the anchors whose definitions in new (parses of
// services in file order, at lines newLines) differ from those in old (at
// oldLines) in what they hold (changed), or else only in where they are
// (moved: the place of their nodes in the service or the line of the
// service, which only the Origin of an endpoint taken from them depends
// on).
func changedAnchors(old, new []*itemRec, oldLines, newLines []int) (changed, moved []string) {
	defs := func(recs []*itemRec, lines []int) (sums, places map[string][]uint64) {
		sums, places = map[string][]uint64{}, map[string][]uint64{}
		for k, r := range recs {
			for i, name := range r.defines {
				sums[name] = append(sums[name], r.defSums[i])
				places[name] = append(places[name], r.defPlaces[i], uint64(lines[k]))
			}
		}
		return sums, places
	}
	os, op := defs(old, oldLines)
	ns, np := defs(new, newLines)
	for name, sums := range os {
		switch {
		case !slices.Equal(sums, ns[name]):
			changed = append(changed, name)
		case !slices.Equal(op[name], np[name]):
			moved = append(moved, name)
		}
	}
	for name := range ns {
		if _, ok := os[name]; !ok {
			changed = append(changed, name)
		}
	}
	return changed, moved
}

// takenAnchors returns the anchors the tree at n takes from outside it.
func takenAnchors(n *yaml.Node) []string {
	inside := map[*yaml.Node]bool{}
	var aliases []*yaml.Node
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		inside[n] = true
		if n.Kind == yaml.AliasNode {
			aliases = append(aliases, n)
			return
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(n)
	var out []string
	for _, a := range aliases {
		if !inside[a.Alias] && !slices.Contains(out, a.Value) {
			out = append(out, a.Value)
		}
	}
	return out
}

// without returns the names of a that are not in b.
func without(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}
