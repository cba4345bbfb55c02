package file

import (
	"bytes"
	"hash/maphash"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"go.yaml.in/yaml/v4"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/filewatch"
	"github.com/meshfed/meshfed/yamlconf"
	"github.com/meshfed/meshfed/yamlconf/yamlpath"
)

// An edit costs what the changed services cost, whatever the YAML style
// of the file (docs/architecture.md §3.1.1). A Run keeps, per file, every
// service's parse by the hash of its bytes (split.go cuts the file into
// one range per service; a later read cuts again only the part that
// differs from the bytes last read, resplit); a read re-parses only the
// ranges whose bytes changed — on the fast path (fast.go) when the range is in its subset,
// else through the YAML node tree, both on that range alone — and keeps
// the converted service of every other range as it was (the same value,
// so that the Publisher and the aggregator see it unchanged without
// looking into it). A service whose bytes are unchanged but that moved to
// another line keeps its conversion with its endpoints' Origin (which
// names their lines) moved: a new value, not a new parse. The whole file
// takes the full parse (Parse) when the split does not follow it
// (split.go), when a range does not parse alone or after the services
// defining the anchors it takes (anchors.go), when its services decode,
// aliases expanded, to more values than Parse allows the file, and
// whenever anything in it is invalid, so that every error is reported as
// before with its file:line:col.

// svcItem is one service of a file as last read: the same pointer while
// its bytes and line are unchanged.
type svcItem struct {
	line int // of the item's first byte
	svc  model.Service
}

// itemRec is the parse of one range, by the hash of its bytes: its
// conversion at the line it was last at (only Endpoint.Origin depends on
// the line: moveItem). The entry is dropped once converted.
type itemRec struct {
	size      int
	se        serviceEntry // until converted
	epRel     []int        // each endpoint's line - the range's first line
	last      *svcItem     // its last conversion
	defines   []string     // the anchors it defines (anchors.go)
	defSums   []uint64     // a hash of what each holds (anchorsIn)
	defPlaces []uint64     // and of where (anchorsIn)
	uses      []string     // the anchors it takes from earlier services; nil: it parses alone
	foreign   bool         // an endpoint is an earlier service's (epRel < 0 then)
	values    int          // values its decode counts, aliases expanded (at most, on the fast path)
}

// itemCache is one file's parsed ranges and its last split read.
type itemCache struct {
	recs map[uint64]*itemRec // by the hash of the range's bytes
	// The last read that took the split (nil data: none, or a full
	// parse): its bytes (the next read is cut again where it differs from
	// them; the Watch leaves them unchanged until the read after next, see
	// filewatch.Watch.ParseEdit), its items, each item's hash and service,
	// and the hostnames served.
	data   []byte
	form   seqForm
	ranges []itemRange
	sums   []uint64
	out    []*svcItem
	names  map[string]bool
	// Which services define anchors and which take them from others,
	// and what the last service parsed with others took (parseAt).
	anchors anchorIndex
	hint    []string
	// values sums the items' values: the full parse rejects a file that
	// expands to more than yamlconf.MaxValues, so the items do too.
	values int
}

// Work counts what a Run's reads did, for tests and diagnostics.
type work struct {
	parsed    atomic.Uint64 // services parsed from YAML (a range, or each service of a full parse)
	converted atomic.Uint64 // services converted and validated
	compared  atomic.Uint64 // Publisher keys compared (one per service that may have changed)
	whole     atomic.Uint64 // reads that took the full parse
	cut       atomic.Uint64 // ranges the split cut (again)
}

var itemSeed = maphash.MakeSeed()

// parseItems is Parse for a Run: it splits again only the part of data
// that differs from the file's last read (resplit; e says where, as the
// Watch found it reading data), re-parses only the ranges whose bytes are
// not in cache, and leaves cache holding data's ranges.
func parseItems(name string, data []byte, e filewatch.Edit, c registries.Common, cache *itemCache, w *work) ([]*svcItem, error) {
	var (
		ranges           []itemRange
		a, bOld, mid, dl int
		form             = cache.form
		ok               bool
	)
	if cache.data != nil {
		if !sameSlice(e.Prev, cache.data) {
			e = filewatch.Diff(cache.data, data) // not the Watch's last bytes (tests)
		}
		ranges, a, bOld, mid, dl, ok = resplit(data, e, cache.ranges, cache.form)
	} else {
		ranges, form, ok = splitServices(data)
		a, bOld, mid = 0, 0, len(ranges)
		cache.recs, cache.ranges, cache.sums, cache.out, cache.names = map[uint64]*itemRec{}, nil, nil, nil, map[string]bool{}
		cache.anchors, cache.values = anchorIndex{}, 0
	}
	if !ok {
		return parseWhole(name, data, c, cache, w)
	}
	// From here a failure takes the full parse, which empties the cache:
	// resplit may have rewritten cache.ranges in place.
	w.cut.Add(uint64(mid - a))
	// The items a..bOld of the last read are replaced by ranges[a:mid];
	// their parses are kept by hash for the ranges whose bytes they are.
	// Anchors the replaced items defined: the services taking them are
	// parsed again below.
	was := make(map[uint64]*itemRec, bOld-a)
	// What the replaced items that take anchors took (anchorIndex.bound):
	// one whose bytes are kept is kept only if it takes the same.
	took := map[*itemRec][]uint64{}
	for k := a; k < bOld; k++ {
		if rec := cache.recs[cache.sums[k]]; rec.uses != nil {
			took[rec], _ = cache.anchors.bound(rec.uses, k, func(q int) *itemRec { return cache.recs[cache.sums[q]] })
		}
	}
	wasRecs := make([]*itemRec, 0, bOld-a)
	wasLines := make([]int, 0, bOld-a)
	for k := a; k < bOld; k++ {
		h := cache.sums[k]
		was[h] = cache.recs[h]
		wasRecs, wasLines = append(wasRecs, cache.recs[h]), append(wasLines, cache.out[k].line)
		cache.values -= cache.recs[h].values
		delete(cache.recs, h)
		delete(cache.names, cache.out[k].svc.Hostname)
	}
	if mid == bOld {
		// No position moves: forget what the replaced items recorded,
		// not every anchor's.
		for k, rec := range wasRecs {
			cache.anchors.remove(a+k, rec)
		}
	} else {
		cache.anchors.replace(a, bOld, mid)
	}
	sums := make([]uint64, 0, mid-a)
	items := make([]*svcItem, 0, mid-a)
	recs := make([]*itemRec, 0, mid-a)
	var fresh []int // the positions parsed again
	recAt := func(q int) *itemRec {
		if q < a {
			return cache.recs[cache.sums[q]]
		}
		return recs[q-a]
	}
	for j, rg := range ranges[a:mid] {
		b := data[rg.start:rg.end]
		h := maphash.Bytes(itemSeed, b)
		if cache.recs[h] != nil {
			return parseWhole(name, data, c, cache, w) // two services with the same bytes: a duplicate name
		}
		rec := was[h]
		if rec == nil || rec.size != len(b) || rec.foreign || rec.uses != nil && !cache.anchors.binds(rec.uses, a+j, recAt, took[rec]) {
			if rec, ok = cache.parseAt(data, ranges, a+j, recAt, w); !ok {
				return parseWhole(name, data, c, cache, w)
			}
			fresh = append(fresh, a+j)
		}
		it, failed := rec.at(rg.line, name, c, w)
		if failed || cache.names[it.svc.Hostname] {
			return parseWhole(name, data, c, cache, w)
		}
		cache.recs[h], cache.names[it.svc.Hostname] = rec, true
		cache.anchors.add(a+j, rec)
		cache.values += rec.values
		sums, items, recs = append(sums, h), append(items, it), append(recs, rec)
	}
	// The list returned is new (the last one is the Watch's to compare
	// with); the hashes are kept in place.
	out := make([]*svcItem, 0, len(ranges))
	out = append(out, cache.out[:a]...)
	out = append(out, items...)
	tail := len(out)
	out = append(out, cache.out[bOld:]...)
	var moved []int // after the change, on other lines, with an earlier service's endpoints
	if dl != 0 {
		// The items after the change: the same parses, on other lines.
		for k := tail; k < len(out); k++ {
			rec := cache.recs[cache.sums[bOld+k-tail]]
			if rec.foreign {
				moved = append(moved, k)
			}
			out[k], _ = rec.at(ranges[k].line, name, c, w)
		}
	}
	cache.sums = slices.Replace(cache.sums, a, bOld, sums...)
	lines := make([]int, len(items))
	for j, it := range items {
		lines[j] = it.line
	}
	redefined, placed := changedAnchors(wasRecs, recs, wasLines, lines)
	if len(redefined)+len(placed)+len(moved) > 0 && !cache.reparseUsers(name, data, ranges, out, fresh, moved, redefined, placed, a, mid, c, w) {
		return parseWhole(name, data, c, cache, w)
	}
	if rootValues+cache.values > yamlconf.MaxValues(len(data)) {
		return parseWhole(name, data, c, cache, w) // too many values: as Parse says
	}
	cache.data, cache.form, cache.ranges, cache.out = data, form, ranges, out
	return out, nil
}

// parseAt parses the service at position p of ranges (data's): alone,
// or after the services defining the anchors it takes (anchors.go; rec
// gives the parse of an earlier service). It counts every service parsed.
// A service is first parsed after the definers of what the last service
// parsed with others took (cache.hint), as most take the same anchors;
// when that does not parse, alone, then with each anchor missing.
func (cache *itemCache) parseAt(data []byte, ranges []itemRange, p int, rec func(int) *itemRec, w *work) (*itemRec, bool) {
	rg := ranges[p]
	it := piece{data[rg.start:rg.end], rg.line}
	// withCtx parses it after the definers of uses. Not ok: missing is
	// what it takes that they do not define, or out (uses and what else
	// it took) names the definers to parse it with again.
	withCtx := func(uses []string) (r *itemRec, out []string, missing string, ok bool) {
		at, found := cache.anchors.context(p, uses, rec)
		if !found {
			return nil, uses, "", false
		}
		ctx := make([]piece, len(at))
		for i, q := range at {
			ctx[i] = piece{data[ranges[q].start:ranges[q].end], ranges[q].line}
		}
		r, taken, missing, ok := parseItem(it, rg.flow, ctx)
		w.parsed.Add(uint64(len(at) + 1))
		if !ok {
			return nil, uses, missing, false
		}
		// The context (the nearest definer of each of uses) may have
		// bound another anchor: right when its nearest definer is in the
		// context (no later one is), else parse again with it.
		for _, name := range without(taken, uses) {
			uses = append(uses, name)
			if d, _ := cache.anchors.nearest(name, p); !slices.Contains(at, d) {
				ok = false
			}
		}
		if !ok {
			return nil, uses, "", false
		}
		r.uses = nil
		if len(taken) > 0 {
			r.uses = taken
		}
		return r, uses, "", true
	}
	done := func(r *itemRec) (*itemRec, bool) {
		cache.hint = r.uses
		return r, true
	}
	if len(cache.hint) > 0 {
		if r, _, _, ok := withCtx(slices.Clone(cache.hint)); ok {
			return done(r)
		}
	}
	r, _, missing, ok := parseItem(it, rg.flow, nil)
	w.parsed.Add(1)
	if ok {
		return done(r)
	}
	var uses []string
	for range maxTaken {
		if missing != "" {
			if slices.Contains(uses, missing) {
				return nil, false
			}
			uses = append(uses, missing)
		}
		prev := len(uses)
		r, uses, missing, ok = withCtx(uses)
		if ok {
			return done(r)
		}
		if missing == "" && len(uses) == prev {
			return nil, false // fails for another reason
		}
	}
	return nil, false
}

// reparseUsers parses again, in out (the file's new list), the services
// at positions, those that take one of names, which the edit of [a, bNew)
// changed, from there (anchorIndex.affected), those of them with an
// endpoint taken from elsewhere that take one of moved (whose nodes only
// moved, changedAnchors), and in turn those taking the anchors these
// define, unless just parsed (parsed). false: one no longer parses or
// converts.
func (cache *itemCache) reparseUsers(file string, data []byte, ranges []itemRange, out []*svcItem, parsed, positions []int, names, moved []string, a, bNew int, c registries.Common, w *work) bool {
	type change struct {
		anchor      string
		from, until int
		foreign     bool // only the users with an endpoint taken
	}
	var todo []change
	for _, n := range names {
		todo = append(todo, change{n, a, bNew, false})
	}
	for _, n := range moved {
		todo = append(todo, change{n, a, bNew, true})
	}
	recAt := func(q int) *itemRec { return cache.recs[cache.sums[q]] }
	done := map[int]bool{}
	for _, q := range parsed {
		done[q] = true
	}
	reparse := func(q int) bool {
		if done[q] {
			return true
		}
		done[q] = true
		h := cache.sums[q]
		old := cache.recs[h]
		rec, ok := cache.parseAt(data, ranges, q, recAt, w)
		if !ok {
			return false
		}
		cache.anchors.remove(q, old)
		cache.anchors.add(q, rec)
		cache.values += rec.values - old.values
		cache.recs[h] = rec
		delete(cache.names, out[q].svc.Hostname)
		it, failed := rec.at(ranges[q].line, file, c, w)
		if failed || cache.names[it.svc.Hostname] {
			return false
		}
		cache.names[it.svc.Hostname] = true
		out[q] = it
		line := []int{ranges[q].line}
		changed, moved := changedAnchors([]*itemRec{old}, []*itemRec{rec}, line, line)
		for _, n := range changed {
			todo = append(todo, change{n, q + 1, q + 1, false})
		}
		for _, n := range moved {
			todo = append(todo, change{n, q + 1, q + 1, true})
		}
		return true
	}
	for _, q := range positions {
		if !reparse(q) {
			return false
		}
	}
	for len(todo) > 0 {
		ch := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		for _, q := range slices.Clone(cache.anchors.affected(ch.anchor, ch.from, ch.until)) {
			if ch.foreign && !recAt(q).foreign {
				continue // takes no line from it
			}
			if !reparse(q) {
				return false
			}
		}
	}
	return true
}

// sameSlice: a and b are the same bytes in memory.
func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// at returns the range's service converted at line: its last conversion
// when it was at that line, else converted (first time) or moved there
// (moveItem); failed: it does not convert alone.
func (rec *itemRec) at(line int, name string, c registries.Common, w *work) (it *svcItem, failed bool) {
	it = rec.last
	switch {
	case it == nil:
		p := &parse{file: name, fast: true}
		epLines := make([]int, len(rec.epRel))
		for j, l := range rec.epRel {
			epLines[j] = line + l
		}
		svc := p.service(0, rec.se, epLines, c)
		w.converted.Add(1)
		if p.failed {
			return nil, true
		}
		it = &svcItem{line: line, svc: svc}
		rec.last, rec.se = it, serviceEntry{}
	case it.line != line:
		it = moveItem(it, line, rec.epRel, name)
		w.converted.Add(1)
		rec.last = it
	}
	return it, false
}

// moveItem returns it converted at line: its endpoints' Origin names
// their new lines.
func moveItem(it *svcItem, line int, epRel []int, name string) *svcItem {
	out := &svcItem{line: line, svc: it.svc}
	out.svc.Endpoints = slices.Clone(it.svc.Endpoints)
	for j := range out.svc.Endpoints {
		out.svc.Endpoints[j].Origin = name + ":" + strconv.Itoa(line+epRel[j])
	}
	return out
}

// rootValues is what the full parse's decode counts besides the items':
// the root mapping, its services and their sequence.
const rootValues = 3

// parseWhole is the full parse of a file (Parse), its services as new
// items; the cache is emptied.
func parseWhole(name string, data []byte, c registries.Common, cache *itemCache, w *work) ([]*svcItem, error) {
	w.whole.Add(1)
	*cache = itemCache{}
	services, err := Parse(name, data, c)
	if err != nil {
		return nil, err
	}
	w.parsed.Add(uint64(len(services)))
	w.converted.Add(uint64(len(services)))
	out := make([]*svcItem, len(services))
	for i := range services {
		out[i] = &svcItem{svc: services[i]}
	}
	return out, nil
}

// piece is a range of the file: its bytes and the line it begins on.
type piece struct {
	b    []byte
	line int
}

// parseItem parses one range: a block item ("- ..." lines, from the
// beginning of its first line) or a flow mapping, alone or after ctx, the
// ranges of earlier services of the same sequence whose anchors it takes
// (anchors.go). ok is false when it does not parse as one valid service
// entry; missing is then the anchor it takes that neither it nor ctx
// defines, if that is why. taken is the anchors it took from ctx.
func parseItem(it piece, flow bool, ctx []piece) (rec *itemRec, taken []string, missing string, ok bool) {
	b := it.b
	if !flow && ctx == nil {
		if rec, ok := fastItem(b); ok {
			return rec, nil, "", true
		}
	}
	doc := b
	// The line of doc each of ctx begins on, then b's.
	starts := make([]int, 0, len(ctx)+1)
	if len(ctx) > 0 {
		var buf []byte
		if flow {
			buf = append(buf, '[')
		}
		for _, r := range ctx {
			starts = append(starts, 1+bytes.Count(buf, []byte{'\n'}))
			buf = append(buf, r.b...)
			if flow {
				// A flow item ends without a line break: the next
				// begins on a line of its own, where starts says.
				buf = append(buf, ",\n"...)
			}
		}
		starts = append(starts, 1+bytes.Count(buf, []byte{'\n'}))
		buf = append(buf, b...)
		if flow {
			buf = append(buf, ']')
		}
		doc = buf
	} else {
		starts = append(starts, 1)
	}
	root, probs := yamlconf.Parse("", doc)
	if len(probs) > 0 || root == nil {
		if len(probs) == 1 {
			missing = unknownAnchor(probs[0].Msg)
		}
		return nil, nil, missing, false
	}
	node := root
	if !flow || len(ctx) > 0 {
		if root.Kind != yaml.SequenceNode || len(root.Content) != len(ctx)+1 {
			return nil, nil, "", false
		}
		node = root.Content[len(ctx)]
	}
	if node.Kind != yaml.MappingNode {
		return nil, nil, "", false
	}
	d := yamlconf.NewDecoder("", "", len(doc))
	rec = &itemRec{size: len(b)}
	d.Decode("", node, node, &rec.se)
	if len(d.Problems()) > 0 {
		return nil, nil, "", false
	}
	rec.values = d.Values()
	first := starts[len(ctx)]
	rec.defines, rec.defSums, rec.defPlaces = anchorsIn(node, first)
	if len(ctx) > 0 {
		taken = takenAnchors(node)
	}
	// Each endpoint's line in the file, relative to the range's: an
	// endpoint taken from an earlier service (`endpoints: *e`) is where
	// that service has it.
	rec.epRel = make([]int, len(rec.se.Endpoints))
	for j := range rec.se.Endpoints {
		n, _ := yamlpath.Lookup(node, yamlpath.Index("endpoints", j))
		if n == nil {
			continue
		}
		if n.Line >= first {
			rec.epRel[j] = n.Line - first
			continue
		}
		k := sort.SearchInts(starts, n.Line+1) - 1
		rec.epRel[j] = ctx[k].line + n.Line - starts[k] - it.line
		rec.foreign = true
	}
	return rec, taken, "", true
}

// fastItem is parseItem on the fast path (fast.go) for a block item.
func fastItem(b []byte) (*itemRec, bool) {
	lines, ok := fastLines(b)
	if !ok || len(lines) == 0 || (lines[0].text != "-" && !strings.HasPrefix(lines[0].text, "- ")) {
		return nil, false
	}
	fp := &fastParser{lines: lines}
	item := fp.item(lines[0].indent)
	if item == nil || fp.bad || fp.pos != len(lines) {
		return nil, false
	}
	se, epLines, ok := decodeService(item)
	if !ok {
		return nil, false
	}
	// Without aliases a decode counts fewer values than the item has
	// bytes (fast.go takes none): twice as many is a bound.
	rec := &itemRec{size: len(b), se: se, epRel: epLines, values: 2 * len(b)}
	for j := range rec.epRel {
		rec.epRel[j]--
	}
	return rec, true
}
