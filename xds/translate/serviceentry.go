package translate

import (
	"cmp"
	"encoding/binary"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/anypb"
	mcp "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/model"
)

// Incremental ServiceEntries, as incremental EDS (eds.go): a ServiceEntry
// lists every endpoint of its service, so rebuilding and marshalling it
// whole made each endpoint change of a large service cost tens of
// milliseconds. The translator keeps per service an seState: the model
// endpoints the entry was built from and, per endpoint, the deterministic
// encoding of its WorkloadEntry (as a ServiceEntry endpoints field). A
// rebuild encodes only the endpoints whose content changed and
// concatenates the parts between the encoded fields before and after the
// endpoints: byte for byte what proto.MarshalOptions{Deterministic: true}
// writes for the whole message (tested against serviceEntryReference).

var seEndpointsNum = fieldNum(&networking.ServiceEntry{}, "endpoints")

// seState is what the translator keeps per service to rebuild its
// ServiceEntry incrementally. Immutable once returned.
type seState struct {
	host       string
	resolution model.Resolution
	ports      []model.Port // sorted by number, one per number
	names      []string     // ServiceEntry port name of ports[i]
	exportTo   []string     // the entry's exportTo (mcpExportTo)
	head, tail []byte       // encoded fields before and after endpoints
	headHash   uint64
	tailHash   uint64
	eps        []model.Endpoint // the endpoints the entry was built from
	entries    []seEntry        // per eps index
	res        *mcp.Resource
}

// seEntry is the encoded ServiceEntry endpoint of one model endpoint;
// field is nil when the endpoint is left out (see serviceEntryResource).
type seEntry struct {
	field []byte // the endpoints field: tag, length, WorkloadEntry encoding
	key   string // address, network and ports: duplicates are served once
	hash  uint64 // FNV-1a of field
}

// sameWorkload reports whether two endpoints build the same ServiceEntry
// endpoint (every field workloadEntry reads).
func sameWorkload(a, b *model.Endpoint) bool {
	return a.Address == b.Address && a.Health == b.Health && a.Weight == b.Weight && a.Locality == b.Locality &&
		a.Source == b.Source && maps.Equal(a.Ports, b.Ports) && sameLabels(a.Labels, b.Labels)
}

// buildServiceEntry builds the ServiceEntry resource of svc (see
// serviceEntryResource); prev (may be nil) is the state of its previous
// build, whose unchanged endpoint encodings are reused. An unchanged
// entry is prev's resource.
func buildServiceEntry(svc *model.Service, prev *seState) (*mcp.Resource, *seState) {
	ports := slices.Clone(svc.Ports)
	slices.SortFunc(ports, func(a, b model.Port) int { return cmp.Compare(a.Number, b.Number) })
	ports = slices.CompactFunc(ports, func(a, b model.Port) bool { return a.Number == b.Number })
	exportTo := mcpExportTo(svc)
	if prev != nil && (prev.host != svc.Hostname || prev.resolution != svc.Resolution || !slices.Equal(prev.ports, ports) ||
		!slices.Equal(prev.exportTo, exportTo)) {
		prev = nil // the header and every endpoint's ports change
	}
	st := &seState{host: svc.Hostname, resolution: svc.Resolution, ports: ports, eps: svc.Endpoints, exportTo: exportTo}
	if prev != nil {
		st.names, st.head, st.tail, st.headHash, st.tailHash = prev.names, prev.head, prev.tail, prev.headHash, prev.tailHash
	} else if !st.header() {
		return nil, nil
	}

	// Per endpoint: the previous encoding at the same index, else (when
	// inserts or removals shifted indexes) one of an equal endpoint
	// elsewhere, else a new one.
	st.entries = make([]seEntry, len(svc.Endpoints))
	var byAddr map[string][]int // prev indexes by address, built on the first miss
	changed := prev == nil || len(prev.eps) != len(svc.Endpoints)
	for i := range svc.Endpoints {
		e := &svc.Endpoints[i]
		if prev != nil && i < len(prev.eps) {
			if pe := &prev.eps[i]; sameWorkload(pe, e) {
				st.entries[i] = prev.entries[i]
				continue
			} else if pe.Address == e.Address && len(prev.eps) == len(svc.Endpoints) {
				changed = true // changed in place: nothing shifted
				st.entries[i] = st.newEntry(e)
				continue
			}
		}
		changed = true
		found := false
		if prev != nil {
			if byAddr == nil {
				byAddr = make(map[string][]int, len(prev.eps))
				for j := range prev.eps {
					byAddr[prev.eps[j].Address] = append(byAddr[prev.eps[j].Address], j)
				}
			}
			for _, j := range byAddr[e.Address] {
				if sameWorkload(&prev.eps[j], e) {
					st.entries[i], found = prev.entries[j], true
					break
				}
			}
		}
		if !found {
			st.entries[i] = st.newEntry(e)
		}
	}
	labels := serviceEntryLabels(svc.Sources)
	if !changed && prev.res != nil && maps.Equal(labels, prev.res.GetMetadata().GetLabels()) {
		st.res = prev.res
		return st.res, st
	}

	// A duplicate (same address, network and ports) is served once, as in
	// EDS: the first occurrence wins.
	size := len(st.head) + len(st.tail)
	seen := make(map[string]struct{}, len(st.entries))
	served := make([]bool, len(st.entries))
	h := fnv.New64a()
	var word [8]byte
	binary.LittleEndian.PutUint64(word[:], st.headHash)
	h.Write(word[:])
	for i, en := range st.entries {
		if en.field == nil {
			continue
		}
		if _, dup := seen[en.key]; dup {
			continue
		}
		seen[en.key] = struct{}{}
		served[i] = true
		size += len(en.field)
		binary.LittleEndian.PutUint64(word[:], en.hash)
		h.Write(word[:])
	}
	binary.LittleEndian.PutUint64(word[:], st.tailHash)
	h.Write(word[:])
	body := make([]byte, 0, size)
	body = append(body, st.head...)
	for i, en := range st.entries {
		if served[i] {
			body = append(body, en.field...)
		}
	}
	body = append(body, st.tail...)
	st.res = &mcp.Resource{
		Metadata: &mcp.Metadata{
			Name:    MCPNamespace + "/" + svc.Hostname,
			Version: strconv.FormatUint(h.Sum64(), 10),
			Labels:  labels,
		},
		// Deterministic bytes: an unchanged service rebuilds an equal resource.
		Body: &anypb.Any{TypeUrl: serviceEntryAnyType, Value: body},
	}
	return st.res, st
}

// header sets the port names and encodes every field but endpoints; false
// if it cannot be encoded (not expected).
func (st *seState) header() bool {
	se := &networking.ServiceEntry{
		Hosts:    []string{st.host},
		Location: networking.ServiceEntry_MESH_INTERNAL,
		ExportTo: st.exportTo,
	}
	if st.resolution == model.ResolutionDNS {
		se.Resolution = networking.ServiceEntry_DNS
	} else {
		se.Resolution = networking.ServiceEntry_STATIC
	}
	st.names = make([]string, len(st.ports))
	used := map[string]bool{}
	for i, p := range st.ports {
		n := p.Name
		if !validPortName(n) || used[n] {
			n = strings.ToLower(string(cmp.Or(p.Protocol, model.ProtocolTCP))) + "-" + strconv.FormatUint(uint64(p.Number), 10)
		}
		used[n] = true
		st.names[i] = n
		se.Ports = append(se.Ports, &networking.ServicePort{Number: p.Number, Protocol: string(cmp.Or(p.Protocol, model.ProtocolTCP)), Name: n})
	}
	b, err := deterministic.Marshal(se)
	if err != nil {
		return false // not expected: a ServiceEntry always marshals
	}
	st.head, st.tail = splitFields(b, seEndpointsNum)
	st.headHash, st.tailHash = fnv64a(st.head), fnv64a(st.tail)
	return true
}

// mcpExportTo is the exportTo of svc's ServiceEntry for istiod, which
// reads it in the entry's namespace (MCPNamespace): "." becomes the
// service's own namespace (docs/architecture.md §3.7); none is "*".
func mcpExportTo(svc *model.Service) []string {
	if len(svc.ExportTo) == 0 {
		return []string{"*"}
	}
	out := make([]string, 0, len(svc.ExportTo))
	for _, ns := range svc.ExportTo {
		if ns == "." {
			ns = svc.Namespace
		}
		if !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	return out
}

// newEntry encodes the ServiceEntry endpoint of e.
func (st *seState) newEntry(e *model.Endpoint) seEntry {
	we := workloadEntry(e, st.ports, st.names)
	if we == nil {
		return seEntry{}
	}
	b, err := deterministic.Marshal(we)
	if err != nil {
		return seEntry{} // not expected: a WorkloadEntry always marshals
	}
	key := we.GetAddress() + "|" + we.GetNetwork()
	for _, n := range st.names {
		key += "|" + strconv.FormatUint(uint64(we.GetPorts()[n]), 10)
	}
	field := make([]byte, 0, fieldSize(seEndpointsNum, len(b)))
	field = appendField(field, seEndpointsNum, len(b), b)
	return seEntry{field: field, key: key, hash: fnv64a(field)}
}

// serviceEntryLabels are the metadata labels of a ServiceEntry of a
// service from sources.
func serviceEntryLabels(sources []string) map[string]string {
	labels := map[string]string{LabelManagedBy: "meshfed", LabelRegistries: strings.Join(sources, "_")}
	for _, s := range sources {
		if validLabel(LabelRegistryPrefix+s, "true") {
			labels[LabelRegistryPrefix+s] = "true"
		}
	}
	if !validLabel(LabelRegistries, labels[LabelRegistries]) {
		delete(labels, LabelRegistries)
	}
	return labels
}

func fnv64a(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}
