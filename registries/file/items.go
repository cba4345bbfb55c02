package file

import (
	"hash/maphash"
	"slices"
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
// (split.go) or a range does not parse alone (an alias of an anchor in
// another service), and whenever anything in it is invalid, so that
// every error is reported as before with its file:line:col.

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
	size  int
	se    serviceEntry // until converted
	epRel []int        // each endpoint's line - the range's first line
	last  *svcItem     // its last conversion
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
	}
	if !ok {
		return parseWhole(name, data, c, cache, w)
	}
	// From here a failure takes the full parse, which empties the cache:
	// resplit may have rewritten cache.ranges in place.
	w.cut.Add(uint64(mid - a))
	// The items a..bOld of the last read are replaced by ranges[a:mid];
	// their parses are kept by hash for the ranges whose bytes they are.
	was := make(map[uint64]*itemRec, bOld-a)
	for k := a; k < bOld; k++ {
		h := cache.sums[k]
		was[h] = cache.recs[h]
		delete(cache.recs, h)
		delete(cache.names, cache.out[k].svc.Hostname)
	}
	sums := make([]uint64, 0, mid-a)
	items := make([]*svcItem, 0, mid-a)
	for _, rg := range ranges[a:mid] {
		b := data[rg.start:rg.end]
		h := maphash.Bytes(itemSeed, b)
		if cache.recs[h] != nil {
			return parseWhole(name, data, c, cache, w) // two services with the same bytes: a duplicate name
		}
		rec := was[h]
		if rec == nil || rec.size != len(b) {
			if rec, ok = parseItem(b, rg.flow); !ok {
				return parseWhole(name, data, c, cache, w)
			}
			w.parsed.Add(1)
		}
		it, failed := rec.at(rg.line, name, c, w)
		if failed || cache.names[it.svc.Hostname] {
			return parseWhole(name, data, c, cache, w)
		}
		cache.recs[h], cache.names[it.svc.Hostname] = rec, true
		sums, items = append(sums, h), append(items, it)
	}
	// The list returned is new (the last one is the Watch's to compare
	// with); the hashes are kept in place.
	out := make([]*svcItem, 0, len(ranges))
	out = append(out, cache.out[:a]...)
	out = append(out, items...)
	tail := len(out)
	out = append(out, cache.out[bOld:]...)
	if dl != 0 {
		// The items after the change: the same parses, on other lines.
		for k := tail; k < len(out); k++ {
			out[k], _ = cache.recs[cache.sums[bOld+k-tail]].at(ranges[k].line, name, c, w)
		}
	}
	cache.data, cache.form, cache.ranges, cache.out = data, form, ranges, out
	cache.sums = slices.Replace(cache.sums, a, bOld, sums...)
	return out, nil
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

// parseItem parses one range alone: a block item ("- ..." lines, from
// the beginning of its first line) or a flow mapping. ok is false when it
// does not parse alone as one valid service entry.
func parseItem(b []byte, flow bool) (*itemRec, bool) {
	if !flow {
		if rec, ok := fastItem(b); ok {
			return rec, true
		}
	}
	root, probs := yamlconf.Parse("", b)
	if len(probs) > 0 || root == nil {
		return nil, false
	}
	node := root
	if !flow {
		if root.Kind != yaml.SequenceNode || len(root.Content) != 1 {
			return nil, false
		}
		node = root.Content[0]
	}
	if node.Kind != yaml.MappingNode {
		return nil, false
	}
	d := yamlconf.NewDecoder("", "", len(b))
	rec := &itemRec{size: len(b)}
	d.Decode("", node, node, &rec.se)
	if len(d.Problems()) > 0 {
		return nil, false
	}
	// The range's first line is line 1 of b.
	rec.epRel = make([]int, len(rec.se.Endpoints))
	for j := range rec.se.Endpoints {
		if n, _ := yamlpath.Lookup(node, yamlpath.Index("endpoints", j)); n != nil {
			rec.epRel[j] = n.Line - 1
		}
	}
	return rec, true
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
	rec := &itemRec{size: len(b), se: se, epRel: epLines}
	for j := range rec.epRel {
		rec.epRel[j]--
	}
	return rec, true
}
