package translate

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/proto"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/ads"
)

// Kind names one collection of resources: a client class and a type URL.
// Endpoints (ClusterLoadAssignments) are the same for every class and live
// in one shared collection, Kind{Class: "", TypeURL: EndpointType}.
type Kind = ads.Kind

// KindOf returns the collection a class reads for a type URL. Endpoints
// and Istio config over MCP are the same for every class.
func KindOf(c Class, typeURL string) Kind {
	if typeURL == EndpointType || IsMCPType(typeURL) {
		return Kind{TypeURL: typeURL}
	}
	return Kind{Class: c, TypeURL: typeURL}
}

// Kinds lists every collection the translator fills.
var Kinds = append([]Kind{
	{Class: ClassEnvoy, TypeURL: ClusterType}, {Class: ClassEnvoy, TypeURL: ListenerType}, {Class: ClassEnvoy, TypeURL: RouteType},
	{Class: ClassGRPC, TypeURL: ClusterType}, {Class: ClassGRPC, TypeURL: ListenerType}, {Class: ClassGRPC, TypeURL: RouteType},
	{TypeURL: EndpointType},
}, mcpKinds()...)

// Collections describes the collections of Kinds for the ADS server, in
// the order a stream sends the types an update changed: the order Envoy
// applies them (CDS, EDS, LDS, RDS), then the MCP collections.
func Collections() []ads.Collection {
	var out []ads.Collection
	for _, u := range slices.Concat(TypeURLs, MCPTypeURLs()) {
		for _, k := range Kinds {
			if k.TypeURL == u {
				out = append(out, ads.Collection{Kind: k, FullState: requiresFullState(u), AnyTypeURL: anyTypeURL(u)})
			}
		}
	}
	return out
}

// Change lists what changed in one collection (ads.Change).
type Change = ads.Change

// Changes holds the changes of one Translate per collection; collections
// without changes are absent.
type Changes = ads.Changes

// Skipped is a service port that has no Envoy outbound listener because
// another service owns that port number.
type Skipped struct {
	Host   string `json:"host"`
	Port   uint32 `json:"port"`
	Reason string `json:"reason"`
}

// Invalid is a service left out of translation because a resource built
// from it failed validation (Host is then the hostname), or an Envoy port
// listener or route configuration that failed validation (Host is then its
// resource name).
type Invalid struct {
	Host  string `json:"host"`
	Error string `json:"error"`
}

type svcState struct {
	svc *model.Service
	cfg hostConfig // the traffic config in force for it (the host index's)
	// applied is the traffic config its resources were built with: cfg,
	// or when cfg made invalid resources the last config that built
	// (keepLastGood), or none.
	applied hostConfig
	subs    map[string]*claState // DestinationRule subset CLAs by cluster name
	res     map[Kind]map[string]types.Resource
	ports   map[uint32]model.Protocol // for the Envoy per-port listeners
	clas    map[uint32]*claState      // by port number: to rebuild CLAs incrementally
	mcp     map[string]any            // by MCP kind: to rebuild MCP resources incrementally (addMCP)
	envoy   map[uint32]*envoyPort     // its part of each Envoy port listener
	notes   []TrafficNote             // traffic config a client kind does not get (Host unset)
	// reached: the route destinations (cluster names) that have named a
	// cluster since its applied VirtualService was applied (destChecker).
	reached map[string]bool
	// deps: what its routes need of each other host its VirtualService
	// routes to, as built (destRules).
	deps map[string]destDep
}

// built is what buildService makes of one service.
type built struct {
	res   map[Kind]map[string]types.Resource
	clas  map[uint32]*claState
	subs  map[string]*claState
	envoy map[uint32]*envoyPort
	notes []TrafficNote
	// reached: the route destinations (cluster names) that named a
	// cluster under its VirtualService (destChecker).
	reached map[string]bool
}

// Translator turns snapshots into xDS resources, incrementally. It keeps,
// per hostname, the *model.Service it last translated and the resources it
// built: a service whose pointer did not change is skipped entirely, so its
// resource objects (and their cached marshalled bytes downstream) are
// reused. A changed service is rebuilt and each of its resources that is
// equal to the previous one keeps the previous object and is not reported
// as changed. ClusterLoadAssignments are rebuilt incrementally: only the
// endpoints whose model content changed are built, validated and encoded
// again (see claState), and "changed" is decided from the model, not by
// comparing protos.
//
// Envoy listeners and route configurations, which span all services on a
// port number, are rebuilt only for ports whose set of services or
// protocols changed.
//
// The per-service MCP resources (ServiceEntries for istiod) are built only
// after EnableMCP: a ServiceEntry lists every endpoint of its service, so
// building it costs many times the incremental EDS work of an endpoint
// change, and only MCP clients read it (BENCHMARKS.md, S3a).
//
// Translate is pure (no I/O, no clock) and not safe for concurrent use.
// A Translator's fields hold only what persists between snapshots; the
// state of one Translate call is a build.
type Translator struct {
	services map[string]*svcState
	current  map[Kind]map[string]types.Resource
	ports    map[uint32]map[string]model.Protocol // port → host → protocol
	skipped  map[uint32][]Skipped
	invalid  map[string]string
	meta     metaCache
	config   map[string]*model.ConfigObject // by Key: objects served over MCP
	// hostCfg indexes the config of the snapshot last translated; the
	// next Translate reuses it (configByHost).
	hostCfg *hostIndex
	mcp     bool // build per-service MCP resources (EnableMCP)
	// withDeps: the hosts whose state has deps (routes to other hosts),
	// translated again on every incremental Translate (changedHosts).
	withDeps map[string]bool
	visits   int // translateService calls, for tests

	// Scoping (scope.go): the root namespace, the index of the config
	// last translated, the hosts not exported everywhere, the views and
	// their updates not yet taken, the snapshot last translated.
	root    string
	scopes  *scopeIndex
	private map[string]bool
	epoch   uint64
	views   map[string]*scopeView
	viewUps []ads.ViewUpdate
	snap    *model.Snapshot
}

// build is the state of one Translate, which the Translator does not keep
// between snapshots: the snapshot being translated and its config index,
// and, while buildService builds a host, that build's scratch state.
type build struct {
	t       *Translator
	snap    *model.Snapshot // the snapshot being translated
	hostCfg *hostIndex      // of snap
	// building is the host buildService builds, with buildingDR: routes
	// to the host itself take that rule (destRule).
	building   string
	buildingDR *model.ConfigObject
	// reached and wasReached: the destinations that name a cluster in
	// the host's build, and in its builds since its VirtualService was
	// applied (destChecker).
	reached, wasReached map[string]bool
	// client is the proxy a scoped view's own resources are built for
	// (scope.go); nil for the resources every client shares.
	client *Proxy
	// touched: the hosts whose state Translate replaced (scope.go
	// updates the views over them).
	touched map[string]bool
}

// NewTranslator returns a translator with no resources.
func NewTranslator() *Translator {
	t := &Translator{
		services: map[string]*svcState{},
		current:  map[Kind]map[string]types.Resource{},
		ports:    map[uint32]map[string]model.Protocol{},
		skipped:  map[uint32][]Skipped{},
		invalid:  map[string]string{},
		config:   map[string]*model.ConfigObject{},
		root:     DefaultRootNamespace,
		private:  map[string]bool{},
		views:    map[string]*scopeView{},
		withDeps: map[string]bool{},
	}
	for _, k := range Kinds {
		t.current[k] = map[string]types.Resource{}
	}
	return t
}

// Resources returns the current resources of a collection. The map and
// its resources must not be modified.
func (t *Translator) Resources(k Kind) map[string]types.Resource { return t.current[k] }

// Skipped lists the service ports without an Envoy listener, sorted by
// port and host.
func (t *Translator) Skipped() []Skipped {
	var out []Skipped
	for _, s := range t.skipped {
		out = append(out, s...)
	}
	slices.SortFunc(out, func(a, b Skipped) int { return cmp.Or(cmp.Compare(a.Port, b.Port), cmp.Compare(a.Host, b.Host)) })
	return out
}

// Invalid lists the services left out because their resources failed
// validation, sorted by host.
func (t *Translator) Invalid() []Invalid {
	out := make([]Invalid, 0, len(t.invalid))
	for h, e := range t.invalid {
		out = append(out, Invalid{Host: h, Error: e})
	}
	slices.SortFunc(out, func(a, b Invalid) int { return cmp.Compare(a.Host, b.Host) })
	return out
}

// Translate brings the translator to snap and returns what changed since
// the previous call. A nil snapshot has no services.
func (t *Translator) Translate(snap *model.Snapshot) Changes {
	ch := Changes{}
	dirty := map[uint32]bool{}
	var cfg *model.ConfigSnapshot
	if snap != nil {
		cfg = snap.Config
	}
	b := &build{t: t, snap: snap, hostCfg: configByHost(cfg, t.hostCfg), touched: map[string]bool{}}
	t.hostCfg = b.hostCfg
	wasPrivate := len(t.private) > 0
	b.hostCfg.trimMemo(snap.Len())
	// A host held on its last good config (or none) gives its routes'
	// destinations the rule its clusters were built with (destRule), which
	// is known only once it is translated: hosts translated before it that
	// route to it are translated again when what they need changed.
	held := false
	hosts, delta := t.changedHosts(snap, cfg)
	if delta {
		// Every other host is the same service under the same config:
		// only its deps can have changed (withDeps). They are translated
		// in hostname order, as in the walk of every host.
		look := maps.Clone(t.withDeps)
		for _, h := range hosts {
			look[h] = true
		}
		for _, h := range slices.Sorted(maps.Keys(look)) {
			if svc, ok := snap.Service(h); ok {
				held = b.translateService(svc, ch, dirty) || held
			}
		}
	} else {
		for _, svc := range snap.Services() {
			held = b.translateService(svc, ch, dirty) || held
		}
	}
	if held {
		for _, h := range slices.Sorted(maps.Keys(t.withDeps)) {
			st := t.services[h]
			if svc, ok := snap.Service(h); ok && st != nil && !maps.Equal(st.deps, b.serviceDeps(h, st)) {
				b.translateService(svc, ch, dirty)
			}
		}
	}
	// Every host of snap is in t.services now: more means some left
	// (with a delta, among its hosts).
	for _, h := range hosts {
		if old := t.services[h]; old != nil && len(t.services) > snap.Len() {
			if _, ok := snap.Service(h); !ok {
				t.remove(b, old, ch, dirty)
			}
		}
	}
	for host, old := range t.services {
		if len(t.services) == snap.Len() {
			break
		}
		if _, ok := snap.Service(host); !ok {
			t.remove(b, old, ch, dirty)
		}
	}
	for _, port := range slices.Sorted(maps.Keys(dirty)) {
		t.rebuildPort(port, ch)
	}
	t.translateConfig(cfg, ch)
	t.snap = snap
	b.scope(cfg, wasPrivate, dirty)
	for _, c := range ch {
		slices.Sort(c.Removed)
		c.Removed = slices.Compact(c.Removed)
	}
	for k, c := range ch {
		if len(c.Updated) == 0 && len(c.Removed) == 0 {
			delete(ch, k)
		}
	}
	return ch
}

// changedHosts returns the hostnames whose service may differ between
// the snapshot last translated and snap, when snap says so
// (Snapshot.DeltaFrom) and the traffic config is the same; ok is false
// when every host must be looked at.
func (t *Translator) changedHosts(snap *model.Snapshot, cfg *model.ConfigSnapshot) (hosts []string, ok bool) {
	if t.snap == nil || snap == nil || snap.DeltaFrom == 0 || snap.DeltaFrom != t.snap.Version || cfg != t.snap.Config {
		return nil, false
	}
	return snap.DeltaHosts, true
}

// remove drops a host that left the snapshot, with its resources.
func (t *Translator) remove(b *build, old *svcState, ch Changes, dirty map[uint32]bool) {
	host := old.svc.Hostname
	t.replace(old, nil, ch, dirty)
	delete(t.services, host)
	delete(t.invalid, host)
	delete(t.private, host)
	delete(t.withDeps, host)
	b.touched[host] = true
}

// serviceDeps is what the routes of host need of other hosts (destRules)
// given its state old (nil when new): of the config in force and, while
// it is on its last good config, of that config too.
func (b *build) serviceDeps(host string, old *svcState) map[string]destDep {
	hc := b.hostCfg.lookup(host)
	deps := b.destRules(host, hc)
	if old != nil && old.cfg == hc && old.applied != hc {
		deps = unionDeps(deps, b.destRules(host, old.applied))
	}
	return deps
}

// translateService brings svc's state to the snapshot being translated,
// recording changes in ch and the ports to rebuild in dirty. It reports
// whether the host's resources are built with a config other than the one
// in force (held on its last good config or none) or were until now.
func (b *build) translateService(svc *model.Service, ch Changes, dirty map[uint32]bool) bool {
	t := b.t
	t.visits++
	old := t.services[svc.Hostname]
	hc := b.hostCfg.lookup(svc.Hostname)
	deps := b.serviceDeps(svc.Hostname, old)
	if old != nil && old.svc == svc && old.cfg == hc && maps.Equal(old.deps, deps) {
		return false
	}
	wasHeld := old != nil && old.applied != old.cfg
	b.touched[svc.Hostname] = true
	if model.ExportsAll(svc.ExportTo) {
		delete(t.private, svc.Hostname)
	} else {
		t.private[svc.Hostname] = true
	}
	next := &svcState{svc: svc, cfg: hc, applied: hc, deps: deps}
	out, err := b.buildService(svc, old, hc)
	if err != nil && (hc.vs != nil || hc.dr != nil) {
		out, next.applied, err = b.keepLastGood(svc, old, hc, err)
		if next.applied != hc {
			next.deps = unionDeps(b.destRules(svc.Hostname, hc), b.destRules(svc.Hostname, next.applied))
		}
	} else if err == nil {
		delete(t.invalid, svc.Hostname)
	}
	if err != nil {
		t.invalid[svc.Hostname] = err.Error()
	} else {
		next.res, next.clas, next.subs, next.envoy, next.notes, next.reached = out.res, out.clas, out.subs, out.envoy, out.notes, out.reached
		next.ports = servicePorts(svc)
		if t.mcp {
			var prev map[string]any
			if old != nil {
				prev = old.mcp
			}
			next.mcp = addMCP(svc, prev, next.res)
		}
	}
	t.replace(old, next, ch, dirty)
	t.services[svc.Hostname] = next
	if len(next.deps) > 0 {
		t.withDeps[svc.Hostname] = true
	} else {
		delete(t.withDeps, svc.Hostname)
	}
	return wasHeld || next.applied != hc
}

// keepLastGood builds svc when its traffic config in force (hc) made
// invalid resources (cfgErr): with the last config that built for the host
// (old's applied config) when there is one, else with hc's DestinationRule
// alone (a VirtualService whose routes carry another host's invalid rule
// must not cost the host its own TLS and subsets), else without traffic
// config, so one bad field never strips what was served
// (docs/architecture.md §3.6). The reason is listed in Invalid. It returns
// the build, the config it used and the error when none built.
func (b *build) keepLastGood(svc *model.Service, old *svcState, hc hostConfig, cfgErr error) (built, hostConfig, error) {
	t := b.t
	if old != nil && old.res != nil && (old.applied.vs != nil || old.applied.dr != nil) {
		if out, err := b.buildService(svc, old, old.applied); err == nil {
			t.invalid[svc.Hostname] = "traffic config not applied, last good config kept (" + old.applied.describe() + "): " + cfgErr.Error()
			return out, old.applied, nil
		}
	}
	if own := (hostConfig{dr: hc.dr}); hc.vs != nil && hc.dr != nil {
		if out, err := b.buildService(svc, old, own); err == nil {
			t.invalid[svc.Hostname] = "traffic config not applied, only " + own.describe() + " applied: " + cfgErr.Error()
			return out, own, nil
		}
	}
	out, err := b.buildService(svc, old, hostConfig{})
	if err != nil {
		return built{}, hostConfig{}, err
	}
	t.invalid[svc.Hostname] = "traffic config left out: " + cfgErr.Error()
	return out, hostConfig{}, nil
}

func servicePorts(svc *model.Service) map[uint32]model.Protocol {
	m := make(map[uint32]model.Protocol, len(svc.Ports))
	for _, p := range svc.Ports {
		if _, dup := m[p.Number]; !dup {
			m[p.Number] = p.Protocol
		}
	}
	return m
}

// replace swaps a service's resources (old or next may be nil) and records
// the differences; ports whose Envoy listener may change are marked dirty.
func (t *Translator) replace(old, next *svcState, ch Changes, dirty map[uint32]bool) {
	var oldRes map[Kind]map[string]types.Resource
	var oldPorts map[uint32]model.Protocol
	var host string
	if old != nil {
		oldRes, oldPorts, host = old.res, old.ports, old.svc.Hostname
	}
	var nextPorts map[uint32]model.Protocol
	var oldEnvoy, nextEnvoy map[uint32]*envoyPort
	if old != nil {
		oldEnvoy = old.envoy
	}
	if next != nil {
		host = next.svc.Hostname
		nextPorts = next.ports
		nextEnvoy = next.envoy
		for k, rs := range next.res {
			for name, r := range rs {
				if prev, ok := oldRes[k][name]; ok && sameResource(prev, r) {
					rs[name] = prev // keep the object downstream already holds
					continue
				}
				t.current[k][name] = r
				ch.Update(k, name, r)
			}
		}
	}
	for k, rs := range oldRes {
		for name := range rs {
			if next != nil {
				if _, ok := next.res[k][name]; ok {
					continue
				}
			}
			delete(t.current[k], name)
			ch.Remove(k, name)
		}
	}
	// A port whose part changed (routes, tcp_proxy) is rebuilt.
	for port, e := range nextEnvoy {
		if !e.equal(oldEnvoy[port]) {
			dirty[port] = true
		}
	}
	for port := range oldEnvoy {
		if _, ok := nextEnvoy[port]; !ok {
			dirty[port] = true
		}
	}
	if maps.Equal(oldPorts, nextPorts) {
		return
	}
	for port := range oldPorts {
		dirty[port] = true
		delete(t.ports[port], host)
	}
	for port, proto := range nextPorts {
		dirty[port] = true
		if t.ports[port] == nil {
			t.ports[port] = map[string]model.Protocol{}
		}
		t.ports[port][host] = proto
	}
}

// sameResource reports whether next, built for the same name as prev, is
// equal to it. A rebuilt ClusterLoadAssignment is the previous object when
// its content did not change (buildCLA decides from the model).
func sameResource(prev, next types.Resource) bool {
	if prev == next {
		return true
	}
	if _, ok := next.(*claResource); ok {
		return false
	}
	if n, ok := next.(*failoverCLA); ok {
		p, ok := prev.(*failoverCLA)
		return ok && p.claResource == n.claResource && slices.EqualFunc(p.failover, n.failover,
			func(a, b *networking.LocalityLoadBalancerSetting_Failover) bool { return proto.Equal(a, b) })
	}
	return proto.Equal(prev, next)
}

// buildService builds every per-service resource of svc, all validated;
// old (may be nil) is the previous state of the hostname, whose CLAs are
// updated incrementally.
//
// hc is the host's traffic config: its VirtualService shapes the gRPC
// route configurations, its DestinationRule the gRPC clusters, and each
// subset becomes a gRPC cluster outbound|<port>|<subset>|<host> with its
// own ClusterLoadAssignment of the endpoints carrying the subset labels.
func (b *build) buildService(svc *model.Service, old *svcState, hc hostConfig) (built, error) {
	t := b.t
	res := map[Kind]map[string]types.Resource{}
	envoyParts := map[uint32]*envoyPort{}
	var notes []TrafficNote
	b.building, b.buildingDR = svc.Hostname, hc.dr
	b.reached, b.wasReached = map[string]bool{}, nil
	if old != nil && hc.vs != nil && old.applied.vs == hc.vs {
		b.wasReached = old.reached
	}
	defer func() { b.building, b.buildingDR, b.reached, b.wasReached = "", nil, nil, nil }()
	dr := hc.destinationRule()
	add := func(k Kind, r types.Resource) {
		if res[k] == nil {
			res[k] = map[string]types.Resource{}
		}
		res[k][resourceName(r)] = r
	}
	ports := slices.Clone(svc.Ports)
	slices.SortFunc(ports, func(a, b model.Port) int { return cmp.Compare(a.Number, b.Number) })
	ports = slices.CompactFunc(ports, func(a, b model.Port) bool { return a.Number == b.Number })
	var httpPorts []model.Port
	faultPorts := map[uint32]bool{}
	var subs map[string]*claState
	clas := make(map[uint32]*claState, len(ports))
	for _, p := range ports {
		name := ClusterName(svc.Hostname, p.Number)
		var prev *claState
		if old != nil {
			prev = old.clas[p.Number]
		}
		cs, err := t.meta.buildCLA(name, svc, p, prev)
		if err != nil {
			return built{}, err
		}
		clas[p.Number] = cs
		cla := cs.res
		// DNS clusters carry their endpoints inline; EDS clusters do not read them.
		var inline *endpoint.ClusterLoadAssignment
		if svc.Resolution == model.ResolutionDNS {
			inline = cla.message()
		}
		pp := portPolicy(dr.GetTrafficPolicy(), p.Number)
		ec := envoyCluster(name, svc, p, inline)
		applyEnvoyPolicy(ec, svc.Hostname, p, pp)
		var served types.Resource = cla // the port's CLA, as every client gets it
		if to := distributeOf(pp); to != nil && svc.Resolution != model.ResolutionDNS {
			d, ok, dn := distributed(name, cla.message(), to)
			if ok {
				served = d
				localityWeighted(ec)
			}
			notes = append(notes, distributeNotes(dn, p.Protocol.IsHTTP())...)
		}
		if fo := failoverOf(pp); len(fo) > 0 && svc.Resolution != model.ResolutionDNS {
			served = &failoverCLA{claResource: cla, failover: fo}
		}
		add(KindOf(ClassEnvoy, ClusterType), ec)
		if svc.Resolution != model.ResolutionDNS {
			add(KindOf(ClassEnvoy, EndpointType), served)
		}
		if hc.vs != nil || hc.dr != nil {
			// Without rules, rebuildPort serves the default virtual host
			// or tcp_proxy: nothing to build per service.
			envoyParts[p.Number] = b.envoyPortOf(svc, p, hc)
			notes = append(notes, envoyParts[p.Number].notes...)
		}
		if err := t.buildSubsets(svc, p, dr, old, add, &subs, &notes); err != nil {
			return built{}, err
		}
		if !p.Protocol.IsHTTP() {
			continue
		}
		httpPorts = append(httpPorts, p)
		gc, useEDS := grpcCluster(name, svc, inline)
		applyPolicy(gc, pp)
		for _, n := range grpcOmitted(pp) {
			notes = append(notes, grpcNote(name+": "+n))
		}
		add(KindOf(ClassGRPC, ClusterType), gc)
		if useEDS {
			add(KindOf(ClassGRPC, EndpointType), served)
		}
		lname := GRPCListenerName(svc.Hostname, p.Number)
		vh := virtualHost(svc.Hostname, p.Number)
		hash := hashPolicy(pp)
		vh.Routes[0].GetRoute().HashPolicy = hash
		vh.Routes[0].GetRoute().RetryPolicy = grpcRetry(nil)
		withFault := false
		if vs := hc.virtualService(); vs != nil {
			chk := &destChecker{b: b, host: svc.Hostname, port: p.Number, client: ClassGRPC}
			routes, f, dropped := grpcRoutes(vs, svc.Hostname, p.Number, hc.namespace(), b.singlePort, b.grpcHashOf(svc.Hostname, p.Number), chk)
			if len(routes) > 0 {
				withFault = f
			}
			vh.Routes = withDefault(routes, dropped, vh.Routes[0])
			notes = append(notes, chk.notes...)
		}
		faultPorts[p.Number] = withFault
		add(KindOf(ClassGRPC, ListenerType), grpcListener(lname, lname, withFault))
		add(KindOf(ClassGRPC, RouteType), &route.RouteConfiguration{
			Name:         lname,
			VirtualHosts: []*route.VirtualHost{vh},
		})
	}
	if vs := hc.virtualService(); vs != nil && len(httpPorts) > 0 {
		notes = append(notes, grpcRouteNotes(vs)...)
		notes = append(notes, envoyRouteNotes(vs)...)
	}
	// xds:///<host> without a port works when the service has one HTTP port.
	if len(httpPorts) == 1 {
		lname := GRPCListenerName(svc.Hostname, httpPorts[0].Number)
		add(KindOf(ClassGRPC, ListenerType), grpcListener(svc.Hostname, lname, faultPorts[httpPorts[0].Number]))
	}
	var errs []error
	for port, e := range envoyParts {
		var err error
		if e.vhost != nil {
			err = envoyRouteConfig(port, e.vhost).ValidateAll()
		} else {
			err = e.tcp.ValidateAll()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("envoy port %d: %w", port, err))
		}
	}
	for _, rs := range res {
		for name, r := range rs {
			if _, ok := r.(*claResource); ok {
				continue // validated part by part as it was built
			}
			if err := validate(r); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	if len(errs) > 0 {
		return built{}, errors.Join(errs...)
	}
	return built{res: res, clas: clas, subs: subs, envoy: envoyParts, notes: notes, reached: b.reached}, nil
}

// rebuildPort recomputes the Envoy listener (and route configuration) of a
// port number. With any HTTP service on the port, the listener routes by
// host to every HTTP service there and TCP services on the port are
// skipped. Otherwise the listener proxies TCP to the service with the
// smallest hostname and the others are skipped.
func (t *Translator) rebuildPort(port uint32, ch Changes) {
	if len(t.ports[port]) == 0 {
		delete(t.ports, port)
	}
	lis, rc, skipped := t.portResources(port, nil, t.envoyPart)
	delete(t.skipped, port)
	if len(skipped) > 0 {
		t.skipped[port] = skipped
	}
	t.setAggregate(KindOf(ClassEnvoy, ListenerType), EnvoyListenerName(port), lis, ch)
	var rcRes types.Resource
	if rc != nil {
		rcRes = rc
	}
	t.setAggregate(KindOf(ClassEnvoy, RouteType), EnvoyRouteName(port), rcRes, ch)
}

// portResources builds the Envoy listener and route configuration of a
// port number over the hosts on it that shows accepts (nil: all), with
// each host's part (nil: none), and the host ports skipped (rebuildPort).
func (t *Translator) portResources(port uint32, shows func(string) bool, part func(host string, port uint32) *envoyPort) (lis types.Resource, rc *route.RouteConfiguration, skipped []Skipped) {
	var httpHosts, tcpHosts []string
	for host, p := range t.ports[port] {
		if shows != nil && !shows(host) {
			continue
		}
		if p.IsHTTP() {
			httpHosts = append(httpHosts, host)
		} else {
			tcpHosts = append(tcpHosts, host)
		}
	}
	slices.Sort(httpHosts)
	slices.Sort(tcpHosts)
	switch {
	case len(httpHosts) > 0:
		var withCORS, withFault bool
		rc = envoyRouteConfig(port)
		for _, h := range httpHosts {
			vh := virtualHost(h, port)
			vh.Routes[0].GetRoute().RetryPolicy = envoyRetry(nil, false) // no rules: no hash policy
			if e := part(h, port); e != nil && e.vhost != nil {
				vh, withCORS, withFault = e.vhost, withCORS || e.cors, withFault || e.fault
			}
			rc.VirtualHosts = append(rc.VirtualHosts, vh)
		}
		lis = envoyHTTPListenerFor(port, withCORS, withFault)
		for _, h := range tcpHosts {
			skipped = append(skipped, Skipped{Host: h, Port: port,
				Reason: fmt.Sprintf("TCP port %d is served as HTTP for %s", port, httpHosts[0])})
		}
	case len(tcpHosts) > 0:
		lis = envoyTCPListener(port, tcpHosts[0])
		if e := part(tcpHosts[0], port); e != nil && e.tcp != nil {
			lis = envoyTCPListenerFor(port, e.tcp)
		}
		for _, h := range tcpHosts[1:] {
			skipped = append(skipped, Skipped{Host: h, Port: port,
				Reason: fmt.Sprintf("TCP port %d is taken by %s", port, tcpHosts[0])})
		}
	}
	return lis, rc, skipped
}

// setAggregate stores r under name (nil removes it), reporting a change
// only if it differs from the current resource.
func (t *Translator) setAggregate(k Kind, name string, r types.Resource, ch Changes) {
	prev, had := t.current[k][name]
	if r == nil {
		delete(t.invalid, name)
		if had {
			delete(t.current[k], name)
			ch.Remove(k, name)
		}
		return
	}
	if had && proto.Equal(prev, r) {
		return
	}
	if err := validate(r); err != nil {
		// Aggregates hold only validated parts, so this is not expected; the
		// previous resource (if any) stays served and the error is shown.
		t.invalid[name] = err.Error()
		return
	}
	delete(t.invalid, name)
	t.current[k][name] = r
	ch.Update(k, name, r)
}

// singlePort returns the port of a service of the snapshot being
// translated that has exactly one.
func (b *build) singlePort(host string) (uint32, bool) {
	svc, ok := b.snap.Service(host)
	if !ok || len(svc.Ports) != 1 {
		return 0, false
	}
	return svc.Ports[0].Number, true
}

// envoyPart is a service's part of an Envoy port (nil if none).
func (t *Translator) envoyPart(host string, port uint32) *envoyPort {
	if st := t.services[host]; st != nil {
		return st.envoy[port]
	}
	return nil
}

// TrafficNote is traffic config in force that a client kind does not get
// (listed on /debug/configz).
type TrafficNote struct {
	Host string `json:"host"`
	// Client is the client kind that does not get it: "grpc" or "envoy".
	Client string `json:"client"`
	Note   string `json:"note"`
}

// TrafficNotes lists, by host, the traffic config in force a client kind
// is not sent: what grpc-go does not implement, and matches no shared
// translation can evaluate.
func (t *Translator) TrafficNotes() []TrafficNote {
	out := []TrafficNote{}
	for _, h := range slices.Sorted(maps.Keys(t.services)) {
		for _, n := range t.services[h].notes {
			n.Host = h
			out = append(out, n)
		}
	}
	return out
}
