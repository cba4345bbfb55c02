package translate

import (
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/ads"
)

// Scoping (docs/architecture.md §3.7): an Envoy proxy sees the services
// its Sidecar imports and exportTo shows its namespace, as Istio's
// SidecarScope (pilot/pkg/model/sidecar.go, push_context.go):
//
//   - the Sidecar that selects the proxy: in its namespace, the oldest
//     whose workloadSelector its labels carry, else the oldest without a
//     selector, else the oldest without a selector in the root namespace
//     (RootNamespace, istio-system by default), else none;
//   - a service is visible when its exportTo (model.Service.ExportTo)
//     shows it to the proxy's namespace and, with a Sidecar, when an
//     egress host imports it: "ns/host", "*/host", "./host" (the proxy's
//     namespace), "*.suffix" and "*" names, "~ns/host" excluding;
//   - a VirtualService or DestinationRule whose exportTo does not show it
//     to the proxy's namespace does not apply to it;
//   - http and tcp matches with sourceLabels or sourceNamespace apply to
//     the proxies that meet them.
//
// Proxies that see the same thing share one view: its key is the
// proxy's namespace, its Sidecar and which source matches it meets.
// A proxy without a namespace, and one that sees everything shared
// (no Sidecar, everything exported, no source match), reads the
// collections unscoped, as before scoping existed. A view covers the
// Envoy clusters, listeners and route configurations; endpoints are
// named by clusters, and proxyless gRPC clients subscribe by name, so
// neither is scoped.

// DefaultRootNamespace is Istio's root namespace, whose Sidecar without
// a workloadSelector is the default of every namespace without one.
const DefaultRootNamespace = "istio-system"

// scopedKinds are the collections a view covers.
var scopedKinds = []Kind{
	{Class: ClassEnvoy, TypeURL: ClusterType},
	{Class: ClassEnvoy, TypeURL: ListenerType},
	{Class: ClassEnvoy, TypeURL: RouteType},
}

// scopeIndex is what scoping reads of one config snapshot.
type scopeIndex struct {
	cfg *model.ConfigSnapshot
	// sidecars by namespace: those with a workloadSelector first, each
	// group oldest first (the order Istio picks in).
	sidecars map[string][]*model.ConfigObject
	// sources are the distinct source conditions of matches
	// (sourceNamespace, sourceLabels), canonical strings, sorted.
	sources []sourceCond
	// restricted: some VirtualService or DestinationRule does not export
	// to every namespace.
	restricted bool
}

type sourceCond struct {
	key    string
	ns     string
	labels map[string]string
}

func newScopeIndex(cfg *model.ConfigSnapshot) *scopeIndex {
	idx := &scopeIndex{cfg: cfg, sidecars: map[string][]*model.ConfigObject{}}
	seen := map[string]bool{}
	addCond := func(ns string, labels map[string]string) {
		if ns == "" && len(labels) == 0 {
			return
		}
		var b strings.Builder
		b.WriteString(ns)
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			b.WriteString("\x00" + k + "=" + labels[k])
		}
		if k := b.String(); !seen[k] {
			seen[k] = true
			idx.sources = append(idx.sources, sourceCond{key: k, ns: ns, labels: labels})
		}
	}
	for _, o := range cfg.Objects() {
		switch sp := o.Spec.(type) {
		case *networking.Sidecar:
			idx.sidecars[o.Namespace] = append(idx.sidecars[o.Namespace], o)
		case *networking.VirtualService:
			idx.restricted = idx.restricted || !model.ExportsAll(sp.GetExportTo())
			for _, r := range sp.GetHttp() {
				for _, m := range r.GetMatch() {
					addCond(m.GetSourceNamespace(), m.GetSourceLabels())
				}
			}
			for _, r := range sp.GetTcp() {
				for _, m := range r.GetMatch() {
					addCond(m.GetSourceNamespace(), m.GetSourceLabels())
				}
			}
		case *networking.DestinationRule:
			idx.restricted = idx.restricted || !model.ExportsAll(sp.GetExportTo())
		}
	}
	for _, scs := range idx.sidecars {
		slices.SortStableFunc(scs, func(a, b *model.ConfigObject) int {
			as, bs := a.Spec.(*networking.Sidecar).GetWorkloadSelector() != nil, b.Spec.(*networking.Sidecar).GetWorkloadSelector() != nil
			if as != bs {
				if as {
					return -1
				}
				return 1
			}
			return model.CompareAge(a, b)
		})
	}
	slices.SortFunc(idx.sources, func(a, b sourceCond) int { return strings.Compare(a.key, b.key) })
	return idx
}

// sidecarFor is the Sidecar that selects p (nil: none), Istio's
// precedence.
func (idx *scopeIndex) sidecarFor(p Proxy, root string) *model.ConfigObject {
	for _, o := range idx.sidecars[p.Namespace] {
		ws := o.Spec.(*networking.Sidecar).GetWorkloadSelector()
		if ws == nil || model.Selects(ws.GetLabels(), p.Labels) {
			return o
		}
	}
	for _, o := range idx.sidecars[root] {
		if o.Spec.(*networking.Sidecar).GetWorkloadSelector() == nil {
			return o
		}
	}
	return nil
}

// sourceSig names the source conditions p meets ("" none), by a hash of
// their keys: stable while those conditions stay in the config.
func (idx *scopeIndex) sourceSig(p Proxy) string {
	h := fnv.New64a()
	n := 0
	for _, c := range idx.sources {
		if p.meets(c.labels, c.ns) {
			h.Write([]byte(c.key))
			h.Write([]byte{0xff})
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return strconv.FormatUint(h.Sum64(), 36)
}

// egress is a Sidecar's egress hosts, as Istio classifies them per
// namespace ("*" every namespace), per egress listener.
type egress []map[string]*egressHosts

type egressHosts struct{ hosts, excluded []string }

// egressOf reads sc's egress hosts for a proxy in namespace ns; a Sidecar
// without egress imports "*/*", as Istio's.
func egressOf(sc *networking.Sidecar, ns string) egress {
	listeners := sc.GetEgress()
	if len(listeners) == 0 {
		listeners = []*networking.IstioEgressListener{{Hosts: []string{"*/*"}}}
	}
	out := make(egress, 0, len(listeners))
	for _, l := range listeners {
		m := map[string]*egressHosts{}
		for _, h := range l.GetHosts() {
			hns, name, ok := strings.Cut(h, "/")
			if !ok {
				continue
			}
			excluded := strings.HasPrefix(hns, "~")
			if excluded {
				if hns = hns[1:]; hns == "" {
					hns = "*"
				}
			}
			if hns == "." {
				hns = ns
			}
			e := m[hns]
			if e == nil {
				e = &egressHosts{}
				m[hns] = e
			}
			if excluded {
				e.excluded = append(e.excluded, name)
			} else {
				e.hosts = append(e.hosts, name)
			}
		}
		out = append(out, m)
	}
	return out
}

// imports reports whether some egress listener imports host of
// namespace ns (Istio's selectServices).
func (e egress) imports(ns, host string) bool {
	matches := func(list []string) bool {
		return slices.ContainsFunc(list, func(p string) bool { return model.HostMatches(p, host) })
	}
	for _, m := range e {
		own, wild := m[ns], m["*"]
		if (own != nil && matches(own.excluded)) || (wild != nil && matches(wild.excluded)) {
			continue
		}
		if (own != nil && matches(own.hosts)) || (wild != nil && matches(wild.hosts)) {
			return true
		}
	}
	return false
}

// scopeView is one view: what the proxies of one key see.
type scopeView struct {
	key     string
	proxy   Proxy               // a proxy of the key (they all see the same)
	sidecar *model.ConfigObject // the Sidecar that selects them; nil: none
	egress  egress              // the Sidecar's hosts for the proxy's namespace
	// all: the view starts from every resource (no Sidecar) and hides
	// what the proxy may not see; else it lists what it may.
	all bool
	// shown: the hosts the view shows (all false) or hides (all true).
	shown map[string]bool
	// own: hosts built for this view (VirtualService or DestinationRule
	// not exported to it, or source matches it meets).
	own map[string]built
	// names: per host, the cluster names the view has entries for.
	names map[string][]string
	// ports: per host, the ports it was counted on.
	ports map[string][]uint32
	// entries: what the store holds for the view.
	entries map[Kind]map[string]ads.ViewEntry
	// seen: the entries a full refresh set (the others are gone).
	seen map[Kind]map[string]bool
	// fresh: made since the last DropViews.
	fresh bool
	// With a Sidecar, the hosts the VirtualServices of the hosts its
	// egress imports route to are imported too (Istio's
	// collectImportedServices): imports counts them, dests holds what
	// each such host added.
	imports map[string]int
	dests   map[string][]string
}

// scope brings the scoping state to the snapshot just translated: the
// index of its config, and every view over the hosts touched and the
// ports dirty (all of them when the config changed).
func (b *build) scope(cfg *model.ConfigSnapshot, wasPrivate bool, dirty map[uint32]bool) {
	t := b.t
	full := t.scopes == nil || t.scopes.cfg != cfg
	if full {
		t.scopes = newScopeIndex(cfg)
		t.epoch++
	}
	if (len(t.private) > 0) != wasPrivate {
		t.epoch++
	}
	for _, k := range slices.Sorted(maps.Keys(t.views)) {
		v := t.views[k]
		if !full && len(b.touched) == 0 && len(dirty) == 0 {
			break
		}
		if full {
			was := v.all
			t.resetView(v)
			if v.all != was {
				clear(v.entries) // the store starts the view again (ads.ViewChange.All)
			}
		}
		if up := b.refreshView(v, b.touched, dirty, full); len(up.Changes) > 0 {
			t.viewUps = append(t.viewUps, up)
		}
	}
}

// SetRootNamespace sets the namespace whose Sidecar without a
// workloadSelector is the default of every namespace ("" is
// DefaultRootNamespace).
func (t *Translator) SetRootNamespace(ns string) {
	if ns == "" {
		ns = DefaultRootNamespace
	}
	t.root = ns
}

// ScopeKey is the view a proxy reads: "" unscoped (the collections as
// they are), else a key ViewFor builds.
func (t *Translator) ScopeKey(p Proxy) string {
	if p.Namespace == "" || t.scopes == nil {
		return ""
	}
	sc := t.scopes.sidecarFor(p, t.root)
	sig := t.scopes.sourceSig(p)
	if sc == nil && sig == "" && len(t.private) == 0 && !t.scopes.restricted {
		return ""
	}
	key := p.Namespace + "|"
	if sc != nil {
		key += sc.Namespace + "/" + sc.Name
	}
	return key + "|" + sig
}

// ScopeEpoch changes whenever the key of some proxy may have changed (a
// Sidecar, exportTo or source match changed, or the first or last
// service not exported everywhere came or went): the owner then asks
// every stream's key again (ads.Server.Rescope).
func (t *Translator) ScopeEpoch() uint64 { return t.epoch }

// ViewFor returns the view updates that create the view of key for p
// (nil when it exists, or for key "").
func (t *Translator) ViewFor(key string, p Proxy) []ads.ViewUpdate {
	if key == "" || t.views[key] != nil {
		return nil
	}
	v := &scopeView{key: key, proxy: p, entries: map[Kind]map[string]ads.ViewEntry{}, fresh: true}
	t.views[key] = v
	b := &build{t: t, snap: t.snap, hostCfg: t.hostCfg}
	t.resetView(v)
	return []ads.ViewUpdate{b.refreshView(v, nil, nil, true)}
}

// DropViews forgets the views not in keep and returns their drops. A
// view made since the last call is kept (its stream may not have joined
// it yet).
func (t *Translator) DropViews(keep map[string]int) []ads.ViewUpdate {
	var out []ads.ViewUpdate
	for k, v := range t.views {
		if v.fresh {
			v.fresh = false
			continue
		}
		if _, ok := keep[k]; !ok {
			delete(t.views, k)
			out = append(out, ads.ViewUpdate{Key: k, Drop: true})
		}
	}
	return out
}

// ViewUpdates returns and forgets the view updates of the last
// Translate; the owner applies them with its Changes
// (ads.Server.ApplyViews).
func (t *Translator) ViewUpdates() []ads.ViewUpdate {
	out := t.viewUps
	t.viewUps = nil
	return out
}

// Scope describes a view for debugging: its Sidecar and the hosts it
// shows ("*" first when it starts from everything, then "-host" for
// hidden ones).
func (t *Translator) Scope(key string) (sidecar string, hosts []string, ok bool) {
	v := t.views[key]
	if v == nil {
		return "", nil, false
	}
	if v.sidecar != nil {
		sidecar = v.sidecar.Namespace + "/" + v.sidecar.Name
	}
	if v.all {
		hosts = append(hosts, "*")
		for _, h := range slices.Sorted(maps.Keys(v.shown)) {
			hosts = append(hosts, "-"+h)
		}
		return sidecar, hosts, true
	}
	return sidecar, slices.Sorted(maps.Keys(v.shown)), true
}

// resetView reads v's Sidecar from the current config.
func (t *Translator) resetView(v *scopeView) {
	v.sidecar = nil
	if t.scopes != nil {
		v.sidecar = t.scopes.sidecarFor(v.proxy, t.root)
	}
	v.egress = nil
	if v.sidecar != nil {
		v.egress = egressOf(v.sidecar.Spec.(*networking.Sidecar), v.proxy.Namespace)
	}
	v.all = v.sidecar == nil
	v.shown, v.own, v.names, v.ports = map[string]bool{}, map[string]built{}, map[string][]string{}, map[string][]uint32{}
}

// visible reports whether the proxies of v may see svc: exported to
// their namespace, and with a Sidecar imported by an egress host or as
// a destination of an imported host's VirtualService.
func (v *scopeView) visible(svc *model.Service) bool {
	return v.egressVisible(svc) || (v.sidecar != nil && v.imports[svc.Hostname] > 0 && model.Exported(svc.ExportTo, svc.Namespace, v.proxy.Namespace))
}

// egressVisible is visible without the destinations of VirtualServices.
func (v *scopeView) egressVisible(svc *model.Service) bool {
	ns := v.proxy.Namespace
	if !model.Exported(svc.ExportTo, svc.Namespace, ns) {
		return false
	}
	return v.sidecar == nil || v.egress.imports(svc.Namespace, svc.Hostname)
}

// destsOf lists the hosts host imports into v (sorted): the
// destinations of its VirtualService when v's Sidecar imports it and the
// VirtualService applies to v's proxies.
func (t *Translator) destsOf(v *scopeView, host string) []string {
	st := t.services[host]
	if v.sidecar == nil || st == nil || len(st.deps) == 0 || !v.egressVisible(st.svc) || !exportedTo(st.applied.vs, v.proxy.Namespace) {
		return nil
	}
	return slices.Sorted(maps.Keys(st.deps))
}

// countImports recomputes v's imports over every host.
func (t *Translator) countImports(v *scopeView) {
	v.imports, v.dests = map[string]int{}, map[string][]string{}
	for h := range t.services {
		if ds := t.destsOf(v, h); len(ds) > 0 {
			v.dests[h] = ds
			for _, d := range ds {
				v.imports[d]++
			}
		}
	}
}

// shows reports whether v shows host.
func (v *scopeView) shows(host string) bool { return v.shown[host] != v.all }

func (v *scopeView) setShown(host string, shown bool) {
	if shown != v.all {
		v.shown[host] = true
	} else {
		delete(v.shown, host)
	}
}

// exportedTo reports whether a rule applies to a proxy of namespace ns.
func exportedTo(o *model.ConfigObject, ns string) bool {
	if o == nil {
		return true
	}
	var to []string
	switch sp := o.Spec.(type) {
	case *networking.VirtualService:
		to = sp.GetExportTo()
	case *networking.DestinationRule:
		to = sp.GetExportTo()
	}
	return model.Exported(to, o.Namespace, ns)
}

// meetsSourceMatch reports whether p meets a match of vs with source
// conditions (its routes then differ from the shared ones).
func meetsSourceMatch(vs *networking.VirtualService, p *Proxy) bool {
	met := func(labels map[string]string, ns string) bool {
		return (ns != "" || len(labels) > 0) && p.meets(labels, ns)
	}
	for _, r := range vs.GetHttp() {
		for _, m := range r.GetMatch() {
			if met(m.GetSourceLabels(), m.GetSourceNamespace()) {
				return true
			}
		}
	}
	for _, r := range vs.GetTcp() {
		for _, m := range r.GetMatch() {
			if met(m.GetSourceLabels(), m.GetSourceNamespace()) {
				return true
			}
		}
	}
	return false
}

// ownConfig is the traffic config of st the proxies of v get when it
// differs from what every client shares, and whether it does.
func (v *scopeView) ownConfig(st *svcState) (hostConfig, bool) {
	hc := st.applied
	ns := v.proxy.Namespace
	own := hc
	if !exportedTo(hc.vs, ns) {
		own.vs = nil
	}
	if !exportedTo(hc.dr, ns) {
		own.dr = nil
	}
	return own, own != hc || (own.vs != nil && meetsSourceMatch(own.virtualService(), &v.proxy))
}

// refreshView brings v to the translator's state for the hosts touched
// and the ports they are on, if the view shows or showed them (every
// host and port, dirty ones included, when full), and returns the
// update of its entries.
func (b *build) refreshView(v *scopeView, touched map[string]bool, dirty map[uint32]bool, full bool) ads.ViewUpdate {
	t := b.t
	up := ads.ViewUpdate{Key: v.key, Changes: map[Kind]*ads.ViewChange{}}
	// A host whose imported destinations changed may change others'
	// visibility: the view is computed again whole (rare: a route's
	// destinations, not its endpoints).
	for h := range touched {
		if !full && !slices.Equal(t.destsOf(v, h), v.dests[h]) {
			full = true
		}
	}
	if full && v.sidecar != nil {
		t.countImports(v)
	}
	ports := map[uint32]bool{}
	hosts := touched
	if full {
		hosts = map[string]bool{}
		for h := range t.services {
			hosts[h] = true
		}
		for h := range v.names {
			hosts[h] = true
		}
		for p := range t.ports {
			ports[p] = true
		}
		for _, k := range scopedKinds {
			for n := range t.current[k] {
				if k.TypeURL != ClusterType {
					if p, ok := portOfName(k, n); ok {
						ports[p] = true
					}
				}
			}
			for n := range v.entries[k] {
				if p, ok := portOfName(k, n); ok {
					ports[p] = true
				}
			}
		}
	}
	if full {
		for p := range dirty {
			ports[p] = true
		}
		v.seen = map[Kind]map[string]bool{}
		for _, k := range scopedKinds {
			viewChange(&up, k, v.all) // the mode of every collection
			v.seen[k] = map[string]bool{}
		}
	}
	cds := KindOf(ClassEnvoy, ClusterType)
	for h := range hosts {
		st := t.services[h]
		want := map[string]ads.ViewEntry{}
		_, wasOwn := v.own[h]
		wasShown := v.shows(h) || wasOwn
		delete(v.own, h)
		shown := st != nil && v.visible(st.svc)
		if st == nil {
			delete(v.shown, h)
		} else {
			v.setShown(h, shown)
		}
		// The ports of a host the view neither showed nor shows do not
		// change for it.
		if wasShown || shown || full {
			for _, p := range v.ports[h] {
				ports[p] = true
			}
			if st != nil {
				for p := range st.ports {
					ports[p] = true
				}
			}
		}
		if st != nil && st.res != nil {
			base := st.res[cds]
			switch {
			case shown:
				if hc, differs := v.ownConfig(st); differs {
					b.client = &v.proxy
					out, err := b.buildService(st.svc, st, hc)
					b.client = nil
					if err == nil {
						v.own[h] = out
						for n, r := range out.res[cds] {
							want[n] = ads.ViewEntry{Own: r}
						}
						for n := range base {
							if _, ok := want[n]; !ok && v.all {
								want[n] = ads.ViewEntry{} // hidden
							}
						}
						break
					}
				}
				if !v.all {
					for n := range base {
						want[n] = ads.ViewEntry{}
					}
				}
			case v.all:
				for n := range base {
					want[n] = ads.ViewEntry{}
				}
			}
			v.ports[h] = slices.Collect(maps.Keys(st.ports))
		} else {
			delete(v.ports, h)
		}
		for n, e := range want {
			v.set(&up, cds, n, e)
		}
		for _, n := range v.names[h] {
			if _, ok := want[n]; !ok {
				v.unset(&up, cds, n)
			}
		}
		if len(want) > 0 {
			v.names[h] = slices.Collect(maps.Keys(want))
		} else {
			delete(v.names, h)
		}
	}
	for p := range ports {
		b.refreshViewPort(v, p, &up)
	}
	if full { // entries of hosts and ports gone
		for k, es := range v.entries {
			for n := range es {
				if !v.seen[k][n] {
					v.unset(&up, k, n)
				}
			}
		}
		v.seen = nil
	}
	return up
}

// refreshViewPort sets v's entries of the listener and route
// configuration of port.
func (b *build) refreshViewPort(v *scopeView, port uint32, up *ads.ViewUpdate) {
	t := b.t
	lk, rk := KindOf(ClassEnvoy, ListenerType), KindOf(ClassEnvoy, RouteType)
	ln, rn := EnvoyListenerName(port), EnvoyRouteName(port)
	// Shared when the view shows every host on the port as every client
	// gets it.
	same, any := true, false
	for h := range t.ports[port] {
		if !v.shows(h) {
			same = false
			continue
		}
		any = true
		if _, own := v.own[h]; own {
			same = false
		}
	}
	if same && any {
		for _, e := range [...]struct {
			k Kind
			n string
		}{{lk, ln}, {rk, rn}} {
			if _, ok := t.current[e.k][e.n]; ok && !v.all {
				v.set(up, e.k, e.n, ads.ViewEntry{})
			} else {
				v.unset(up, e.k, e.n)
			}
		}
		return
	}
	var lis, rc types.Resource
	if any {
		part := func(h string, port uint32) *envoyPort {
			if o, ok := v.own[h]; ok {
				return o.envoy[port]
			}
			return t.envoyPart(h, port)
		}
		l, r, _ := t.portResources(port, v.shows, part)
		if l != nil {
			lis = l
		}
		if r != nil {
			rc = r
		}
	}
	for _, e := range [...]struct {
		k Kind
		n string
		r types.Resource
	}{{lk, ln, lis}, {rk, rn, rc}} {
		base, inBase := t.current[e.k][e.n]
		switch {
		case e.r == nil && v.all && inBase:
			v.set(up, e.k, e.n, ads.ViewEntry{}) // hidden
		case e.r == nil:
			v.unset(up, e.k, e.n)
		case inBase && proto.Equal(base, e.r) && v.all:
			v.unset(up, e.k, e.n)
		case inBase && proto.Equal(base, e.r):
			v.set(up, e.k, e.n, ads.ViewEntry{})
		case validate(e.r) != nil:
			v.unset(up, e.k, e.n) // aggregates hold only validated parts: not expected
		default:
			v.set(up, e.k, e.n, ads.ViewEntry{Own: e.r})
		}
	}
}

// portOfName is the port of an Envoy listener or route configuration
// name.
func portOfName(k Kind, name string) (uint32, bool) {
	switch k.TypeURL {
	case ListenerType:
		name = strings.TrimPrefix(name, "0.0.0.0_")
	case RouteType:
	default:
		return 0, false
	}
	n, err := strconv.ParseUint(name, 10, 32)
	return uint32(n), err == nil
}

// set records entry e of name in v (and in up when it changed).
func (v *scopeView) set(up *ads.ViewUpdate, k Kind, name string, e ads.ViewEntry) {
	if v.seen != nil {
		v.seen[k][name] = true
	}
	cur, ok := v.entries[k][name]
	if ok && (cur.Own == e.Own || (cur.Own != nil && e.Own != nil && proto.Equal(cur.Own, e.Own))) {
		return
	}
	if v.entries[k] == nil {
		v.entries[k] = map[string]ads.ViewEntry{}
	}
	v.entries[k][name] = e
	ch := viewChange(up, k, v.all)
	ch.Set[name] = e
	ch.Delete = slices.DeleteFunc(ch.Delete, func(n string) bool { return n == name })
}

// unset removes name's entry from v.
func (v *scopeView) unset(up *ads.ViewUpdate, k Kind, name string) {
	if _, ok := v.entries[k][name]; !ok {
		return
	}
	delete(v.entries[k], name)
	ch := viewChange(up, k, v.all)
	delete(ch.Set, name)
	ch.Delete = append(ch.Delete, name)
}

// viewChange is up's change of k, made on first use.
func viewChange(up *ads.ViewUpdate, k Kind, all bool) *ads.ViewChange {
	ch := up.Changes[k]
	if ch == nil {
		ch = &ads.ViewChange{All: all, Set: map[string]ads.ViewEntry{}}
		up.Changes[k] = ch
	}
	return ch
}
