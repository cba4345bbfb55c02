package translate

import (
	"maps"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/model"
)

// Route destinations that name no cluster (docs/architecture.md §3.6).
// Istio points such a route at the cluster name anyway (Envoy answers 503
// "no cluster", grpc-go fails every call), so a typo in a host, subset or
// port black-holes the host. meshfed leaves such a destination out of its
// route (the remaining weights share the traffic), leaves a route with no
// destination left out (the host's default route then takes what it
// matched), and lists each as a TrafficNote on /debug/configz. That holds
// for destinations missing when the host's VirtualService is applied: one
// that named a cluster under it and disappears later (its service left)
// keeps its place in the route, and its traffic fails as in Istio rather
// than going silently to other backends, with a note, until it is back
// or the VirtualService changes (svcState.reached). Whether a
// destination names a cluster depends on the destination's service (its
// port set) and DestinationRule (its subsets): both are route deps
// (destRules), so the route is rebuilt when they change.

// destChecker checks the destinations of one service port's routes for a
// client kind and collects the notes of those left out.
type destChecker struct {
	b      *build
	host   string
	port   uint32
	client Class
	notes  []TrafficNote
}

// ok reports whether the (resolved) destination d names a cluster the
// client kind is served; if not, it notes that d is left out of route.
func (c *destChecker) ok(d *networking.Destination, route string) bool {
	if c == nil {
		return true
	}
	why := c.b.missingDest(d, c.host, c.port, c.client == ClassGRPC)
	name := destCluster(d, c.host, c.port, c.b.singlePort)
	if why == "" {
		if c.b.reached != nil {
			c.b.reached[name] = true
		}
		return true
	}
	n := TrafficNote{Client: string(c.client), Note: "port " + uitoa(c.port) + " route " + route + ": destination " +
		name + " left out: " + why}
	kept := c.b.wasReached[name]
	if kept {
		c.b.reached[name] = true
		n.Note = "port " + uitoa(c.port) + " route " + route + ": destination " + name + " kept, its traffic fails until it is back: " + why +
			" (it named a cluster when the VirtualService was applied)"
	}
	if !slices.Contains(c.notes, n) {
		c.notes = append(c.notes, n)
	}
	return kept
}

// dropped notes that route, with no destination left, is left out (once
// per route: a route with several matches is dropped for each).
func (c *destChecker) dropped(route string) {
	if c == nil {
		return
	}
	n := TrafficNote{Client: string(c.client),
		Note: "port " + uitoa(c.port) + " route " + route + ": no destination left, route left out (the default route applies)"}
	if !slices.Contains(c.notes, n) {
		c.notes = append(c.notes, n)
	}
}

// dropRoute reports whether a route whose destinations are all, of which
// dests name a cluster (validDests), is left out, and notes it (chk): when
// no destination is left, or of a split only destinations of weight 0. The
// one rule of Envoy http and tcp routes and gRPC routes.
func dropRoute[D weightedDest](all, dests []D, route string, chk *destChecker) bool {
	if len(dests) > 0 && (len(all) == 1 || anyWeight(dests)) {
		return false
	}
	chk.dropped(route)
	return true
}

// missingDest tells why the destination d of a route of host's port names
// no cluster ("" when it names one): its host is no service, the port it
// resolves to is not one of the host's (for gRPC: not an HTTP one), or its
// subset is defined by no DestinationRule its clusters are built with
// (destRule).
func (b *build) missingDest(d *networking.Destination, host string, port uint32, grpc bool) string {
	svc, ok := b.snap.Service(d.GetHost())
	if !ok {
		return "host " + d.GetHost() + " is no known service"
	}
	p := destPort(d, host, port, b.singlePort)
	i := slices.IndexFunc(svc.Ports, func(sp model.Port) bool { return sp.Number == p })
	if i < 0 {
		return "service " + d.GetHost() + " has no port " + uitoa(p)
	}
	if grpc && !svc.Ports[i].Protocol.IsHTTP() {
		return "port " + uitoa(p) + " of " + d.GetHost() + " is not HTTP"
	}
	if s := d.GetSubset(); s != "" {
		dr := b.destRule(d.GetHost()).destinationRule()
		if !slices.ContainsFunc(dr.GetSubsets(), func(ss *networking.Subset) bool { return ss.GetName() == s }) {
			return "subset " + s + " is defined by no DestinationRule of " + d.GetHost()
		}
	}
	return ""
}

// destDep is what a route needs of a destination host: its
// DestinationRule (hash policy, subsets) and its ports (the single-port
// default and whether the cluster exists).
type destDep struct {
	dr    *model.ConfigObject
	ports string // "" when the host is no service
}

// portsKey sums up the ports of the snapshot's service host ("" when
// there is none).
func (b *build) portsKey(host string) string {
	svc, ok := b.snap.Service(host)
	if !ok {
		return ""
	}
	var sb strings.Builder
	sb.WriteByte('+')
	for _, p := range svc.Ports {
		sb.WriteString(uitoa(p.Number))
		sb.WriteByte('/')
		sb.WriteString(string(p.Protocol))
		sb.WriteByte(',')
	}
	return sb.String()
}

// unionDeps is the route deps of a and b together (b's win; both are of
// the same snapshot, so they agree on a host in both).
func unionDeps(a, b map[string]destDep) map[string]destDep {
	if len(b) == 0 {
		return a
	}
	out := maps.Clone(a)
	if out == nil {
		out = map[string]destDep{}
	}
	maps.Copy(out, b)
	return out
}

// destRule is the DestinationRule a route to host takes its subsets and
// hash policy from: the one host's clusters are built with. That is the
// rule in force, except while host is held on its last good config (or
// none) because the rule in force made invalid resources: then the held
// one, so a route never names a subset cluster that is not served or
// carries the invalid rule's hash policy (docs/architecture.md §3.6).
// A host not translated yet for this snapshot counts with the rule in
// force; Translate translates again the hosts whose routes that changes.
// Routes to the host being built take the rule it is built with.
func (b *build) destRule(host string) hostConfig {
	if host == b.building {
		return hostConfig{dr: b.buildingDR}
	}
	hc := b.hostCfg.lookup(host)
	if st := b.t.services[host]; st != nil && st.cfg == hc && st.applied.dr != hc.dr && st.res != nil {
		return hostConfig{dr: st.applied.dr}
	}
	return hostConfig{dr: hc.dr}
}
