package translate

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"reflect"
	"slices"
	"strconv"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/model"
)

// Incremental EDS.
//
// A ClusterLoadAssignment of a large service is rebuilt when one of its
// endpoints changes. To keep that proportional to what changed, the
// translator keeps per service port a claState: the model endpoints the
// CLA was built from and, per endpoint, an lbEntry: the deterministic
// encoding of its LbEndpoint, which was built and validated once. A
// rebuild compares the new model endpoints with the previous ones as Go
// values and builds (and validates) only the LbEndpoints whose content
// changed; the others, and whole unchanged localities, are shared with the
// previous version. A CLA whose entries are all reused is the previous
// object.
//
// The CLA is served as a claResource, a proto.Message whose marshalling
// concatenates the encodings of its parts: byte for byte what
// proto.MarshalOptions{Deterministic: true} writes for the message
// (tested). Only encodings are kept (no LbEndpoint messages: little memory
// and nothing for the garbage collector to scan); the message itself is
// decoded from them on first use by reflection (protojson, proto.Equal,
// ValidateAll) and kept with the resource. Every built part is immutable
// once a CLA holding it is returned.

var (
	lbEndpointMetadataNum  = fieldNum(&endpoint.LbEndpoint{}, "metadata")
	localityLbEndpointsNum = fieldNum(&endpoint.LocalityLbEndpoints{}, "lb_endpoints")
	claEndpointsNum        = fieldNum(&endpoint.ClusterLoadAssignment{}, "endpoints")
)

func fieldNum(m proto.Message, name protoreflect.Name) protowire.Number {
	return m.ProtoReflect().Descriptor().Fields().ByName(name).Number()
}

var deterministic = proto.MarshalOptions{Deterministic: true}

// splitFields splits the deterministic encoding of a message, whose fields
// are written in field-number order, before the first field numbered n or
// above.
func splitFields(b []byte, n protowire.Number) (before, after []byte) {
	off := 0
	for off < len(b) {
		num, typ, l := protowire.ConsumeTag(b[off:])
		if l < 0 || num >= n {
			break
		}
		m := protowire.ConsumeFieldValue(num, typ, b[off+l:])
		if m < 0 {
			break
		}
		off += l + m
	}
	return b[:off:off], b[off:]
}

// appendField appends field n of wire type bytes holding parts.
func appendField(b []byte, n protowire.Number, size int, parts ...[]byte) []byte {
	b = protowire.AppendTag(b, n, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// fieldSize is the encoded size of a bytes field of n with a size-byte body.
func fieldSize(n protowire.Number, size int) int {
	return protowire.SizeTag(n) + protowire.SizeVarint(uint64(size)) + size
}

// metaEntry is an endpoint's filter metadata, shared by every endpoint with
// the same labels and source.
type metaEntry struct {
	pb    *core.Metadata
	field []byte // the LbEndpoint metadata field: tag, length, encoding
}

// metaCacheSize bounds each generation of the metadata cache.
const metaCacheSize = 4096

// metaCache interns endpoint metadata by content. It keeps two
// generations: an entry unused for a whole generation is forgotten, so the
// cache stays bounded while labels churn. Forgetting is harmless: built
// LbEndpoints keep their metadata, and a new one gets an equal copy.
type metaCache struct {
	cur, old map[string]*metaEntry
}

func (c *metaCache) get(e *model.Endpoint) (*metaEntry, error) {
	key := metaKey(e)
	if m, ok := c.cur[key]; ok {
		return m, nil
	}
	m, ok := c.old[key]
	if !ok {
		md, err := endpointMetadata(e)
		if err != nil {
			return nil, err
		}
		m = &metaEntry{pb: md}
		if md != nil {
			enc, err := deterministic.Marshal(md)
			if err != nil {
				return nil, fmt.Errorf("endpoint %s metadata: %w", e.Address, err)
			}
			m.field = appendField(nil, lbEndpointMetadataNum, len(enc), enc)
		}
	}
	if c.cur == nil || len(c.cur) >= metaCacheSize {
		c.old, c.cur = c.cur, make(map[string]*metaEntry)
	}
	c.cur[key] = m
	return m, nil
}

// metaKey identifies the content endpointMetadata reads: source and labels,
// each string length-prefixed.
func metaKey(e *model.Endpoint) string {
	b := make([]byte, 0, 64)
	str := func(s string) {
		b = protowire.AppendVarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	str(e.Source.Registry)
	str(e.Source.Cluster)
	str(e.Source.Network)
	for _, k := range slices.Sorted(maps.Keys(e.Labels)) {
		str(k)
		str(e.Labels[k])
	}
	return string(b)
}

// lbEntry is one built LbEndpoint, shared by every CLA version that serves
// the same endpoint content; entries are compared by their field's array.
type lbEntry struct {
	addr   string
	port   uint32
	weight uint32
	field  []byte // the LocalityLbEndpoints lb_endpoints field: tag, length, encoding
}

func (e lbEntry) same(o lbEntry) bool {
	return len(e.field) == len(o.field) && &e.field[0] == &o.field[0]
}

var healthStatuses = [...]core.HealthStatus{
	model.Healthy:   core.HealthStatus_HEALTHY,
	model.Unhealthy: core.HealthStatus_UNHEALTHY,
	model.Draining:  core.HealthStatus_DRAINING,
	model.Degraded:  core.HealthStatus_DEGRADED,
}

func weightOf(e *model.Endpoint) uint32 {
	if e.Weight == 0 {
		return 1
	}
	return e.Weight
}

// newEntry builds, validates and encodes the LbEndpoint of e on port.
func (mc *metaCache) newEntry(e *model.Endpoint, port uint32) (lbEntry, error) {
	md, err := mc.get(e)
	if err != nil {
		return lbEntry{}, err
	}
	var hs core.HealthStatus
	if h := int(e.Health); h >= 0 && h < len(healthStatuses) {
		hs = healthStatuses[h]
	}
	w := weightOf(e)
	pb := &endpoint.LbEndpoint{
		HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
			Address: SocketAddress(e.Address, port),
		}},
		HealthStatus:        hs,
		LoadBalancingWeight: wrapperspb.UInt32(w),
		Metadata:            md.pb,
	}
	if err := pb.ValidateAll(); err != nil {
		return lbEntry{}, fmt.Errorf("endpoint %s: %w", net.JoinHostPort(e.Address, strconv.FormatUint(uint64(port), 10)), err)
	}
	// The metadata is encoded once per content: encode the rest and splice.
	pb.Metadata = nil
	shell, err := deterministic.Marshal(pb)
	if err != nil {
		return lbEntry{}, fmt.Errorf("endpoint %s: %w", e.Address, err)
	}
	pre, post := splitFields(shell, lbEndpointMetadataNum)
	size := len(pre) + len(md.field) + len(post)
	field := make([]byte, 0, fieldSize(localityLbEndpointsNum, size))
	field = appendField(field, localityLbEndpointsNum, size, pre, md.field, post)
	return lbEntry{addr: e.Address, port: port, weight: w, field: field}, nil
}

// sameContent reports whether two endpoints at the same address, port and
// locality build the same LbEndpoint.
func sameContent(a, b *model.Endpoint) bool {
	return a.Health == b.Health && weightOf(a) == weightOf(b) && a.Source == b.Source && sameLabels(a.Labels, b.Labels)
}

func sameLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer() {
		return true
	}
	return maps.Equal(a, b)
}

// locState is one locality of a CLA (a LocalityLbEndpoints). Immutable
// once sealed.
type locState struct {
	loc       model.Locality
	entries   []lbEntry // sorted by address, port
	weightSum uint64
	epsSize   int    // Σ len(entries[i].field)
	pre, post []byte // encoded fields before and after lb_endpoints
	size      int    // encoded size of the LocalityLbEndpoints
}

// seal sets the locality weight (the sum of its endpoints' weights, at
// least 1; grpc-go ignores localities without one), and validates and
// encodes every field but lb_endpoints (validated one by one when built).
// A sum over maxWeightSum is an error: clients would reject the CLA.
func (l *locState) seal() error {
	if l.weightSum > maxWeightSum {
		return fmt.Errorf("locality %s: endpoint weights sum to %d, over %d", l.loc, l.weightSum, uint64(maxWeightSum))
	}
	pb := &endpoint.LocalityLbEndpoints{
		Locality:            &core.Locality{Region: l.loc.Region, Zone: l.loc.Zone, SubZone: l.loc.SubZone},
		LoadBalancingWeight: wrapperspb.UInt32(l.weight()),
	}
	err := pb.ValidateAll()
	var shell []byte
	if err == nil {
		shell, err = deterministic.Marshal(pb)
	}
	if err != nil {
		return fmt.Errorf("locality %s: %w", l.loc, err)
	}
	l.pre, l.post = splitFields(shell, localityLbEndpointsNum)
	l.size = len(l.pre) + l.epsSize + len(l.post)
	return nil
}

// weight is the locality's load-balancing weight.
func (l *locState) weight() uint32 { return uint32(max(1, l.weightSum)) }

// clone returns an unsealed copy of l whose entries may be replaced.
func (l *locState) clone() *locState {
	c := *l
	c.entries = slices.Clone(l.entries)
	return &c
}

// slot is where a model endpoint's entry sits in a CLA: locality and index,
// loc -1 when the endpoint is not served on the port (or a duplicate).
type slot struct{ loc, idx int32 }

// claState is what the translator keeps per service port to rebuild its
// CLA incrementally.
type claState struct {
	port  model.Port
	eps   []model.Endpoint // the endpoints res was built from
	slots []slot           // per eps index
	res   *claResource
}

// newCLAResource assembles the CLA name of sealed localities; prev (may be
// nil) is a CLA of the same name whose encoded fields are reused.
func newCLAResource(name string, locs []*locState, prev *claResource) (*claResource, error) {
	c := &claResource{name: name, locs: locs}
	if prev != nil && prev.name == name {
		c.head, c.tail = prev.head, prev.tail
	} else {
		// Every field but endpoints (validated part by part).
		cla := &endpoint.ClusterLoadAssignment{ClusterName: name}
		err := cla.ValidateAll()
		var shell []byte
		if err == nil {
			shell, err = deterministic.Marshal(cla)
		}
		if err != nil {
			return nil, err
		}
		c.head, c.tail = splitFields(shell, claEndpointsNum)
	}
	c.size = len(c.head) + len(c.tail)
	var sum uint64
	for _, l := range locs {
		c.size += fieldSize(claEndpointsNum, l.size)
		sum += uint64(l.weight())
	}
	if sum > maxWeightSum {
		return nil, fmt.Errorf("locality weights sum to %d, over %d", sum, uint64(maxWeightSum))
	}
	return c, nil
}

// buildCLA builds the ClusterLoadAssignment of one service port: endpoints
// grouped by locality (sorted), each sorted by address and port, each
// locality weighted by the sum of its endpoints' weights (at least 1;
// grpc-go ignores localities without a weight). An address:port listed
// twice is served once (grpc-go rejects duplicates); the first occurrence
// wins. prev (may be nil) is the state of the previous build of the same
// cluster: its unchanged parts are reused, and if nothing changed the
// returned state holds prev's CLA.
func (mc *metaCache) buildCLA(name string, svc *model.Service, p model.Port, prev *claState) (*claState, error) {
	if prev != nil && prev.res.name != name {
		prev = nil
	}
	if prev != nil && prev.port == p {
		if st, ok, err := mc.updateCLA(prev, svc.Endpoints); ok || err != nil {
			return st, err
		}
	}
	return mc.rebuildCLA(name, svc.Endpoints, p, prev)
}

// updateCLA is the fast path for the same service port: the endpoints are
// those of prev at the same positions, addresses, ports and localities,
// some with new content. It returns false if they are not.
func (mc *metaCache) updateCLA(prev *claState, eps []model.Endpoint) (*claState, bool, error) {
	if len(eps) != len(prev.eps) {
		return nil, false, nil
	}
	if len(eps) == 0 || &eps[0] == &prev.eps[0] {
		return prev, true, nil // the same (immutable) endpoints
	}
	p := prev.port
	var changed []int
	for i := range eps {
		a, b := &prev.eps[i], &eps[i]
		if a.Address != b.Address || a.Locality != b.Locality {
			return nil, false, nil
		}
		if len(a.Ports) != 0 || len(b.Ports) != 0 {
			pa, oka := a.PortFor(p)
			pb, okb := b.PortFor(p)
			if pa != pb || oka != okb {
				return nil, false, nil
			}
		}
		if prev.slots[i].loc >= 0 && !sameContent(a, b) {
			changed = append(changed, i)
		}
	}
	if len(changed) == 0 {
		return &claState{port: p, eps: eps, slots: prev.slots, res: prev.res}, true, nil
	}
	locs := slices.Clone(prev.res.locs)
	cloned := make([]bool, len(locs))
	for _, i := range changed {
		s := prev.slots[i]
		l := locs[s.loc]
		if !cloned[s.loc] {
			l = l.clone()
			locs[s.loc], cloned[s.loc] = l, true
		}
		old := l.entries[s.idx]
		e, err := mc.newEntry(&eps[i], old.port)
		if err != nil {
			return nil, true, err
		}
		l.entries[s.idx] = e
		l.weightSum += uint64(e.weight)
		l.weightSum -= uint64(old.weight)
		l.epsSize += len(e.field) - len(old.field)
	}
	for i, l := range locs {
		if cloned[i] {
			if err := l.seal(); err != nil {
				return nil, true, err
			}
		}
	}
	res, err := newCLAResource(prev.res.name, locs, prev.res)
	if err != nil {
		return nil, true, err
	}
	return &claState{port: p, eps: eps, slots: prev.slots, res: res}, true, nil
}

type epKey struct {
	addr string
	port uint32
}

// rebuildCLA groups and sorts every endpoint again, reusing prev's entries
// (by address and port) and localities where their content is unchanged.
func (mc *metaCache) rebuildCLA(name string, eps []model.Endpoint, p model.Port, prev *claState) (*claState, error) {
	type prevAt struct {
		i int // index in prev.eps
		e lbEntry
	}
	var old map[epKey]prevAt
	if prev != nil {
		old = make(map[epKey]prevAt, len(prev.eps))
		for i, s := range prev.slots {
			if s.loc >= 0 {
				e := prev.res.locs[s.loc].entries[s.idx]
				old[epKey{e.addr, e.port}] = prevAt{i, e}
			}
		}
	}
	type group struct {
		loc   model.Locality
		items []claItem
	}
	var groups []*group
	byLoc := map[model.Locality]*group{}
	seen := make(map[epKey]bool, len(eps))
	for i := range eps {
		e := &eps[i]
		port, ok := claPort(e, p, seen)
		if !ok {
			continue
		}
		k := epKey{e.Address, port}
		var ent lbEntry
		if o, ok := old[k]; ok && sameContent(&prev.eps[o.i], e) {
			ent = o.e
		} else {
			var err error
			if ent, err = mc.newEntry(e, port); err != nil {
				return nil, err
			}
		}
		g := byLoc[e.Locality]
		if g == nil {
			g = &group{loc: e.Locality}
			byLoc[e.Locality] = g
			groups = append(groups, g)
		}
		g.items = append(g.items, claItem{i, ent})
	}
	slices.SortFunc(groups, func(a, b *group) int { return compareLocality(a.loc, b.loc) })
	byAddr := func(a, b claItem) int {
		return cmp.Or(cmp.Compare(a.e.addr, b.e.addr), cmp.Compare(a.e.port, b.e.port))
	}

	slots := make([]slot, len(eps))
	for i := range slots {
		slots[i].loc = -1
	}
	var prevLocs []*locState
	if prev != nil {
		prevLocs = prev.res.locs
	}
	unchanged := prev != nil && len(groups) == len(prevLocs)
	locs := make([]*locState, len(groups))
	for gi, g := range groups {
		if !slices.IsSortedFunc(g.items, byAddr) {
			slices.SortFunc(g.items, byAddr)
		}
		for j, it := range g.items {
			slots[it.i] = slot{loc: int32(gi), idx: int32(j)}
		}
		if gi < len(prevLocs) && sameEntries(prevLocs[gi], g.loc, g.items) {
			locs[gi] = prevLocs[gi]
			continue
		}
		unchanged = false
		l := &locState{loc: g.loc, entries: make([]lbEntry, len(g.items))}
		for j, it := range g.items {
			l.entries[j] = it.e
			l.weightSum += uint64(it.e.weight)
			l.epsSize += len(it.e.field)
		}
		if err := l.seal(); err != nil {
			return nil, err
		}
		locs[gi] = l
	}
	if unchanged {
		return &claState{port: p, eps: eps, slots: slots, res: prev.res}, nil
	}
	var prevRes *claResource
	if prev != nil {
		prevRes = prev.res
	}
	res, err := newCLAResource(name, locs, prevRes)
	if err != nil {
		return nil, err
	}
	return &claState{port: p, eps: eps, slots: slots, res: res}, nil
}

// claPort is the port endpoint e is served on in the CLA of service port
// p, false when it is not: it does not serve p, or an earlier endpoint
// (recorded in seen) took its address and port (grpc-go rejects
// duplicates; the first occurrence wins). EDSMember explains it.
func claPort(e *model.Endpoint, p model.Port, seen map[epKey]bool) (uint32, bool) {
	port, ok := e.PortFor(p)
	if !ok {
		return 0, false
	}
	k := epKey{e.Address, port}
	if seen[k] {
		return port, false
	}
	seen[k] = true
	return port, true
}

// claItem is a served endpoint while a CLA is rebuilt.
type claItem struct {
	i int // index in the service's endpoints
	e lbEntry
}

// sameEntries reports whether locality l holds exactly the entries of
// items at loc.
func sameEntries(l *locState, loc model.Locality, items []claItem) bool {
	if l.loc != loc || len(l.entries) != len(items) {
		return false
	}
	for j, it := range items {
		if !l.entries[j].same(it.e) {
			return false
		}
	}
	return true
}
