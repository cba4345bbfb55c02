package aggregate

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/validate"
)

// shardState is one registry's normalized state: what it serves when
// visible, and what was kept out.
type shardState struct {
	services  map[string]*model.Service // by hostname; Sources = [registry]
	endpoints int
	conflicts []Conflict // Since unset
	// dups counts the services not served because their hostname (as
	// published or normalized) came earlier in the state: which one is
	// served depends on the order, so a state with any is never changed
	// by a delta in place (see offerDelta).
	dups int
}

// normalize is the gate every published state passes: it validates services, ports
// and endpoints, fills defaults, and quarantines each bad item alone. It is
// a pure function. The result shares with the input what normalization
// leaves unchanged (endpoint slices, ports, maps, strings: see
// normalizeEndpoints); neither side ever writes them (the model's
// immutability contract).
//
//   - A service with an invalid hostname, an unknown resolution or no valid
//     port, a hostname outside the registry's domain, or a hostname already
//     seen in this Replace is rejected whole.
//   - A port with a number outside 1..65535, an unknown protocol, or a name
//     or number already used is dropped; an empty protocol is TCP; an empty
//     name becomes "<protocol>-<number>" (e.g. "tcp-9000").
//   - An endpoint with a bad address (an IP address for EDS services; an IP
//     or hostname for DNS ones), an unknown health, or a port override that
//     names no port or is above 65535 is dropped, as is a second endpoint
//     with the same address and ports.
//   - The rules xDS clients apply (gate.go): addresses no proxy can use
//     drop their endpoint, as do a locality, cluster or network that is not
//     valid UTF-8; a label that is not valid UTF-8 or too large is dropped
//     alone; weights summing over 2^32-1 are scaled down proportionally.
//   - Defaults (registries.Common.EndpointDefaults, which the Publisher
//     applies first): weight 0 becomes 1, Source.Registry is the
//     registry, Source.Cluster defaults to the registry name, Locality to
//     the registry's locality.
//
// Ports are sorted by number, endpoints by address then ports.
func normalize(o RegistryOptions, in []model.Service, rejected []model.Rejection) shardState {
	st, _ := normalizeWith(o, in, rejected, nil)
	return st
}

// normMemo remembers, per published hostname, the last input service and
// what normalizeService made of it (under one RegistryOptions), so that a
// Replace normalizes again only the services whose input changed:
// registries publish their full state on every change. An unchanged input
// gives the very same *model.Service, which also keeps its pointer in the
// snapshot without a deep comparison.
type normMemo struct {
	gen     uint64 // numbers passes; entries not written by the last one are dropped
	entries map[string]memoEntry
	// withCS lists the published hostnames whose entry has conflicts, so
	// that a delta lists a state's conflicts without a walk of entries.
	withCS map[string]bool
	// Counted for tests: services looked at (compared with their entry or
	// normalized) and services normalized (normalizeService).
	visits, calls int
	// sources is the Sources of every service normalized: [registry],
	// one slice for all (immutable, as everything published).
	sources []string
}

type memoEntry struct {
	in  model.Service // the published value; its slices are immutable (model contract)
	out *model.Service
	cs  []Conflict
	gen uint64 // pass that last wrote the entry
}

// normalizeWith is normalize reusing the results of memo (nil: none) for
// inputs equal to those it holds. It returns the memo of this input (memo
// itself, updated in place, when it is not nil).
func normalizeWith(o RegistryOptions, in []model.Service, rejected []model.Rejection, memo *normMemo) (shardState, *normMemo) {
	st := shardState{services: make(map[string]*model.Service, len(in))}
	if memo == nil {
		memo = &normMemo{entries: make(map[string]memoEntry, len(in))}
	}
	memo.gen++
	gen := memo.gen
	if memo.withCS == nil {
		memo.withCS = map[string]bool{}
	}
	clear(memo.withCS)
	memo.visits += len(in)
	st.conflicts = registryConflicts(o.Name, rejected)
	domain := strings.ToLower(strings.TrimSuffix(o.Domain, "."))
	for i := range in {
		s := &in[i]
		var svc *model.Service
		var cs []Conflict
		switch m, ok := memo.entries[s.Hostname]; {
		case ok && m.gen == gen: // a hostname published twice: not memoized
			svc, cs = memo.normalize(o, domain, s)
			st.dups++
		case ok && sameInput(&m.in, s):
			svc, cs = m.out, m.cs
			m.gen = gen
			memo.entries[s.Hostname] = m
		default:
			svc, cs = memo.normalize(o, domain, s)
			memo.entries[s.Hostname] = memoEntry{in: *s, out: svc, cs: cs, gen: gen}
		}
		if len(cs) > 0 {
			memo.withCS[s.Hostname] = true
		}
		st.conflicts = append(st.conflicts, cs...)
		if svc == nil {
			continue
		}
		if _, dup := st.services[svc.Hostname]; dup {
			st.dups++
			st.conflicts = append(st.conflicts, newConflict(CategoryDuplicate, o.Name, svc.Hostname, svc.Hostname,
				"hostname published twice by the registry; the first is served"))
			continue
		}
		st.services[svc.Hostname] = svc
		st.endpoints += len(svc.Endpoints)
	}
	if len(memo.entries) > len(in) {
		maps.DeleteFunc(memo.entries, func(_ string, m memoEntry) bool { return m.gen != gen })
	}
	return st, memo
}

// normalize is normalizeService, counted.
func (m *normMemo) normalize(o RegistryOptions, domain string, s *model.Service) (*model.Service, []Conflict) {
	m.calls++
	if len(m.sources) != 1 || m.sources[0] != o.Name {
		m.sources = []string{o.Name}
	}
	return normalizeService(o, domain, m.sources, s)
}

// registryConflicts lists what the registry rejected as conflicts of
// registry name.
func registryConflicts(name string, rejected []model.Rejection) []Conflict {
	var out []Conflict
	for _, r := range rejected {
		r.Registry = name
		out = append(out, Conflict{Rejection: r, Category: CategoryRegistry})
	}
	return out
}

// sameInput reports whether normalizeService reads the same from a and b.
// Endpoint slices that are the same array are equal without a look (the
// model's immutability contract); others are compared element by element.
func sameInput(a, b *model.Service) bool {
	if a.Hostname != b.Hostname || a.Resolution != b.Resolution || !slices.Equal(a.Ports, b.Ports) ||
		a.Namespace != b.Namespace || !slices.Equal(a.ExportTo, b.ExportTo) {
		return false
	}
	return sameEndpoints(a.Endpoints, b.Endpoints)
}

// normalizeService normalizes one service of registry o (its Sources are
// sources). What it leaves unchanged is shared with s, not copied: its
// ports and endpoints (normalizeEndpoints).
func normalizeService(o RegistryOptions, domain string, sources []string, s *model.Service) (*model.Service, []Conflict) {
	var cs []Conflict
	reject := func(cat, host, reason string) (*model.Service, []Conflict) {
		return nil, append(cs, newConflict(cat, o.Name, host, host, reason))
	}
	host, err := normalizeHostname(s.Hostname)
	if err != nil {
		return reject(CategoryInvalid, s.Hostname, "service rejected: "+err.Error())
	}
	if domain != "" && host != domain && !strings.HasSuffix(host, "."+domain) {
		return reject(CategoryDomain, host, fmt.Sprintf("service rejected: hostname is outside the registry's domain %q", domain))
	}
	if s.Resolution != model.ResolutionEDS && s.Resolution != model.ResolutionDNS {
		return reject(CategoryInvalid, host, fmt.Sprintf("service rejected: unknown resolution %d", int(s.Resolution)))
	}
	if len(s.Ports) == 0 {
		return reject(CategoryInvalid, host, "service rejected: it has no ports")
	}

	// Ports.
	ports := make([]model.Port, 0, len(s.Ports))
	dropped := map[string]bool{} // names of ports dropped; overrides naming them are ignored
	renamed := ""                // new name of the first port that had none
	for _, p := range s.Ports {
		subject := fmt.Sprintf("port %s:%d", p.Name, p.Number)
		bad := func(cat, reason string) {
			cs = append(cs, newConflict(cat, o.Name, host, subject, "port dropped: "+reason))
			dropped[p.Name] = true
		}
		if p.Number < 1 || p.Number > 65535 {
			bad(CategoryInvalid, fmt.Sprintf("number %d is outside 1..65535", p.Number))
			continue
		}
		proto := model.ProtocolTCP
		if p.Protocol != "" {
			var err error
			if proto, err = model.ParseProtocol(string(p.Protocol)); err != nil {
				bad(CategoryInvalid, err.Error())
				continue
			}
		}
		name := p.Name
		if name == "" {
			name = strings.ToLower(string(proto)) + "-" + strconv.FormatUint(uint64(p.Number), 10)
		}
		if slices.ContainsFunc(ports, func(q model.Port) bool { return q.Name == name }) {
			bad(CategoryDuplicate, fmt.Sprintf("name %q is already used by another port", name))
			continue
		}
		if slices.ContainsFunc(ports, func(q model.Port) bool { return q.Number == p.Number }) {
			bad(CategoryDuplicate, fmt.Sprintf("number %d is already used by another port", p.Number))
			continue
		}
		if p.Name == "" && renamed == "" {
			renamed = name
		}
		ports = append(ports, model.Port{Name: name, Number: p.Number, Protocol: proto})
	}
	if len(ports) == 0 {
		return reject(CategoryInvalid, host, "service rejected: none of its ports is valid")
	}
	slices.SortFunc(ports, func(a, b model.Port) int { return cmp.Compare(a.Number, b.Number) })
	if slices.Equal(ports, s.Ports) {
		ports = slices.Clip(s.Ports)
	}

	out := &model.Service{
		Hostname:   host,
		Ports:      ports,
		Resolution: s.Resolution,
		Sources:    sources,
		Namespace:  cmp.Or(s.Namespace, o.Name),
		ExportTo:   s.ExportTo,
	}
	if len(out.ExportTo) == 0 {
		out.ExportTo = o.ExportTo
	}
	if err := validate.ExportTo(out.ExportTo); err != nil {
		cs = append(cs, newConflict(CategoryInvalid, o.Name, host, "exportTo", "exportTo ignored (every namespace sees the service): "+err.Error()))
		out.ExportTo = nil
	}
	out.Endpoints, cs = normalizeEndpoints(o, out, s.Endpoints, dropped, renamed, cs)
	return out, cs
}

// normalizeEndpoints returns in normalized for the service out, with a
// conflict appended to cs for each item dropped or altered. When
// normalization changes nothing (every endpoint keeps its values, already
// sorted, without a duplicate, weights that fit), it returns in itself:
// the model's contract makes a published slice immutable, and the gate
// never writes to the slice it returns, so the normalized service shares
// the registry's endpoints instead of holding a copy of each
// (docs/architecture.md §3.4). Otherwise it returns a new slice, and in is
// not modified.
func normalizeEndpoints(o RegistryOptions, out *model.Service, in []model.Endpoint, dropped map[string]bool, renamed string, cs []Conflict) ([]model.Endpoint, []Conflict) {
	if len(in) == 0 {
		return nil, cs
	}
	if unchangedEndpoints(o, out, in, dropped, renamed) {
		return slices.Clip(in), cs
	}
	host, ports := out.Hostname, out.Ports
	eps := make([]model.Endpoint, 0, len(in))
	seen := make(map[string]bool, len(in))
	for _, e := range in {
		ne, reason := normalizeEndpoint(o, out, e, dropped, renamed)
		subject := endpointSubject(e)
		if reason == "" {
			var bad map[string]string
			if ne.Labels, bad = checkLabels(ne.Labels); len(ne.Labels) == 0 {
				ne.Labels = nil
			}
			if len(bad) > 0 {
				for _, k := range slices.Sorted(maps.Keys(bad)) {
					cs = append(cs, newConflict(CategoryInvalid, o.Name, host, labelSubject(subject, k), "label dropped: "+bad[k]))
				}
			}
		}
		if reason != "" {
			cs = append(cs, newConflict(CategoryInvalid, o.Name, host, subject, "endpoint dropped: "+reason))
			continue
		}
		k := endpointKey(&ne, ports)
		if seen[k] {
			cs = append(cs, newConflict(CategoryDuplicate, o.Name, host, subject,
				"endpoint dropped: another endpoint has the same address and ports"))
			continue
		}
		seen[k] = true
		eps = append(eps, ne)
	}
	sortEndpoints(eps, ports)
	if sum, scaled := scaleWeights(eps); scaled {
		cs = append(cs, scaledConflict(o.Name, host, sum))
	}
	return eps, cs
}

// unchangedEndpoints reports whether normalizeEndpoints would return in
// as it is: every endpoint valid and left with equal values (maps nil
// where in's are, no label dropped), strictly increasing by address and
// ports (sorted, no duplicate), and weights whose sum fits.
func unchangedEndpoints(o RegistryOptions, svc *model.Service, in []model.Endpoint, dropped map[string]bool, renamed string) bool {
	var sum uint64
	for i := range in {
		e := &in[i]
		ne, reason := normalizeEndpoint(o, svc, *e, dropped, renamed)
		if reason != "" || !sameEndpoint(&ne, e) || (ne.Ports == nil) != (e.Ports == nil) || (ne.Labels == nil) != (e.Labels == nil) {
			return false
		}
		if _, bad := checkLabels(e.Labels); len(bad) > 0 {
			return false
		}
		if i > 0 && compareAddrPorts(&in[i-1], e, svc.Ports) >= 0 {
			return false
		}
		if sum += uint64(max(e.Weight, 1)); sum > maxWeightSum {
			return false
		}
	}
	return true
}

// normalizeEndpoint returns e normalized for svc, or why it is dropped.
// It shares e's Address, Ports and Labels when it leaves them unchanged;
// checkLabels runs apart.
func normalizeEndpoint(o RegistryOptions, svc *model.Service, e model.Endpoint, dropped map[string]bool, renamed string) (model.Endpoint, string) {
	addr, err := normalizeAddress(e.Address, svc.Resolution)
	if err != nil {
		return e, err.Error()
	}
	e.Address = addr
	if e.Health < model.Healthy || e.Health > model.Degraded {
		return e, fmt.Sprintf("unknown health %d", int(e.Health))
	}
	if len(e.Ports) > 0 {
		ports, reason := normalizeOverrides(svc, e.Ports, dropped, renamed)
		if reason != "" {
			return e, reason
		}
		e.Ports = ports
	}
	e = o.EndpointDefaults(e)
	if reason := checkStrings(&e); reason != "" {
		return e, reason
	}
	return e, ""
}

// normalizeOverrides checks an endpoint's port overrides against svc's
// ports: the override of the port that had no name is renamed, overrides
// of dropped ports are left out. It returns in itself when nothing is
// renamed or left out, nil when nothing is left, or why the endpoint is
// dropped.
func normalizeOverrides(svc *model.Service, in map[string]uint32, dropped map[string]bool, renamed string) (map[string]uint32, string) {
	changed := false
	for name, n := range in {
		if name == "" && renamed != "" {
			name, changed = renamed, true
		}
		if !slices.ContainsFunc(svc.Ports, func(p model.Port) bool { return p.Name == name }) {
			if dropped[name] {
				changed = true
				continue // the port itself is reported
			}
			return nil, fmt.Sprintf("port override %q names no port of the service", name)
		}
		if n > 65535 {
			return nil, fmt.Sprintf("port override %s=%d is outside 1..65535", name, n)
		}
	}
	if !changed {
		return in, ""
	}
	ports := make(map[string]uint32, len(in))
	for name, n := range in {
		if name == "" && renamed != "" {
			name = renamed
		}
		if slices.ContainsFunc(svc.Ports, func(p model.Port) bool { return p.Name == name }) {
			ports[name] = n // 0: the endpoint does not serve this port
		}
	}
	if len(ports) == 0 {
		return nil, ""
	}
	return ports, ""
}

func endpointSubject(e model.Endpoint) string {
	if e.Origin != "" {
		return e.Address + " (" + e.Origin + ")"
	}
	return e.Address
}

// normalizeHostname lowercases h, drops a trailing dot and checks that it is
// a DNS name: labels of 1..63 letters, digits, '-' or '_', not starting or
// ending with '-', 253 characters at most.
func normalizeHostname(h string) (string, error) {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if h == "" {
		return "", fmt.Errorf("empty hostname")
	}
	if len(h) > 253 {
		return "", fmt.Errorf("hostname %q is longer than 253 characters", h)
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return "", fmt.Errorf("hostname %q has an empty or over-long label", h)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "", fmt.Errorf("hostname %q has a label that starts or ends with '-'", h)
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("hostname %q has the invalid character %q", h, c)
			}
		}
	}
	return h, nil
}

// normalizeAddress checks an endpoint address and returns its canonical
// form: an IP address a proxy can connect to (checkIP) for EDS, or such an
// IP address or a hostname for DNS. An address in canonical form is
// returned as it is (the same string).
func normalizeAddress(a string, res model.Resolution) (string, error) {
	ip, err := netip.ParseAddr(a)
	if err == nil {
		if reason := checkIP(ip); reason != "" {
			return "", fmt.Errorf("address %q %s", a, reason)
		}
		var buf [64]byte
		if b := ip.Unmap().AppendTo(buf[:0]); string(b) != a {
			return string(b), nil
		}
		return a, nil // canonical already: shared, not copied
	}
	if res == model.ResolutionDNS {
		if h, err := normalizeHostname(a); err == nil {
			return h, nil
		}
		return "", fmt.Errorf("address %q is neither an IP address nor a hostname", a)
	}
	return "", fmt.Errorf("address %q is not an IP address", a)
}

// endpointKey identifies an endpoint by address and the port it uses for
// each service port.
func endpointKey(e *model.Endpoint, ports []model.Port) string {
	var b strings.Builder
	b.WriteString(e.Address)
	for _, p := range ports {
		b.WriteByte('|')
		n, _ := e.PortFor(p)
		b.WriteString(strconv.FormatUint(uint64(n), 10))
	}
	return b.String()
}

// sortEndpoints orders endpoints by address, then by the port used for each
// service port, then by source, so that equal inputs give equal slices.
func sortEndpoints(eps []model.Endpoint, ports []model.Port) {
	slices.SortStableFunc(eps, func(a, b model.Endpoint) int {
		return cmp.Or(
			compareAddrPorts(&a, &b, ports),
			cmp.Compare(a.Source.Registry, b.Source.Registry),
			cmp.Compare(a.Source.Cluster, b.Source.Cluster),
			cmp.Compare(a.Source.Network, b.Source.Network),
		)
	})
}

// compareAddrPorts orders endpoints by address, then by the port used for
// each service port: 0 means one endpointKey.
func compareAddrPorts(a, b *model.Endpoint, ports []model.Port) int {
	if c := cmp.Compare(a.Address, b.Address); c != 0 {
		return c
	}
	for _, p := range ports {
		an, _ := a.PortFor(p)
		bn, _ := b.PortFor(p)
		if c := cmp.Compare(an, bn); c != 0 {
			return c
		}
	}
	return 0
}
