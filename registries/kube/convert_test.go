package kube

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries/registrytest"
)

var testCluster = clusterInfo{registry: "east", cluster: "east", network: "east-net", domain: "svc.cluster.local"}

// fakeLookups serves pod labels and node localities from maps.
type fakeLookups struct {
	pods  map[string]map[string]string // namespace/name → labels
	nodes map[string]model.Locality
}

func (f fakeLookups) podLabels(ns, name string) map[string]string { return f.pods[ns+"/"+name] }
func (f fakeLookups) nodeLocality(name string) model.Locality     { return f.nodes[name] }

func svcObj(ns, name string, mut func(*corev1.Service), ports ...corev1.ServicePort) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", Ports: ports},
	}
	if mut != nil {
		mut(s)
	}
	return s
}

func svcPort(name string, port int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, Protocol: corev1.ProtocolTCP}
}

type epSpec struct {
	addr                        string
	ready, serving, terminating *bool
	node, zone, pod             string
}

func sliceObj(ns, name, svc string, af discoveryv1.AddressType, ports map[string]int32, eps ...epSpec) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{labelServiceName: svc}},
		AddressType: af,
	}
	for n, p := range ports {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr.To(n), Port: ptr.To(p), Protocol: ptr.To(corev1.ProtocolTCP)})
	}
	for _, e := range eps {
		ep := discoveryv1.Endpoint{Addresses: []string{e.addr},
			Conditions: discoveryv1.EndpointConditions{Ready: e.ready, Serving: e.serving, Terminating: e.terminating}}
		if e.node != "" {
			ep.NodeName = ptr.To(e.node)
		}
		if e.zone != "" {
			ep.Zone = ptr.To(e.zone)
		}
		if e.pod != "" {
			ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: e.pod}
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

func src() model.Source { return model.Source{Registry: "east", Cluster: "east", Network: "east-net"} }

func TestConvertService(t *testing.T) {
	t.Parallel()
	lk := fakeLookups{
		pods: map[string]map[string]string{"shop/orders-1": {"app": "orders", "version": "v1"}},
		nodes: map[string]model.Locality{
			"node-a": {Region: "eu-west", Zone: "eu-west-1a"},
			"node-b": {Region: "eu-west", Zone: "eu-west-1b", SubZone: "rack7"},
		},
	}
	T, F := ptr.To(true), ptr.To(false)
	for _, tc := range []struct {
		name         string
		svc          *corev1.Service
		slices       []*discoveryv1.EndpointSlice
		want         model.Service
		wantOK       bool
		wantRejected []string // substrings, one per rejection
	}{
		{
			name: "cluster IP with pods, nodes, target ports and health",
			svc:  svcObj("shop", "orders", nil, svcPort("grpc", 8080), svcPort("http-admin", 9090)),
			slices: []*discoveryv1.EndpointSlice{
				sliceObj("shop", "orders-abc", "orders", discoveryv1.AddressTypeIPv4, map[string]int32{"grpc": 18080, "http-admin": 9090},
					epSpec{addr: "192.0.2.1", ready: T, node: "node-a", pod: "orders-1"},
					epSpec{addr: "192.0.2.2", ready: F, serving: T, terminating: T, node: "node-b", zone: "eu-west-1c"},
					epSpec{addr: "192.0.2.3", ready: F, serving: F, terminating: T},
					epSpec{addr: "192.0.2.4", ready: F},
					epSpec{addr: "192.0.2.5"}, // nil ready means ready
				),
			},
			wantOK: true,
			want: model.Service{
				Hostname: "orders.shop.svc.cluster.local",
				Ports: []model.Port{
					{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC},
					{Name: "http-admin", Number: 9090, Protocol: model.ProtocolHTTP},
				},
				Endpoints: []model.Endpoint{
					{Address: "192.0.2.1", Ports: map[string]uint32{"grpc": 18080}, Labels: map[string]string{"app": "orders", "version": "v1"},
						Locality: model.Locality{Region: "eu-west", Zone: "eu-west-1a"}, Health: model.Healthy, Source: src(), Origin: "Pod shop/orders-1"},
					{Address: "192.0.2.2", Ports: map[string]uint32{"grpc": 18080},
						Locality: model.Locality{Region: "eu-west", Zone: "eu-west-1c", SubZone: "rack7"}, Health: model.Draining, Source: src(), Origin: "EndpointSlice shop/orders-abc"},
					{Address: "192.0.2.3", Ports: map[string]uint32{"grpc": 18080}, Health: model.Unhealthy, Source: src(), Origin: "EndpointSlice shop/orders-abc"},
					{Address: "192.0.2.4", Ports: map[string]uint32{"grpc": 18080}, Health: model.Unhealthy, Source: src(), Origin: "EndpointSlice shop/orders-abc"},
					{Address: "192.0.2.5", Ports: map[string]uint32{"grpc": 18080}, Health: model.Healthy, Source: src(), Origin: "EndpointSlice shop/orders-abc"},
				},
			},
		},
		{
			name: "an endpoint in two slices is served once, with its better health",
			svc:  svcObj("shop", "cart", nil, svcPort("http", 80)),
			slices: []*discoveryv1.EndpointSlice{
				sliceObj("shop", "cart-1", "cart", discoveryv1.AddressTypeIPv4, map[string]int32{"http": 80}, epSpec{addr: "192.0.2.9", ready: F}),
				sliceObj("shop", "cart-2", "cart", discoveryv1.AddressTypeIPv4, map[string]int32{"http": 80}, epSpec{addr: "192.0.2.9", ready: T}),
			},
			wantOK: true,
			want: model.Service{
				Hostname:  "cart.shop.svc.cluster.local",
				Ports:     []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}},
				Endpoints: []model.Endpoint{{Address: "192.0.2.9", Health: model.Healthy, Source: src(), Origin: "EndpointSlice shop/cart-2"}},
			},
		},
		{
			name: "the exportTo annotation, as Istio reads it",
			svc: svcObj("shop", "private", func(s *corev1.Service) {
				s.Annotations = map[string]string{annotationExportTo: " ., istio-system ,"}
			}, svcPort("http", 80)),
			wantOK: true,
			want: model.Service{
				Hostname: "private.shop.svc.cluster.local",
				Ports:    []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}},
				ExportTo: []string{".", "istio-system"},
			},
		},
		{
			name:   "a service without endpoints is published, empty",
			svc:    svcObj("shop", "idle", nil, corev1.ServicePort{Port: 7000, AppProtocol: ptr.To("kubernetes.io/h2c")}),
			wantOK: true,
			want: model.Service{
				Hostname: "idle.shop.svc.cluster.local",
				Ports:    []model.Port{{Name: "", Number: 7000, Protocol: model.ProtocolHTTP2}},
			},
		},
		{
			name: "headless with ports: EDS over pod addresses (IPv6 too)",
			svc:  svcObj("db", "pg", func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }, svcPort("tcp-pg", 5432)),
			slices: []*discoveryv1.EndpointSlice{
				sliceObj("db", "pg-v6", "pg", discoveryv1.AddressTypeIPv6, map[string]int32{"tcp-pg": 5432}, epSpec{addr: "2001:db8::1", ready: T}),
			},
			wantOK: true,
			want: model.Service{
				Hostname:  "pg.db.svc.cluster.local",
				Ports:     []model.Port{{Name: "tcp-pg", Number: 5432, Protocol: model.ProtocolTCP}},
				Endpoints: []model.Endpoint{{Address: "2001:db8::1", Health: model.Healthy, Source: src(), Origin: "EndpointSlice db/pg-v6"}},
			},
		},
		{
			name:         "headless without ports: nothing, listed",
			svc:          svcObj("db", "pg-hl", func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }),
			wantRejected: []string{"has no ports"},
		},
		{
			name: "ExternalName: DNS with the external name as endpoint",
			svc: svcObj("ext", "payments", func(s *corev1.Service) {
				s.Spec.Type, s.Spec.ClusterIP, s.Spec.ExternalName = corev1.ServiceTypeExternalName, "", "pay.example.com."
			}, svcPort("https", 443)),
			wantOK: true,
			want: model.Service{
				Hostname: "payments.ext.svc.cluster.local", Resolution: model.ResolutionDNS,
				Ports:     []model.Port{{Name: "https", Number: 443, Protocol: model.ProtocolTCP}},
				Endpoints: []model.Endpoint{{Address: "pay.example.com", Source: src(), Origin: "Service ext/payments"}},
			},
		},
		{
			name: "ExternalName without ports: nothing, listed",
			svc: svcObj("ext", "bare", func(s *corev1.Service) {
				s.Spec.Type, s.Spec.ExternalName = corev1.ServiceTypeExternalName, "bare.example.com"
			}),
			wantRejected: []string{"has no ports"},
		},
		{
			name: "UDP port dropped and listed; FQDN slice ignored and listed",
			svc: svcObj("kube-system", "dns", nil,
				corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}, svcPort("dns-tcp", 53)),
			slices: []*discoveryv1.EndpointSlice{
				sliceObj("kube-system", "dns-fqdn", "dns", discoveryv1.AddressTypeFQDN, map[string]int32{"dns-tcp": 53}, epSpec{addr: "dns.example.com"}),
			},
			wantOK: true,
			want: model.Service{
				Hostname: "dns.kube-system.svc.cluster.local",
				Ports:    []model.Port{{Name: "dns-tcp", Number: 53, Protocol: model.ProtocolTCP}},
			},
			wantRejected: []string{"protocol UDP is not supported", "address type FQDN is not supported"},
		},
		{
			name: "a port the slice does not list is not served by its endpoints",
			svc:  svcObj("shop", "web", nil, svcPort("http", 80), svcPort("grpc", 9090)),
			slices: []*discoveryv1.EndpointSlice{
				sliceObj("shop", "web-a", "web", discoveryv1.AddressTypeIPv4, map[string]int32{"http": 8080}, epSpec{addr: "192.0.2.1", ready: T}),
				sliceObj("shop", "web-b", "web", discoveryv1.AddressTypeIPv4, map[string]int32{"http": 80, "grpc": 9090}, epSpec{addr: "192.0.2.2", ready: T}),
				sliceObj("shop", "web-c", "web", discoveryv1.AddressTypeIPv4, nil, epSpec{addr: "192.0.2.3", ready: T}),
				func() *discoveryv1.EndpointSlice { // a listed port without a number is the service port
					s := sliceObj("shop", "web-d", "web", discoveryv1.AddressTypeIPv4, nil, epSpec{addr: "192.0.2.4", ready: T})
					s.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("http")}}
					return s
				}(),
			},
			wantOK: true,
			want: model.Service{
				Hostname: "web.shop.svc.cluster.local",
				Ports:    []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}, {Name: "grpc", Number: 9090, Protocol: model.ProtocolGRPC}},
				Endpoints: []model.Endpoint{
					{Address: "192.0.2.1", Ports: map[string]uint32{"http": 8080, "grpc": model.NotServed}, Health: model.Healthy, Source: src(), Origin: "EndpointSlice shop/web-a"},
					{Address: "192.0.2.2", Health: model.Healthy, Source: src(), Origin: "EndpointSlice shop/web-b"},
					{Address: "192.0.2.4", Ports: map[string]uint32{"grpc": model.NotServed}, Health: model.Healthy, Source: src(), Origin: "EndpointSlice shop/web-d"},
				},
			},
			wantRejected: []string{"the slice lists none of the service's ports"},
		},
		{
			name:         "only UDP ports: not published",
			svc:          svcObj("x", "udp", nil, corev1.ServicePort{Name: "u", Port: 9999, Protocol: corev1.ProtocolUDP}),
			wantRejected: []string{"protocol UDP"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			svcCopy := tc.svc.DeepCopy()
			var slicesCopy []*discoveryv1.EndpointSlice
			for _, s := range tc.slices {
				slicesCopy = append(slicesCopy, s.DeepCopy())
			}
			got, rejected, ok := convertService(testCluster, tc.svc, tc.slices, lk)
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v (rejected %v)", ok, tc.wantOK, rejected)
			}
			if ok {
				tc.want.Namespace = tc.svc.Namespace // every service is in its namespace
				if d := registrytest.DiffServices([]model.Service{tc.want}, []model.Service{got}); d != "" {
					t.Errorf("service (-want +got):\n%s", d)
				}
			}
			if len(rejected) != len(tc.wantRejected) {
				t.Fatalf("rejected = %v, want %d matching %q", rejected, len(tc.wantRejected), tc.wantRejected)
			}
			for i, r := range rejected {
				if !strings.Contains(r.Reason, tc.wantRejected[i]) || r.Registry != "east" || r.Host != tc.svc.Name+"."+tc.svc.Namespace+".svc.cluster.local" {
					t.Errorf("rejection %d = %+v, want reason containing %q", i, r, tc.wantRejected[i])
				}
			}
			if !reflect.DeepEqual(svcCopy, tc.svc) {
				t.Error("convertService modified the Service")
			}
			for i := range tc.slices {
				if !reflect.DeepEqual(slicesCopy[i], tc.slices[i]) {
					t.Error("convertService modified an EndpointSlice")
				}
			}
		})
	}
}

// TestPodsWithTheSameLabelsShareOneMap: the transform gives pods with the
// same labels one map (built once, its input not kept), and conversion
// hands that map to every endpoint of those pods instead of a copy each.
func TestPodsWithTheSameLabelsShareOneMap(t *testing.T) {
	t.Parallel()
	slim := newInterning().slim
	cached := map[string]map[string]string{}
	for _, name := range []string{"p1", "p2", "p3"} {
		pod := podObj("shop", name, map[string]string{"app": "orders", "version": "v1"})
		out, err := slim(pod)
		if err != nil {
			t.Fatal(err)
		}
		pod.Labels["version"] = "changed" // the cached map is not the decoded one
		cached["shop/"+name] = out.(*labelled).labels
	}
	other, _ := slim(podObj("shop", "p4", map[string]string{"app": "orders", "version": "v2"}))
	cached["shop/p4"] = other.(*labelled).labels

	s := sliceObj("shop", "s", "a", discoveryv1.AddressTypeIPv4, map[string]int32{"http": 80},
		epSpec{addr: "192.0.2.1", pod: "p1"}, epSpec{addr: "192.0.2.2", pod: "p2"}, epSpec{addr: "192.0.2.3", pod: "p3"}, epSpec{addr: "192.0.2.4", pod: "p4"})
	got, _, _ := convertService(testCluster, svcObj("shop", "a", nil, svcPort("http", 80)), []*discoveryv1.EndpointSlice{s}, fakeLookups{pods: cached})
	maps := map[uintptr]int{}
	for _, e := range got.Endpoints {
		maps[reflect.ValueOf(e.Labels).Pointer()]++
	}
	if len(got.Endpoints) != 4 || len(maps) != 2 {
		t.Fatalf("4 endpoints of pods with 2 label sets hold %d maps: %+v", len(maps), got.Endpoints)
	}
	if v := got.Endpoints[0].Labels["version"]; v != "v1" {
		t.Errorf("endpoint of p1 has version %q, want v1", v)
	}
	if v := got.Endpoints[3].Labels["version"]; v != "v2" {
		t.Errorf("endpoint of p4 has version %q, want v2", v)
	}
}

func TestEndpointHealth(t *testing.T) {
	t.Parallel()
	T, F := ptr.To(true), ptr.To(false)
	for _, tc := range []struct {
		name                        string
		ready, serving, terminating *bool
		want                        model.Health
	}{
		{name: "all nil", want: model.Healthy},
		{name: "ready", ready: T, want: model.Healthy},
		{name: "ready and terminating", ready: T, serving: T, terminating: T, want: model.Healthy},
		{name: "serving and terminating", ready: F, serving: T, terminating: T, want: model.Draining},
		{name: "serving, not terminating", ready: F, serving: T, terminating: F, want: model.Unhealthy},
		{name: "terminating, not serving", ready: F, serving: F, terminating: T, want: model.Unhealthy},
		{name: "not ready, serving nil follows ready", ready: F, terminating: T, want: model.Unhealthy},
		{name: "not ready", ready: F, want: model.Unhealthy},
	} {
		got := endpointHealth(discoveryv1.EndpointConditions{Ready: tc.ready, Serving: tc.serving, Terminating: tc.terminating})
		if got != tc.want {
			t.Errorf("%s: health = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPortProtocol(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, appProtocol string
		protocol          corev1.Protocol
		want              model.Protocol
		wantOK            bool
	}{
		{name: "grpc", want: model.ProtocolGRPC, wantOK: true},
		{name: "grpc-orders", want: model.ProtocolGRPC, wantOK: true},
		{name: "grpc-web", want: model.ProtocolHTTP, wantOK: true},
		{name: "http", want: model.ProtocolHTTP, wantOK: true},
		{name: "HTTP-api", want: model.ProtocolHTTP, wantOK: true},
		{name: "http2-x", want: model.ProtocolHTTP2, wantOK: true},
		{name: "h2c", want: model.ProtocolHTTP2, wantOK: true},
		{name: "https", want: model.ProtocolTCP, wantOK: true},
		{name: "tls-x", want: model.ProtocolTCP, wantOK: true},
		{name: "metrics", want: model.ProtocolTCP, wantOK: true},
		{name: "", want: model.ProtocolTCP, wantOK: true},
		{name: "web", appProtocol: "grpc", want: model.ProtocolGRPC, wantOK: true},
		{name: "grpc", appProtocol: "http", want: model.ProtocolHTTP, wantOK: true},
		{name: "web", appProtocol: "kubernetes.io/h2c", want: model.ProtocolHTTP2, wantOK: true},
		{name: "web", appProtocol: "kubernetes.io/ws", want: model.ProtocolHTTP, wantOK: true},
		{name: "grpc", appProtocol: "example.com/custom", want: model.ProtocolGRPC, wantOK: true},
		{name: "dns", protocol: corev1.ProtocolUDP},
		{name: "grpc", protocol: corev1.ProtocolSCTP},
	} {
		p := corev1.ServicePort{Name: tc.name, Protocol: tc.protocol}
		if tc.appProtocol != "" {
			p.AppProtocol = ptr.To(tc.appProtocol)
		}
		got, ok := portProtocol(p)
		if ok != tc.wantOK || got != tc.want {
			t.Errorf("port %q appProtocol %q %s: %q, %v; want %q, %v", tc.name, tc.appProtocol, tc.protocol, got, ok, tc.want, tc.wantOK)
		}
	}
}

func TestSlimKeepsOnlyWhatConversionReads(t *testing.T) {
	t.Parallel()
	slim := newInterning().slim
	svc := svcObj("shop", "orders", func(s *corev1.Service) {
		s.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 1000)}
		s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
		s.Spec.Selector = map[string]string{"app": "orders"}
	}, svcPort("grpc", 8080))
	orig := svc.DeepCopy()
	out, err := slim(svc)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Service)
	if got.Annotations != nil || got.ManagedFields != nil || got.Spec.Selector != nil {
		t.Errorf("slimmed service keeps %+v", got)
	}
	svc.Annotations[annotationExportTo] = "."
	if out, _ := slim(svc); !reflect.DeepEqual(out.(*corev1.Service).Annotations, map[string]string{annotationExportTo: "."}) {
		t.Errorf("slimmed service lost its exportTo annotation: %+v", out.(*corev1.Service).Annotations)
	}
	delete(svc.Annotations, annotationExportTo)
	if got.Name != "orders" || got.Namespace != "shop" || len(got.Spec.Ports) != 1 || got.Spec.ClusterIP != "10.96.0.10" {
		t.Errorf("slimmed service lost what conversion reads: %+v", got)
	}
	if !reflect.DeepEqual(orig, svc) {
		t.Error("slim modified its input")
	}

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{
		labelRegion: "r", labelZone: "z", "kubernetes.io/hostname": "n"}},
		Status: corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"big"}}}}}
	n, _ := slim(node)
	if got := n.(*labelled); !reflect.DeepEqual(got.labels, map[string]string{labelRegion: "r", labelZone: "z"}) || got.name != "n" {
		t.Errorf("slimmed node = %+v", got)
	}

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "shop", Labels: map[string]string{"app": "a"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	p, _ := slim(pod)
	if got := p.(*labelled); got.labels["app"] != "a" || got.name != "p" || got.namespace != "shop" {
		t.Errorf("slimmed pod = %+v", got)
	}

	// As the metadata client delivers them (kind set by the informer).
	pm := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: "n",
		Labels: map[string]string{labelZone: "z", "kubernetes.io/hostname": "n"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}},
		Annotations: map[string]string{"a": "b"}}}
	pn, _ := slim(pm)
	if got := pn.(*labelled); !reflect.DeepEqual(got.labels, map[string]string{labelZone: "z"}) || got.name != "n" {
		t.Errorf("slimmed node metadata = %+v", got)
	}

	if out, _ := slim("other"); out != "other" {
		t.Errorf("slim changed an unknown object: %v", out)
	}
}

// TestSlimEndpointSliceShares: slices listing the same ports share one
// copy of them, and a slimmed slice keeps each endpoint's address and
// target pod in arrays of its own, none of it the decoded object's.
func TestSlimEndpointSliceShares(t *testing.T) {
	t.Parallel()
	ports := map[string]int32{"http": 8080}
	a := sliceObj("shop", "a-1", "a", discoveryv1.AddressTypeIPv4, ports, epSpec{addr: "10.0.0.1", pod: "a-p1"}, epSpec{addr: "10.0.0.2", pod: "a-p2"})
	b := sliceObj("shop", "b-1", "b", discoveryv1.AddressTypeIPv4, ports, epSpec{addr: "10.0.1.1"})
	in := newInterning()
	sa, sb := in.slimEndpointSlice(a), in.slimEndpointSlice(b)
	if len(sa.Ports) != 1 || &sa.Ports[0] != &sb.Ports[0] || *sa.Ports[0].Name != "http" || *sa.Ports[0].Port != 8080 || *sa.Ports[0].Protocol != corev1.ProtocolTCP {
		t.Errorf("ports not shared or changed: %+v, %+v", sa.Ports, sb.Ports)
	}
	if &sa.Ports[0] == &a.Ports[0] || sa.Ports[0].Port == a.Ports[0].Port {
		t.Error("ports point into the decoded slice")
	}
	for i, want := range []struct{ addr, pod string }{{"10.0.0.1", "a-p1"}, {"10.0.0.2", "a-p2"}} {
		e := sa.Endpoints[i]
		if len(e.Addresses) != 1 || e.Addresses[0] != want.addr || e.TargetRef == nil || e.TargetRef.Name != want.pod || e.TargetRef.Kind != "Pod" {
			t.Errorf("endpoint %d = %+v", i, e)
		}
		if &e.Addresses[0] == &a.Endpoints[i].Addresses[0] || e.TargetRef == a.Endpoints[i].TargetRef {
			t.Errorf("endpoint %d points into the decoded slice", i)
		}
	}
	if sa.Name != "a-1" || sa.Namespace != "shop" || sa.Labels[labelServiceName] != "a" || sb.Endpoints[0].TargetRef != nil {
		t.Errorf("slimmed slice = %+v", sa)
	}
}
