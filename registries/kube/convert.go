package kube

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/pack"
)

// Node labels read for locality.
const (
	labelRegion        = "topology.kubernetes.io/region"
	labelZone          = "topology.kubernetes.io/zone"
	labelSubZone       = "topology.istio.io/subzone"
	labelRegionLegacy  = "failure-domain.beta.kubernetes.io/region"
	labelZoneLegacy    = "failure-domain.beta.kubernetes.io/zone"
	labelNetwork       = "topology.istio.io/network"
	labelServiceName   = discoveryv1.LabelServiceName
	annotationClusterA = "networking.istio.io/cluster"
)

// cluster describes where converted endpoints come from.
type clusterInfo struct {
	registry string // Source.Registry
	cluster  string // Source.Cluster
	network  string // Source.Network
	domain   string // hostnames are <name>.<namespace>.<domain>
}

// lookups gives conversion what it needs from other objects. Both return
// values that belong to the cache and must not be modified.
type lookups interface {
	// podLabels returns the labels of a pod, nil if unknown.
	podLabels(namespace, name string) map[string]string
	// nodeLocality returns the locality of a node from its labels.
	nodeLocality(name string) model.Locality
}

// hostname is the service's name as clients use it.
func (ci clusterInfo) hostname(namespace, name string) string {
	return name + "." + namespace + "." + ci.domain
}

// convertService turns one Service and the EndpointSlices that belong to it
// into a model.Service. ok is false when the service is not published (see
// the package doc for which services become EDS, DNS or nothing); rejected
// lists what was left out and why. It never modifies its inputs. An
// endpoint's labels are its pod's map as lk returns it (cached, never
// modified, shared by the pods with the same labels: labelSets); the
// result shares no other maps or slices with its inputs.
func convertService(ci clusterInfo, svc *corev1.Service, eps []*discoveryv1.EndpointSlice, lk lookups) (out model.Service, rejected []model.Rejection, ok bool) {
	host := ci.hostname(svc.Namespace, svc.Name)
	reject := func(subject, reason string) {
		rejected = append(rejected, model.Rejection{Registry: ci.registry, Host: host, Subject: subject, Reason: reason})
	}
	ports := make([]model.Port, 0, len(svc.Spec.Ports))
	for _, p := range svc.Spec.Ports {
		proto, supported := portProtocol(p)
		if !supported {
			reject(fmt.Sprintf("port %s/%d", p.Name, p.Port), fmt.Sprintf("protocol %s is not supported; the port is not served", p.Protocol))
			continue
		}
		ports = append(ports, model.Port{Name: p.Name, Number: uint32(p.Port), Protocol: proto})
	}
	if len(ports) == 0 {
		if len(svc.Spec.Ports) == 0 {
			reject("Service "+svc.Namespace+"/"+svc.Name, "the service has no ports, so nothing can be routed to it")
		}
		return model.Service{}, rejected, false
	}
	out = model.Service{Hostname: host, Ports: ports, Namespace: svc.Namespace, ExportTo: exportTo(svc)}

	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		out.Resolution = model.ResolutionDNS
		out.Endpoints = []model.Endpoint{{
			Address: strings.TrimSuffix(svc.Spec.ExternalName, "."),
			Source:  model.Source{Registry: ci.registry, Cluster: ci.cluster, Network: ci.network},
			Origin:  "Service " + svc.Namespace + "/" + svc.Name,
		}}
		return out, rejected, true
	}

	// Endpoints, deduplicated by address and ports over all slices (an
	// endpoint may sit in two slices while the controller moves it).
	type ekey struct{ addr, ports string }
	byKey := map[ekey]int{}
	n := 0
	for _, s := range eps {
		n += len(s.Endpoints)
	}
	if n > 0 {
		out.Endpoints = make([]model.Endpoint, 0, n) // held until the next change: no append slack
	}
	for _, s := range sortedSlices(eps) {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			reject("EndpointSlice "+s.Namespace+"/"+s.Name, fmt.Sprintf("address type %s is not supported; use an ExternalName service for DNS names", s.AddressType))
			continue
		}
		// A service port the slice does not list is one its endpoints do
		// not serve: the EndpointSlice controller leaves out a port whose
		// targetPort a pod lacks, and puts such pods in slices of their
		// own. A listed port without a number means the service port.
		slicePorts := map[string]*int32{}
		for _, p := range s.Ports {
			slicePorts[derefString(p.Name)] = p.Port
		}
		var override map[string]uint32
		served := 0
		for _, p := range ports {
			n, found := slicePorts[p.Name]
			switch {
			case !found:
				override = setPort(override, p.Name, model.NotServed)
				continue
			case n != nil && uint32(*n) != p.Number:
				override = setPort(override, p.Name, uint32(*n))
			}
			served++
		}
		if served == 0 {
			if len(s.Endpoints) > 0 {
				reject("EndpointSlice "+s.Namespace+"/"+s.Name, "the slice lists none of the service's ports, so its endpoints serve nothing")
			}
			continue
		}
		pk := formatOverride(override)
		for _, e := range s.Endpoints {
			if len(e.Addresses) == 0 {
				continue
			}
			ep := model.Endpoint{
				Address: e.Addresses[0], // the others are fungible (API doc)
				Ports:   maps.Clone(override),
				Health:  endpointHealth(e.Conditions),
				Source:  model.Source{Registry: ci.registry, Cluster: ci.cluster, Network: ci.network},
			}
			if n := e.NodeName; n != nil && *n != "" {
				ep.Locality = lk.nodeLocality(*n)
			}
			if e.Zone != nil && *e.Zone != "" {
				ep.Locality.Zone = *e.Zone
			}
			if r := e.TargetRef; r != nil && r.Kind == "Pod" {
				ns := cmp.Or(r.Namespace, s.Namespace)
				ep.Labels = lk.podLabels(ns, r.Name)
				ep.Origin = "Pod " + ns + "/" + r.Name
			} else {
				ep.Origin = "EndpointSlice " + s.Namespace + "/" + s.Name
			}
			k := ekey{ep.Address, pk}
			if i, dup := byKey[k]; dup {
				if healthRank(ep.Health) < healthRank(out.Endpoints[i].Health) {
					out.Endpoints[i] = ep
				}
				continue
			}
			byKey[k] = len(out.Endpoints)
			out.Endpoints = append(out.Endpoints, ep)
		}
	}
	slices.SortFunc(out.Endpoints, func(a, b model.Endpoint) int {
		return cmp.Or(cmp.Compare(a.Address, b.Address), cmp.Compare(formatOverride(a.Ports), formatOverride(b.Ports)))
	})
	// The endpoints' origins, one string each as built, are held as long
	// as the service: one allocation for them all (pack.Strings).
	origins := make([]*string, len(out.Endpoints))
	for i := range out.Endpoints {
		origins[i] = &out.Endpoints[i].Origin
	}
	pack.Strings(origins...)
	return out, rejected, true
}

// setPort sets m[name] = n, making m if it is nil.
func setPort(m map[string]uint32, name string, n uint32) map[string]uint32 {
	if m == nil {
		m = map[string]uint32{}
	}
	m[name] = n
	return m
}

// sortedSlices orders slices by name so that conversion is deterministic.
func sortedSlices(eps []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	out := slices.Clone(eps)
	slices.SortFunc(out, func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

func formatOverride(m map[string]uint32) string {
	if len(m) == 0 {
		return ""
	}
	keys := slices.Sorted(maps.Keys(m))
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d,", k, m[k])
	}
	return b.String()
}

// endpointHealth maps EndpointSlice conditions: ready → HEALTHY; serving
// and terminating → DRAINING; anything else → UNHEALTHY. A nil ready means
// ready; a nil serving defers to ready; a nil terminating means not
// terminating (as the API documents).
func endpointHealth(c discoveryv1.EndpointConditions) model.Health {
	ready := c.Ready == nil || *c.Ready
	serving := ready
	if c.Serving != nil {
		serving = *c.Serving
	}
	terminating := c.Terminating != nil && *c.Terminating
	switch {
	case ready:
		return model.Healthy
	case serving && terminating:
		return model.Draining
	}
	return model.Unhealthy
}

func healthRank(h model.Health) int {
	switch h {
	case model.Healthy:
		return 0
	case model.Degraded:
		return 1
	case model.Draining:
		return 2
	}
	return 3
}

// portProtocol derives a port's protocol: from appProtocol when it is set
// and known, else from the port name's prefix as Istio does (grpc,
// grpc-web, http, http2, h2c, https, tls, tcp...). Unknown names are TCP.
// UDP and SCTP ports are not supported.
func portProtocol(p corev1.ServicePort) (model.Protocol, bool) {
	if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
		return "", false
	}
	if p.AppProtocol != nil {
		if proto, known := protocolFromName(*p.AppProtocol); known {
			return proto, true
		}
	}
	name := strings.ToLower(p.Name)
	if proto, known := protocolFromName(name); known {
		return proto, true
	}
	if prefix, _, found := strings.Cut(name, "-"); found {
		if proto, known := protocolFromName(prefix); known {
			return proto, true
		}
	}
	return model.ProtocolTCP, true
}

func protocolFromName(s string) (model.Protocol, bool) {
	switch strings.ToLower(s) {
	case "grpc":
		return model.ProtocolGRPC, true
	case "grpc-web", "http", "kubernetes.io/ws":
		return model.ProtocolHTTP, true
	case "http2", "h2c", "kubernetes.io/h2c":
		return model.ProtocolHTTP2, true
	case "tcp", "tls", "https", "kubernetes.io/wss", "mongo", "mysql", "redis":
		return model.ProtocolTCP, true
	}
	return "", false
}

// localityFromLabels reads a node's topology labels.
func localityFromLabels(l map[string]string) model.Locality {
	return model.Locality{
		Region:  cmp.Or(l[labelRegion], l[labelRegionLegacy]),
		Zone:    cmp.Or(l[labelZone], l[labelZoneLegacy]),
		SubZone: l[labelSubZone],
	}
}

func derefString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// annotationExportTo is Istio's annotation that sets a Service's
// exportTo (docs/architecture.md §3.7).
const annotationExportTo = "networking.istio.io/exportTo"

// exportTo reads a Service's exportTo annotation as Istio does: a comma
// separated list, spaces trimmed, empty items dropped; nil without one
// (the registry's default applies).
func exportTo(svc *corev1.Service) []string {
	v, ok := svc.Annotations[annotationExportTo]
	if !ok {
		return nil
	}
	var out []string
	for _, ns := range strings.Split(v, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			out = append(out, ns)
		}
	}
	return out
}

// Slimming: informers store only what conversion reads. Transforms build
// new objects and keep nothing else of the decoded one.

// slimMeta keeps of m its name, namespace, resource version (which the
// informer compares on a relist) and the labels keepLabels accepts (nil:
// all), as a map shared by every object with the same labels (labelSets).
// Name and resource version are packed (pack.Strings) with more, strings of the
// same object.
func (in *interning) slimMeta(m metav1.Object, keepLabels func(string) bool, more ...*string) metav1.ObjectMeta {
	out := metav1.ObjectMeta{Name: m.GetName(), Namespace: internString(m.GetNamespace()), ResourceVersion: m.GetResourceVersion(),
		Labels: in.labels.get(m.GetLabels(), keepLabels)}
	pack.Strings(append([]*string{&out.Name, &out.ResourceVersion}, more...)...)
	return out
}

func (in *interning) slimService(s *corev1.Service) *corev1.Service {
	out := &corev1.Service{}
	out.Spec.Type = s.Spec.Type
	out.Spec.ClusterIP = s.Spec.ClusterIP
	out.Spec.ExternalName = s.Spec.ExternalName
	out.ObjectMeta = in.slimMeta(s, func(string) bool { return false }, &out.Spec.ClusterIP, &out.Spec.ExternalName)
	if v, ok := s.Annotations[annotationExportTo]; ok {
		out.Annotations = map[string]string{annotationExportTo: strings.Clone(v)}
	}
	out.Spec.Ports = make([]corev1.ServicePort, len(s.Spec.Ports))
	for i, p := range s.Spec.Ports {
		out.Spec.Ports[i] = corev1.ServicePort{Name: internString(p.Name), Protocol: corev1.Protocol(internString(string(p.Protocol))),
			AppProtocol: in.strings.get(p.AppProtocol), Port: p.Port}
	}
	return out
}

// slimEndpointSlice keeps of a slice its service-name label, address type
// and ports (shared by the slices with the same ports: portLists), and
// per endpoint its first address, conditions (pointers to shared values),
// node, zone and target pod. What it keeps is a few allocations per slice
// whatever its endpoints (see pack.Strings): one array of endpoints, one of
// addresses and one of target references, the addresses packed, the
// names packed with the slice's own.
func (in *interning) slimEndpointSlice(s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	out := &discoveryv1.EndpointSlice{
		AddressType: discoveryv1.AddressType(internString(string(s.AddressType))),
		Ports:       in.ports.get(s.Ports, &in.strings),
		Endpoints:   make([]discoveryv1.Endpoint, len(s.Endpoints)),
	}
	var addrs []string
	var refs []corev1.ObjectReference
	for i, e := range s.Endpoints {
		if len(e.Addresses) > 0 && addrs == nil {
			addrs = make([]string, len(s.Endpoints))
		}
		if e.TargetRef != nil && refs == nil {
			refs = make([]corev1.ObjectReference, len(s.Endpoints))
		}
		se := discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{
			Ready: sharedBool(e.Conditions.Ready), Serving: sharedBool(e.Conditions.Serving), Terminating: sharedBool(e.Conditions.Terminating),
		}, NodeName: in.strings.get(e.NodeName), Zone: in.strings.get(e.Zone)}
		if len(e.Addresses) > 0 {
			addrs[i] = e.Addresses[0]
			se.Addresses = addrs[i : i+1 : i+1]
		}
		if r := e.TargetRef; r != nil {
			refs[i] = corev1.ObjectReference{Kind: internString(r.Kind), Namespace: internString(r.Namespace), Name: r.Name}
			se.TargetRef = &refs[i]
		}
		out.Endpoints[i] = se
	}
	var service string
	kept := make([]*string, 0, 1+len(refs))
	if v, ok := s.Labels[labelServiceName]; ok {
		service = v
		kept = append(kept, &service)
	}
	for i := range refs {
		kept = append(kept, &refs[i].Name)
	}
	out.ObjectMeta = in.slimMeta(s, func(string) bool { return false }, kept...)
	if _, ok := s.Labels[labelServiceName]; ok {
		out.Labels = map[string]string{labelServiceName: service}
	}
	// Addresses are packed apart: published endpoints hold them (and so
	// their pack) while the slice may be replaced.
	ptrs := make([]*string, len(addrs))
	for i := range addrs {
		ptrs[i] = &addrs[i]
	}
	pack.Strings(ptrs...)
	return out
}

var boolTrue, boolFalse = true, false

// sharedBool points to one of two shared values, so that cached endpoints
// hold no bools of their own.
func sharedBool(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &boolTrue
	}
	return &boolFalse
}

// Pods, nodes and namespaces are read for their labels only: the cache
// keeps a labelled (64 bytes plus the shared labels, where a
// PartialObjectMetadata takes 288 and an empty corev1.Pod over 1 KB).
// With a metadata client they arrive as PartialObjectMetadata, their kind
// set by the informer's list and watch (clusterWatch.labelled).

// labelled is what the informers cache of a pod, node or namespace. It
// gives client-go the metadata it keys and versions objects by
// (meta.Accessor) through GetObjectMeta; like every cached object it is
// never modified, and its labels map is shared (labelSets).
type labelled struct {
	namespace, name, resourceVersion string
	labels                           map[string]string
}

// GetObjectKind implements runtime.Object: a labelled has no kind.
func (o *labelled) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object; the copy shares the labels,
// which are never modified.
func (o *labelled) DeepCopyObject() runtime.Object { c := *o; return &c }

// GetObjectMeta implements metav1.ObjectMetaAccessor: a copy of the
// metadata o keeps; setting its fields changes nothing.
func (o *labelled) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: o.namespace, Name: o.name, ResourceVersion: o.resourceVersion, Labels: o.labels}
}

// slimLabelled keeps of m what conversion reads: its name and namespace,
// and of a node only its locality labels.
func (in *interning) slimLabelled(kind string, m metav1.Object) *labelled {
	var keep func(string) bool
	if kind == "Node" {
		keep = func(k string) bool {
			switch k {
			case labelRegion, labelZone, labelSubZone, labelRegionLegacy, labelZoneLegacy:
				return true
			}
			return false
		}
	}
	meta := in.slimMeta(m, keep)
	return &labelled{namespace: meta.Namespace, name: meta.Name, resourceVersion: meta.ResourceVersion, labels: meta.Labels}
}

func (in *interning) slimSecret(s *corev1.Secret) *corev1.Secret {
	out := &corev1.Secret{ObjectMeta: in.slimMeta(s, nil), Data: s.Data}
	for _, k := range []string{labelNetwork, annotationClusterA} {
		if v, ok := s.Annotations[k]; ok {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	return out
}

// slim is the informers' transform: it slims the types above, sharing
// values through in, and passes anything else (e.g.
// DeletedFinalStateUnknown) through.
func (in *interning) slim(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Service:
		return in.slimService(o), nil
	case *discoveryv1.EndpointSlice:
		return in.slimEndpointSlice(o), nil
	case *corev1.Pod:
		return in.slimLabelled("Pod", o), nil
	case *corev1.Node:
		return in.slimLabelled("Node", o), nil
	case *corev1.Namespace:
		return in.slimLabelled("Namespace", o), nil
	case *metav1.PartialObjectMetadata:
		return in.slimLabelled(o.Kind, o), nil
	case *corev1.Secret:
		return in.slimSecret(o), nil
	}
	return obj, nil
}
