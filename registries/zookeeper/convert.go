package zookeeper

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unique"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/portplan"
	"github.com/meshfed/meshfed/validate"
)

// Port names of the curator layout.
const (
	portHTTP  = "http"  // a Curator instance's port
	portHTTPS = "https" // a Curator instance's sslPort
)

// instance is one znode turned into an endpoint, or the reason it is
// quarantined. It is computed once per read of the znode.
type instance struct {
	path string
	// ep has the instance's Address, Labels, Weight, Health and Origin;
	// its Ports are the service's port plan's (buildService), not kept
	// here twice.
	ep    model.Endpoint
	ports []model.Port // the ports the instance declares, by its own numbers
	bad   string       // non-empty: quarantined for this reason
}

// name is the instance's znode name. Trees key instances by it: a
// substring of path, it keeps no second copy of a name (a Dubbo provider
// URL is hundreds of bytes) alive.
func (in *instance) name() string { return in.path[strings.LastIndexByte(in.path, '/')+1:] }

// addressFunc checks an instance address and returns the IP address to
// serve: an IP as is, a hostname resolved.
type addressFunc func(host string) (string, error)

// curatorInstance is the JSON Curator's JsonInstanceSerializer writes for
// a ServiceInstance.
type curatorInstance struct {
	Name                string          `json:"name"`
	ID                  string          `json:"id"`
	Address             string          `json:"address"`
	Port                *int64          `json:"port"`
	SSLPort             *int64          `json:"sslPort"`
	Payload             json.RawMessage `json:"payload"`
	RegistrationTimeUTC int64           `json:"registrationTimeUTC"`
	ServiceType         string          `json:"serviceType"`
	Enabled             *bool           `json:"enabled"`
}

// parseCurator turns the data of a Curator instance znode into an
// instance.
func parseCurator(path string, data []byte, address addressFunc) instance {
	in := instance{path: path}
	var ci curatorInstance
	if err := json.Unmarshal(data, &ci); err != nil {
		in.bad = "malformed Curator instance JSON: " + jsonErr(err)
		return in
	}
	if ci.Address == "" {
		in.bad = "instance has no address"
		return in
	}
	if ci.Port == nil && ci.SSLPort == nil {
		in.bad = "instance has neither port nor sslPort"
		return in
	}
	for _, p := range []struct {
		name, field string
		value       *int64
		proto       model.Protocol
	}{{portHTTP, "port", ci.Port, model.ProtocolHTTP}, {portHTTPS, "sslPort", ci.SSLPort, model.ProtocolTCP}} {
		if p.value == nil {
			continue
		}
		if *p.value < 1 || *p.value > 65535 {
			in.bad = fmt.Sprintf("%s %d is not a port number", p.field, *p.value)
			return in
		}
		in.ports = append(in.ports, model.Port{Name: p.name, Number: uint32(*p.value), Protocol: p.proto})
	}
	ip, err := address(ci.Address)
	if err != nil {
		in.bad = err.Error()
		return in
	}
	labels := payloadMetadata(ci.Payload)
	health := model.Healthy
	if ci.Enabled != nil && !*ci.Enabled {
		health = model.Unhealthy
	}
	// Spring Cloud Zookeeper's instance status (StatusConstants): absent or
	// UP is in service; OUT_OF_SERVICE is taken out on purpose (drain);
	// anything else is not serving.
	switch s := strings.ToUpper(labels["instance_status"]); {
	case s == "" || s == "UP":
	case s == "OUT_OF_SERVICE":
		health = max(health, model.Draining)
	default:
		health = model.Unhealthy
	}
	in.ep = model.Endpoint{Address: ip, Labels: labels, Health: health, Origin: path}
	return in
}

// payloadMetadata returns the "metadata" object of a Curator payload (as
// Spring Cloud's and Dubbo's ZookeeperInstance carry it) as labels:
// strings as they are, numbers and booleans in their JSON form; other
// values and other payloads are ignored.
func payloadMetadata(raw json.RawMessage) map[string]string {
	var p struct {
		Metadata map[string]json.RawMessage `json:"metadata"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &p) != nil || len(p.Metadata) == 0 {
		return nil
	}
	labels := make(map[string]string, len(p.Metadata))
	for k, v := range p.Metadata {
		v = bytes.TrimSpace(v)
		if len(v) == 0 {
			continue
		}
		switch v[0] {
		case '"':
			var s string
			if json.Unmarshal(v, &s) == nil {
				labels[k] = s
			}
		case '{', '[', 'n': // objects, arrays, null
		default:
			labels[k] = string(v)
		}
	}
	if len(labels) == 0 {
		return nil
	}
	return labels
}

func jsonErr(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("%v (at byte %d)", se, se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q: %v is not a %v", te.Field, te.Value, te.Type)
	}
	return err.Error()
}

// Dubbo URL parameters that are not turned into labels: they change with
// every restart of a provider and select nothing.
var dubboSkipParams = map[string]bool{"pid": true, "timestamp": true}

// parseDubbo turns the name of a Dubbo provider znode (a URL-encoded
// provider URL, as Dubbo's ZookeeperRegistry writes it) into an instance.
func parseDubbo(path, node string, address addressFunc) instance {
	in := instance{path: path}
	raw, err := url.QueryUnescape(node)
	if err != nil {
		in.bad = "provider node name is not URL-encoded: " + err.Error()
		return in
	}
	u, err := url.Parse(raw)
	if err != nil {
		in.bad = "provider URL does not parse: " + strings.TrimPrefix(err.Error(), "parse "+strconv.Quote(raw)+": ")
		return in
	}
	if u.Scheme == "" || u.Host == "" {
		in.bad = fmt.Sprintf("provider URL %q has no protocol://host", raw)
		return in
	}
	host, portStr := u.Hostname(), u.Port()
	if portStr == "" {
		in.bad = fmt.Sprintf("provider URL %q has no port", raw)
		return in
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		in.bad = fmt.Sprintf("provider URL %q: %q is not a port number", raw, portStr)
		return in
	}
	// Interned: a substring of the provider URL would keep the URL alive.
	name := unique.Make(strings.ToLower(u.Scheme)).Value()
	if !validate.Label(name) {
		in.bad = fmt.Sprintf("provider URL %q: protocol %q is not usable as a port name", raw, u.Scheme)
		return in
	}
	ip, err := address(host)
	if err != nil {
		in.bad = err.Error()
		return in
	}
	q := u.Query()
	var labels map[string]string
	for k, vs := range q {
		if dubboSkipParams[k] || len(vs) == 0 {
			continue
		}
		if labels == nil {
			labels = map[string]string{}
		}
		labels[k] = vs[0]
	}
	health := model.Healthy
	if strings.EqualFold(q.Get("enabled"), "false") || strings.EqualFold(q.Get("disabled"), "true") {
		health = model.Unhealthy
	}
	var weight uint32
	if w, err := strconv.ParseUint(q.Get("weight"), 10, 32); err == nil && w > 0 {
		weight = uint32(w)
	}
	in.ports = []model.Port{{Name: name, Number: uint32(port), Protocol: dubboProtocol(name)}}
	in.ep = model.Endpoint{
		Address: ip,
		Labels:  labels,
		Weight:  weight,
		Health:  health,
		Origin:  path,
	}
	return in
}

// dubboProtocol maps a Dubbo protocol to the port protocol proxies use:
// Triple and gRPC are gRPC, rest and http are HTTP, everything else
// (dubbo's own binary protocol, hessian...) is opaque TCP.
func dubboProtocol(p string) model.Protocol {
	switch p {
	case "tri", "grpc":
		return model.ProtocolGRPC
	case "rest", "http":
		return model.ProtocolHTTP
	case "h2":
		return model.ProtocolHTTP2
	}
	return model.ProtocolTCP
}

// curatorHostname maps a Curator service name to <name>.<domain>: the name
// lowercased must be a DNS label.
func curatorHostname(service, domain string) (string, error) {
	l := strings.ToLower(service)
	if !validate.Label(l) {
		return "", fmt.Errorf("service name %q is not a DNS label (letters, digits and '-', at most 63)", service)
	}
	return joinHost(l, domain)
}

// dubboHostname maps a Dubbo interface to a hostname under domain: its
// dot-separated parts in reverse order (most specific first, as in DNS),
// lowercased, every character other than a letter, digit or '-' turned
// into '-', leading and trailing '-' dropped:
//
//	com.foo.DemoService   → demoservice.foo.com.<domain>
//	org.acme.Outer$Inner  → outer-inner.acme.org.<domain>
func dubboHostname(iface, domain string) (string, error) {
	parts := strings.Split(iface, ".")
	labels := make([]string, 0, len(parts))
	for i := len(parts) - 1; i >= 0; i-- {
		l := strings.Trim(strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
				return r
			case r >= 'A' && r <= 'Z':
				return r + ('a' - 'A')
			}
			return '-'
		}, parts[i]), "-")
		if !validate.Label(l) {
			return "", fmt.Errorf("interface %q: part %q does not make a DNS label", iface, parts[i])
		}
		labels = append(labels, l)
	}
	return joinHost(strings.Join(labels, "."), domain)
}

func joinHost(name, domain string) (string, error) {
	h := name + "." + domain
	if domain == "" {
		h = name
	}
	if len(h) > 253 {
		return "", fmt.Errorf("hostname %s is longer than 253 characters", h)
	}
	return h, nil
}

// parseIP accepts an IP address literal (no zone) and returns it in
// canonical form.
func parseIP(s string) (string, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return "", false
	}
	return a.Unmap().String(), true
}

// serviceNode is one service in the tree: its znode and its instances by
// child name.
type serviceNode struct {
	key       string // the service name or Dubbo interface (decoded)
	path      string // its znode
	instances map[string]*instance
	bad       string // non-empty: the service cannot be read, for this reason
}

// ServiceZnodes is one service as a Run reads it from ZooKeeper.
type ServiceZnodes struct {
	// Child is the root's child that holds the service: the service name
	// (LayoutCurator) or the URL-encoded interface name (LayoutDubbo).
	Child string
	// Instances are the service's instance znodes by name: for
	// LayoutCurator <root>/<Child>/<id> and its data, the instance's JSON;
	// for LayoutDubbo <root>/<Child>/providers/<URL-encoded provider URL>,
	// data unused (a provider is all in its name).
	Instances map[string][]byte
}

// Convert builds the state a Run publishes from the services it read under
// cfg.Root in cfg.Layout (cfg: the `zookeeper:` block after
// ApplyDefaults): the services sorted by hostname with their endpoints
// sorted by origin, every rejected service and quarantined instance, and
// quarantined, how many instances are not served for that (the
// quarantined gauge). An instance address that is an IP literal is served
// as it is; a hostname is looked up with resolve (a Run asks DNS), and an
// instance whose hostname does not resolve is quarantined; a nil resolve
// resolves nothing. It does no I/O of its own.
func Convert(c registries.Common, cfg Config, services []ServiceZnodes, resolve func(host string) (ip string, err error)) (served []model.Service, rejected []model.Rejection, quarantined int) {
	address := func(host string) (string, error) {
		if ip, ok := parseIP(host); ok {
			return ip, nil
		}
		if !validate.Resolvable(host) {
			return "", fmt.Errorf("address %q is neither an IP address nor a hostname", host)
		}
		if resolve == nil {
			return "", fmt.Errorf("address %q does not resolve: no such host", host)
		}
		a, err := resolve(host)
		if err != nil {
			return "", fmt.Errorf("address %q does not resolve: %v", host, err)
		}
		ip, ok := parseIP(a)
		if !ok {
			return "", fmt.Errorf("address %q resolves to no IP address", host)
		}
		return ip, nil
	}
	w := &watcher{r: &Registry{cfg: cfg, common: c}}
	tree := make(map[string]*serviceNode, len(services))
	for _, s := range services {
		path := w.join(cfg.Root, s.Child)
		sn := &serviceNode{key: w.serviceKey(s.Child), path: path, instances: make(map[string]*instance, len(s.Instances))}
		for name, data := range s.Instances {
			var in instance
			if cfg.Layout == LayoutDubbo {
				in = parseDubbo(w.join(w.join(path, "providers"), name), name, address)
			} else {
				in = parseCurator(w.join(path, name), data, address)
			}
			sn.instances[name] = &in
		}
		tree[s.Child] = sn
	}
	return build(c, cfg.Layout, tree)
}

// svcKey is one service's key in a Run's Publisher
// (docs/architecture.md §3.1.1): its hostname, "" when the whole service
// is rejected (a name that makes no hostname, a service that cannot be
// read), and the root's child that holds it. Keys sort by hostname, so the
// state comes out in hostname order and services that map to one hostname
// sit side by side, the first by path (child) ahead.
type svcKey struct{ host, child string }

func compareKeys(a, b svcKey) int {
	if c := strings.Compare(a.host, b.host); c != 0 {
		return c
	}
	return strings.Compare(a.child, b.child)
}

// converted is what convertNode made of one service, beside its
// conversion: what a hostname collision needs to reject it whole.
type converted struct {
	key         svcKey
	name        string // the service name or Dubbo interface (serviceNode.key)
	path        string
	instances   int // instance znodes
	quarantined int // of them not served
	// own is the service's conversion on its own; collided counts its
	// instances not served because another service has its hostname.
	own      registries.Converted
	collided int
}

// convertNode converts one service on its own: its hostname, its port
// plan and endpoints, and every instance it quarantines. Whether another
// service has the hostname already is the claims' business.
func convertNode(c registries.Common, layout Layout, child string, sn *serviceNode) converted {
	info := converted{key: svcKey{child: child}, name: sn.key, path: sn.path, instances: len(sn.instances)}
	var host string
	var err error
	if layout == LayoutDubbo {
		host, err = dubboHostname(sn.key, c.Domain)
	} else {
		host, err = curatorHostname(sn.key, c.Domain)
	}
	if err == nil && sn.bad != "" {
		err = errors.New(sn.bad)
	}
	if err != nil {
		info.quarantined = len(sn.instances)
		info.own = registries.Converted{Rejected: []model.Rejection{{Registry: c.Name, Subject: sn.path, Reason: err.Error()}}}
		return info
	}
	info.key.host = host
	svc, rejected, q := buildService(c, host, sn)
	info.quarantined = q
	info.own = registries.One(svc, len(svc.Endpoints) > 0, rejected)
	return info
}

// claims applies the hostname rule to the services converted one by one:
// of the services that map to one hostname (and yield something), the
// first by child (path) has it and the others are rejected whole. It
// hands set what each service's key holds under the rule, and del a key
// no service holds any more. A service put or removed re-decides only the
// services of the hostnames it had and has (usually itself alone), never
// the tree: the Publisher then assembles by plain concatenation.
type claims struct {
	common registries.Common
	set    func(svcKey, registries.Converted)
	del    func(svcKey)
	// conv is the last conversion of each service, by child.
	conv map[string]converted
	// by lists, per hostname, the children that claim it, sorted.
	by map[string][]string
	// quarantined sums conv's quarantined, collided their collided.
	quarantined, collided int
}

func newClaims(c registries.Common, set func(svcKey, registries.Converted), del func(svcKey)) *claims {
	return &claims{common: c, set: set, del: del, conv: map[string]converted{}, by: map[string][]string{}}
}

// put stores child's new conversion.
func (s *claims) put(child string, in converted) {
	old, had := s.conv[child]
	if had {
		s.forget(child, old)
		if old.key != in.key {
			s.del(old.key)
		}
	}
	s.conv[child] = in
	s.quarantined += in.quarantined
	claimed := ""
	if in.key.host == "" || in.own.Empty() {
		s.set(in.key, in.own)
	} else {
		claimed = in.key.host
		cl := s.by[claimed]
		i, _ := slices.BinarySearch(cl, child)
		s.by[claimed] = slices.Insert(cl, i, child)
		s.decide(claimed)
	}
	if had && old.key.host != claimed {
		s.decide(old.key.host)
	}
}

// remove forgets child, a service gone from the tree.
func (s *claims) remove(child string) {
	old, had := s.conv[child]
	if !had {
		return
	}
	s.forget(child, old)
	delete(s.conv, child)
	s.del(old.key)
	s.decide(old.key.host)
}

// forget takes old, child's last conversion, out of the sums and claims.
func (s *claims) forget(child string, old converted) {
	s.quarantined -= old.quarantined
	s.collided -= old.collided
	if cl, ok := s.by[old.key.host]; ok {
		if i, found := slices.BinarySearch(cl, child); found {
			cl = slices.Delete(cl, i, i+1)
		}
		if len(cl) == 0 {
			delete(s.by, old.key.host)
		} else {
			s.by[old.key.host] = cl
		}
	}
}

// decide hands set what every claimant of host holds: the first its own
// conversion, the others a rejection naming the first.
func (s *claims) decide(host string) {
	cl := s.by[host]
	for i, child := range cl {
		in := s.conv[child]
		s.collided -= in.collided
		in.collided = 0
		c := in.own
		if i > 0 {
			c = registries.Converted{Rejected: []model.Rejection{{Registry: s.common.Name, Subject: in.path,
				Reason: fmt.Sprintf("maps to %s like %q, which has it", host, s.conv[cl[0]].name)}}}
			in.collided = in.instances - in.quarantined
		}
		s.collided += in.collided
		s.conv[child] = in
		s.set(in.key, c)
	}
}

// build turns a whole tree into the full state of the shard, as a Run
// publishes it service by service: services sorted by hostname with
// endpoints sorted by origin, and every rejected or quarantined item.
// quarantined counts instances not served.
func build(c registries.Common, layout Layout, tree map[string]*serviceNode) (services []model.Service, rejected []model.Rejection, quarantined int) {
	held := make(map[svcKey]registries.Converted, len(tree))
	s := newClaims(c, func(k svcKey, conv registries.Converted) {
		if conv.Empty() {
			delete(held, k)
		} else {
			held[k] = conv
		}
	}, func(k svcKey) { delete(held, k) })
	for child, sn := range tree {
		s.put(child, convertNode(c, layout, child, sn))
	}
	entries := make([]registries.Entry[svcKey], 0, len(held))
	for k, conv := range held {
		entries = append(entries, registries.Entry[svcKey]{Key: k, Converted: conv})
	}
	slices.SortFunc(entries, func(a, b registries.Entry[svcKey]) int { return compareKeys(a.Key, b.Key) })
	services, rejected = registries.Concat(entries)
	return services, rejected, s.quarantined + s.collided
}

// buildService plans one service from its good instances with the shared
// port plan: each port name on the number most of its instances listen on
// (ties: the lowest), an endpoint naming only its numbers that differ
// from the service's (most name none: no Ports map per endpoint), a port
// an instance does not listen on (no sslPort, another Dubbo protocol)
// marked NotServed.
func buildService(c registries.Common, host string, sn *serviceNode) (model.Service, []model.Rejection, int) {
	var rejected []model.Rejection
	quarantined := 0
	planned := make([]portplan.Instance, 0, len(sn.instances))
	for _, n := range slices.Sorted(maps.Keys(sn.instances)) {
		in := sn.instances[n]
		if in.bad != "" {
			rejected = append(rejected, model.Rejection{Registry: c.Name, Host: host, Subject: in.path, Reason: in.bad})
			quarantined++
			continue
		}
		ep := in.ep
		ep.Source = model.Source{Registry: c.Name, Cluster: c.Name}
		if ep.Locality.IsZero() {
			ep.Locality = c.Locality
		}
		ports := make(map[string]portplan.Port, len(in.ports))
		for _, p := range in.ports {
			ports[p.Name] = portplan.Port{Number: p.Number, Protocol: p.Protocol}
		}
		planned = append(planned, portplan.Instance{Endpoint: ep, Ports: ports, IP: true})
	}
	svc := model.Service{Hostname: host, Resolution: model.ResolutionEDS}
	res, ok := portplan.Plan(planned, portplan.Options{}, portplan.Rejects{
		PortDropped: func(name string) {
			rejected = append(rejected, model.Rejection{Registry: c.Name, Host: host, Subject: "port " + name,
				Reason: "every number its instances use is the service port of another port name"})
		},
	})
	if ok {
		svc.Ports, svc.Endpoints = res.Ports, res.Endpoints
	}
	return svc, rejected, quarantined
}
