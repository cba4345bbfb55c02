package serviceentry

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/kubeclient"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/yamlconf/yamlpath"
)

// Kinds this registry reads.
const (
	KindServiceEntry  = kubeclient.KindServiceEntry
	KindWorkloadEntry = kubeclient.KindWorkloadEntry
)

// kinds are the Istio kinds read, with their specs (v1, v1beta1 and
// v1alpha3 all decode into the v1alpha3 message) and checks; other kinds
// in the files (VirtualServices, Deployments...) are skipped.
var kinds = map[string]istioconfig.Kind{
	KindServiceEntry:  {New: func() proto.Message { return &networking.ServiceEntry{} }, Validate: validateSpec},
	KindWorkloadEntry: {New: func() proto.Message { return &networking.WorkloadEntry{} }, Validate: validateSpec},
}

// Object is one ServiceEntry or WorkloadEntry document of a file or object
// of a cluster: decoded and checked (Err set when the object is invalid
// as a whole).
type Object = istioconfig.Document

// Parse decodes the ServiceEntries and WorkloadEntries of one file (path,
// content data) and checks each alone, as the config source reads
// VirtualServices (istioconfig.DecodeDocuments): an object that is
// invalid as a whole (bad apiVersion or metadata; an unknown field or a
// value of the wrong type in its spec; no host; a bad port; both
// endpoints and a workloadSelector; resolution NONE with nothing to
// serve; a WorkloadEntry without a usable address, locality or port) has
// Err set with every problem found, and Problems placing each at its
// field's line:column (objectError formats them). Parse fails only on a
// YAML syntax error, which rejects the whole file.
func Parse(path string, data []byte) ([]Object, error) {
	return istioconfig.DecodeDocuments(path, data, kinds)
}

// check sets the Err of an object read from a cluster (decoded there)
// when it is invalid as a whole (see Parse).
func check(d *Object) {
	if d.Err == nil {
		d.Err = validateSpec(d.Spec)
	}
}

// validateSpec returns every problem of a ServiceEntry or WorkloadEntry
// spec, joined; each message starts with its field's path.
func validateSpec(m proto.Message) error {
	switch sp := m.(type) {
	case *networking.ServiceEntry:
		return checkServiceEntry(sp)
	case *networking.WorkloadEntry:
		return checkWorkloadEntry(sp)
	}
	return nil
}

// problem is one problem of an invalid object: where it is written
// ("<file>:<line>:<column>", or the object's Source when the object has
// no position: read from a cluster, or a problem of the whole document)
// and what it is.
type problem struct{ at, msg string }

// problems lists o's problems, each where it is written.
func problems(o Object) []problem {
	if len(o.Problems) > 0 {
		out := make([]problem, len(o.Problems))
		for i, p := range o.Problems {
			out[i] = problem{at: fmt.Sprintf("%s:%d:%d", fileOf(o), p.Line, p.Column), msg: p.Message}
		}
		return out
	}
	var out []problem
	for _, e := range yamlpath.Leaves(o.Err) {
		out = append(out, problem{at: o.Source, msg: e.Error()})
	}
	return out
}

// objectError is o's Err as reported to a person: one line per problem,
// "<file>:<line>:<column>: <Kind> <namespace>/<name>: <problem>"; nil
// when o is valid.
func objectError(o Object) error {
	if o.Err == nil {
		return nil
	}
	var errs []error
	for _, p := range problems(o) {
		errs = append(errs, errors.New(p.at+": "+named(o)+p.msg))
	}
	return errors.Join(errs...)
}

// protocols maps Istio port protocols (case-insensitive) to the model's:
// those proxies route by HTTP host stay HTTP, HTTP2 or GRPC; the others
// (TLS, HTTPS, databases) are opaque TCP, as Istio sends them.
var protocols = map[string]model.Protocol{
	"":     model.ProtocolTCP,
	"HTTP": model.ProtocolHTTP, "HTTP2": model.ProtocolHTTP2, "GRPC": model.ProtocolGRPC, "GRPC-WEB": model.ProtocolHTTP,
	"TCP": model.ProtocolTCP, "HTTPS": model.ProtocolTCP, "TLS": model.ProtocolTCP, "MONGO": model.ProtocolTCP,
	"MYSQL": model.ProtocolTCP, "REDIS": model.ProtocolTCP, "UDP": "",
}

// checkServiceEntry returns every problem of se, joined: at most one per
// port and one per other part checked.
func checkServiceEntry(se *networking.ServiceEntry) error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(se.GetHosts()) == 0 {
		fail("spec.hosts: at least one host is required")
	}
	if len(se.GetPorts()) == 0 {
		fail("spec.ports: at least one port is required")
	}
	names, numbers := map[string]bool{}, map[uint32]bool{}
	for i, p := range se.GetPorts() {
		key := fmt.Sprintf("spec.ports[%d]", i)
		proto, ok := protocols[strings.ToUpper(p.GetProtocol())]
		switch {
		case p.GetName() == "":
			fail("%s.name: is required", key)
		case p.GetNumber() < 1 || p.GetNumber() > 65535:
			fail("%s.number: %d is not a port number (1-65535)", key, p.GetNumber())
		case p.GetTargetPort() > 65535:
			fail("%s.targetPort: %d is not a port number (1-65535)", key, p.GetTargetPort())
		case numbers[p.GetNumber()]:
			fail("%s.number: port %d is declared twice", key, p.GetNumber())
		case names[p.GetName()]:
			fail("%s.name: port name %q is declared twice", key, p.GetName())
		case !ok || proto == "":
			fail("%s.protocol: %q is not served (want HTTP, HTTPS, HTTP2, GRPC, GRPC-WEB, TCP, TLS, MONGO, MYSQL or REDIS)", key, p.GetProtocol())
		}
		names[p.GetName()], numbers[p.GetNumber()] = true, true
	}
	if len(se.GetEndpoints()) > 0 && se.GetWorkloadSelector() != nil {
		fail("spec: endpoints and workloadSelector are mutually exclusive")
	}
	if se.GetResolution() == networking.ServiceEntry_NONE && len(se.GetEndpoints()) == 0 && se.GetWorkloadSelector() == nil {
		fail("spec.resolution: NONE without endpoints or a workloadSelector is Istio's original-destination passthrough, which meshfed does not serve (give endpoints, or resolution DNS)")
	}
	return errors.Join(errs...)
}

// checkWorkloadEntry returns every problem of we, joined.
func checkWorkloadEntry(we *networking.WorkloadEntry) error {
	var errs []error
	if err := checkAddress(we.GetAddress()); err != nil {
		errs = append(errs, fmt.Errorf("spec.address: %v", err))
	}
	if _, err := model.ParseLocality(we.GetLocality()); err != nil {
		errs = append(errs, fmt.Errorf("spec.locality: %v", err))
	}
	for _, name := range slices.Sorted(maps.Keys(we.GetPorts())) {
		if n := we.GetPorts()[name]; n < 1 || n > 65535 {
			errs = append(errs, fmt.Errorf("spec.ports[%q]: %d is not a port number (1-65535)", name, n))
		}
	}
	return errors.Join(errs...)
}

// checkAddress rejects what meshfed cannot serve at all: no address (an
// endpoint reachable only through a network gateway) and Unix sockets.
// Whether an address is a usable IP (or a hostname, for DNS) is the
// aggregator's normalization gate's call, which quarantines a bad
// endpoint alone (docs/architecture.md §3.4).
func checkAddress(a string) error {
	switch {
	case a == "":
		return fmt.Errorf("is required (an endpoint reachable only through a network gateway is not served)")
	case strings.HasPrefix(a, "unix://"):
		return fmt.Errorf("%q: Unix domain socket endpoints are not served", a)
	}
	return nil
}

// Convert turns the valid objects of a registry (every file, in path
// order; objects with Err are skipped) into its services under c, and
// lists what it rejects, each naming its object and file:line:
//
//   - Each host of a ServiceEntry is a service <host> with the entry's
//     ports. A host outside c.Domain, a wildcard host, or a host already
//     served by an earlier ServiceEntry (files in path order, documents in
//     file order) is rejected alone; the entry's other hosts are served.
//   - Endpoints: the entry's own endpoints, or every WorkloadEntry of its
//     namespace whose labels hold all of workloadSelector.labels. An
//     inline endpoint that is unusable (no address, a Unix socket, a bad
//     locality, a port override naming no port of the entry) is rejected
//     alone. Labels, locality, network and weight are the endpoint's.
//     An endpoint listens on its `ports` entry for a service port, else
//     on the port's targetPort, else on the port's number.
//   - Resolution STATIC (and NONE with endpoints: meshfed has no
//     passthrough, so the given addresses are the destinations) is EDS:
//     addresses must be IP addresses. DNS and DNS_ROUND_ROBIN are DNS:
//     addresses may be hostnames the client resolves, and an entry
//     without endpoints or selector resolves each host itself.
func Convert(objs []Object, c registries.Common) ([]model.Service, []model.Rejection) {
	domain := normDomain(c.Domain)
	workloads := workloadsByNamespace(objs)
	services := []model.Service{}
	var rejected []model.Rejection
	servedBy := map[string]string{} // host → its ServiceEntry
	for _, o := range objs {
		se, ok := o.Spec.(*networking.ServiceEntry)
		if o.Err != nil || !ok {
			continue
		}
		conv := convertEntry(o, se, claimHosts(o, se, domain, servedBy), workloads[o.Namespace], c)
		services = append(services, conv.Services...)
		rejected = append(rejected, conv.Rejected...)
	}
	return services, rejected
}

// normDomain is a registry's domain as hosts are compared with it.
func normDomain(d string) string { return strings.ToLower(strings.TrimSuffix(d, ".")) }

// workloadsByNamespace returns the valid WorkloadEntries of objs by
// namespace, in order.
func workloadsByNamespace(objs []Object) map[string][]Object {
	out := map[string][]Object{}
	for _, o := range objs {
		if o.Err == nil && o.Kind == KindWorkloadEntry {
			out[o.Namespace] = append(out[o.Namespace], o)
		}
	}
	return out
}

// hostClaim is what became of one host of a ServiceEntry: served (reason
// "") or rejected for reason.
type hostClaim struct {
	i      int    // index in spec.hosts
	host   string // lowercased, without a trailing dot
	reason string
}

// claimHosts decides each host of the ServiceEntry o: a wildcard, a host
// outside domain or one an earlier entry serves (servedBy, which it
// updates) is rejected.
func claimHosts(o Object, se *networking.ServiceEntry, domain string, servedBy map[string]string) []hostClaim {
	id := describe(o)
	claims := make([]hostClaim, 0, len(se.GetHosts()))
	for i, h := range se.GetHosts() {
		host := strings.ToLower(strings.TrimSuffix(h, "."))
		cl := hostClaim{i: i, host: host, reason: unservable(host, domain)}
		switch {
		case cl.reason != "":
		case servedBy[host] != "":
			cl.reason = fmt.Sprintf("host rejected: already served by %s (the first in file order wins)", servedBy[host])
		default:
			servedBy[host] = id
		}
		claims = append(claims, cl)
	}
	return claims
}

// unservable says why host (lowercased, without a trailing dot) is never
// served in a registry of domain, "" if it can be: a wildcard, or a host
// outside the domain.
func unservable(host, domain string) string {
	switch {
	case strings.Contains(host, "*"):
		return "host rejected: wildcard hosts are not served (meshfed serves one cluster per hostname)"
	case domain != "" && host != domain && !strings.HasSuffix(host, "."+domain):
		return fmt.Sprintf("host rejected: it is outside the registry's domain %q, which must cover every host the registry serves", domain)
	}
	return ""
}

// convertEntry converts the valid ServiceEntry o (spec se) whose hosts
// were claimed as claims; workloads are the valid WorkloadEntries of its
// namespace, in order.
func convertEntry(o Object, se *networking.ServiceEntry, claims []hostClaim, workloads []Object, c registries.Common) registries.Converted {
	var out registries.Converted
	reject := func(host, subject, format string, args ...any) {
		out.Rejected = append(out.Rejected, model.Rejection{Registry: c.Name, Host: host, Subject: subject, Reason: fmt.Sprintf(format, args...)})
	}
	id := describe(o)
	var hosts []string
	for _, cl := range claims {
		if cl.reason != "" {
			subject := fmt.Sprintf("%s host %q (%s)", id, se.GetHosts()[cl.i], position(o, fmt.Sprintf("spec.hosts[%d]", cl.i)))
			reject(cl.host, subject, "%s", cl.reason)
			continue
		}
		hosts = append(hosts, cl.host)
	}
	if len(hosts) == 0 {
		return out
	}
	ports := make([]model.Port, len(se.GetPorts()))
	for i, p := range se.GetPorts() {
		ports[i] = model.Port{Name: p.GetName(), Number: p.GetNumber(), Protocol: protocols[strings.ToUpper(p.GetProtocol())]}
	}
	res := model.ResolutionEDS
	if r := se.GetResolution(); r == networking.ServiceEntry_DNS || r == networking.ServiceEntry_DNS_ROUND_ROBIN {
		res = model.ResolutionDNS
	}
	var eps []model.Endpoint
	switch {
	case se.GetWorkloadSelector() != nil:
		sel := se.GetWorkloadSelector().GetLabels()
		for _, w := range workloads {
			we := w.Spec.(*networking.WorkloadEntry)
			if selects(sel, we.GetLabels()) {
				eps = append(eps, endpoint(we, se, c, w.Source+" "+describe(w)))
			}
		}
	case len(se.GetEndpoints()) > 0:
		// Sized: no slice grown and dropped among the kept ones.
		eps = make([]model.Endpoint, 0, len(se.GetEndpoints()))
		// The last origin, shared by the endpoints at one position (all
		// of a cluster object's).
		var pos, origin string
		for i, we := range se.GetEndpoints() {
			key := fmt.Sprintf("spec.endpoints[%d]", i)
			if p := position(o, key); p != pos || origin == "" {
				pos, origin = p, p+" "+id
			}
			if reason := checkEndpoint(we, se); reason != "" {
				for _, h := range hosts {
					reject(h, we.GetAddress()+" ("+origin+")", "endpoint rejected: %s: %s", key, reason)
				}
				continue
			}
			eps = append(eps, endpoint(we, se, c, origin))
		}
	}
	for _, h := range hosts {
		svc := model.Service{Hostname: h, Ports: ports, Resolution: res, Endpoints: eps,
			Namespace: o.Namespace, ExportTo: slices.Clone(se.GetExportTo())}
		if res == model.ResolutionDNS && len(se.GetEndpoints()) == 0 && se.GetWorkloadSelector() == nil {
			// Istio: without endpoints, a DNS entry resolves its host.
			svc.Endpoints = []model.Endpoint{endpoint(&networking.WorkloadEntry{Address: h}, se, c, o.Source+" "+id)}
		}
		out.Services = append(out.Services, svc)
	}
	return out
}

// checkEndpoint says why an inline endpoint cannot be served, "" if it can.
func checkEndpoint(we *networking.WorkloadEntry, se *networking.ServiceEntry) string {
	if err := checkAddress(we.GetAddress()); err != nil {
		return "address " + err.Error()
	}
	if _, err := model.ParseLocality(we.GetLocality()); err != nil {
		return err.Error()
	}
	for _, name := range slices.Sorted(maps.Keys(we.GetPorts())) {
		if !slices.ContainsFunc(se.GetPorts(), func(p *networking.ServicePort) bool { return p.GetName() == name }) {
			return fmt.Sprintf("ports[%q] names no port of the ServiceEntry", name)
		}
		if n := we.GetPorts()[name]; n < 1 || n > 65535 {
			return fmt.Sprintf("ports[%q]: %d is not a port number (1-65535)", name, n)
		}
	}
	return ""
}

// endpoint converts a checked WorkloadEntry (inline or selected) serving
// se; origin names it in reports. It carries the registry's defaults
// (Common.EndpointDefaults), so that the Publisher keeps the converted
// endpoints rather than a copy, which would leave them as garbage among
// what the heap keeps.
func endpoint(we *networking.WorkloadEntry, se *networking.ServiceEntry, c registries.Common, origin string) model.Endpoint {
	loc, _ := model.ParseLocality(we.GetLocality()) // checked
	ep := model.Endpoint{
		Address:  we.GetAddress(),
		Labels:   we.GetLabels(),
		Locality: loc,
		Weight:   we.GetWeight(),
		Source:   model.Source{Registry: c.Name, Cluster: c.Name, Network: we.GetNetwork()},
		Origin:   origin,
	}
	for _, p := range se.GetPorts() {
		n, ok := we.GetPorts()[p.GetName()]
		if !ok && p.GetTargetPort() != 0 {
			n, ok = p.GetTargetPort(), true
		}
		if ok && n != p.GetNumber() {
			if ep.Ports == nil {
				ep.Ports = map[string]uint32{}
			}
			ep.Ports[p.GetName()] = n
		}
	}
	return c.EndpointDefaults(ep)
}

// selects: every label of selector is in labels with the same value.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if w, ok := labels[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// named is "<Kind> <namespace>/<name>: ", or "" when o's kind is unknown.
func named(o Object) string {
	if o.Kind == "" {
		return ""
	}
	return describe(o) + ": "
}

// fileOf is the file of o's Source ("<file>:<line>").
func fileOf(o Object) string {
	if i := strings.LastIndexByte(o.Source, ':'); i >= 0 {
		return o.Source[:i]
	}
	return o.Source
}

func describe(o Object) string { return o.Kind + " " + o.Namespace + "/" + o.Name }

// position is "<file>:<line>" of key within o (o's Source if absent).
func position(o Object, key string) string {
	if o.Node == nil { // read from a cluster: "namespace/name (cluster)"
		return o.Source
	}
	if n, _ := yamlpath.Lookup(o.Node, key); n != nil {
		return fileOf(o) + ":" + strconv.Itoa(n.Line)
	}
	return o.Source
}
