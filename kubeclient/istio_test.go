package kubeclient

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/proto"
	apinetworking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

func TestConvert(t *testing.T) {
	t.Parallel()
	vs := &networkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", CreationTimestamp: metav1.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
		Spec: apinetworking.VirtualService{
			Hosts: []string{"orders.shop.svc.cluster.local"},
			Http: []*apinetworking.HTTPRoute{{Route: []*apinetworking.HTTPRouteDestination{
				{Destination: &apinetworking.Destination{Host: "orders.shop.svc.cluster.local", Subset: "v1"}, Weight: 90},
				{Destination: &apinetworking.Destination{Host: "orders.shop.svc.cluster.local", Subset: "v2"}, Weight: 10},
			}}},
		},
	}
	dr := &networkingv1.DestinationRule{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-dr"},
		Spec: apinetworking.DestinationRule{Host: "orders.shop.svc.cluster.local",
			Subsets: []*apinetworking.Subset{{Name: "v1", Labels: map[string]string{"version": "v1"}}}},
	}
	se := &networkingv1.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "pay"},
		Spec: apinetworking.ServiceEntry{Hosts: []string{"pay.ext.example"}, Ports: []*apinetworking.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}},
			WorkloadSelector: &apinetworking.WorkloadSelector{Labels: map[string]string{"app": "pay"}}}}
	we := &networkingv1.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "vm-1"},
		Spec: apinetworking.WorkloadEntry{Address: "10.1.0.1", Labels: map[string]string{"app": "pay"}}}
	tests := []struct {
		name       string
		obj        any
		wantOK     bool
		wantKind   string
		wantName   string
		wantSource string
		wantSpec   proto.Message
	}{
		{name: "virtual service", obj: vs, wantOK: true, wantKind: KindVirtualService, wantName: "orders",
			wantSource: "shop/orders (east)", wantSpec: &vs.Spec},
		{name: "destination rule", obj: dr, wantOK: true, wantKind: KindDestinationRule, wantName: "orders-dr",
			wantSource: "shop/orders-dr (east)", wantSpec: &dr.Spec},
		{name: "service entry", obj: se, wantOK: true, wantKind: KindServiceEntry, wantName: "pay",
			wantSource: "shop/pay (east)", wantSpec: &se.Spec},
		{name: "workload entry", obj: we, wantOK: true, wantKind: KindWorkloadEntry, wantName: "vm-1",
			wantSource: "shop/vm-1 (east)", wantSpec: &we.Spec},
		{name: "tombstone", obj: cache.DeletedFinalStateUnknown{Key: "shop/orders", Obj: vs}},
		{name: "other type", obj: &metav1.Status{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o, ok := Convert(tc.obj, "east")
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tc.wantOK)
			}
			if !ok {
				return
			}
			if o.Kind != tc.wantKind || o.Namespace != "shop" || o.Name != tc.wantName || o.Source != tc.wantSource {
				t.Errorf("got %s %s/%s from %q, want %s shop/%s from %q", o.Kind, o.Namespace, o.Name, o.Source, tc.wantKind, tc.wantName, tc.wantSource)
			}
			if want := tc.obj.(metav1.Object).GetCreationTimestamp().Time; !o.Created.Equal(want) {
				t.Errorf("created = %v, want %v", o.Created, want)
			}
			if !proto.Equal(o.Spec, tc.wantSpec) {
				t.Errorf("spec = %v, want %v", o.Spec, tc.wantSpec)
			}
			if o.Spec != tc.wantSpec {
				t.Error("spec is a copy, not the cached object's own message (one copy per object)")
			}
		})
	}
}

// TestConvertedSpecsPassTheGate: what Convert returns is what the
// istioconfig gate and the serviceentry registry read (the v1alpha3
// message types).
func TestConvertedSpecsPassTheGate(t *testing.T) {
	t.Parallel()
	o, _ := Convert(&networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "b"}}, "c")
	if _, ok := o.Spec.(*apinetworking.VirtualService); !ok {
		t.Fatalf("spec is %T, want *v1alpha3.VirtualService", o.Spec)
	}
}

// TestTransformKeepsWhatConvertReads: the informers cache an object's
// conversion and nothing else of the typed object (metadata, status); its
// spec is equal to the typed one but not inside it, label maps of
// endpoints are shared among objects, a relist of an unchanged
// resourceVersion keeps the cached object, and client-go can key and
// version what is cached.
func TestTransformKeepsWhatConvertReads(t *testing.T) {
	t.Parallel()
	var held []map[string]string // ShareLabels: the first of equal maps
	share := func(m map[string]string) map[string]string {
		for _, h := range held {
			if maps.Equal(h, m) {
				return h
			}
		}
		held = append(held, m)
		return m
	}
	w := NewIstioWatch(IstioOptions{Clusters: []Cluster{{Name: "east"}}, Kinds: []string{KindServiceEntry}, ShareLabels: share})
	c := w.clusters[0]
	store := cache.NewStore(cache.DeletionHandlingMetaNamespaceKeyFunc)
	tr := c.transform(store)
	se := func(rv string) *networkingv1.ServiceEntry {
		return &networkingv1.ServiceEntry{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "pay", ResourceVersion: rv, UID: "0b0e5a6e-3c1f-4a39-9b62-0c1d2e3f4a5b",
				CreationTimestamp: metav1.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
				Annotations:       map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
				Labels:            map[string]string{"a": "b"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
			Spec: apinetworking.ServiceEntry{Hosts: []string{"pay.ext.example"}, Ports: []*apinetworking.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}},
				Endpoints: []*apinetworking.WorkloadEntry{{Address: "10.0.0.1", Labels: map[string]string{"version": "v1"}},
					{Address: "10.0.0.2", Labels: map[string]string{"version": "v1"}}}},
		}
	}
	in := se("7")
	want, created := proto.Clone(&in.Spec), in.CreationTimestamp.Time
	out, err := tr(in)
	if err != nil {
		t.Fatal(err)
	}
	rec, ok := out.(*cached)
	if !ok {
		t.Fatalf("transform returned %T, want *cached", out)
	}
	got := rec.object()
	if got.Config != &rec.c || got.Config.Spec != any(got.Spec) || got.Config.Kind != got.Kind || got.Config.Source != got.Source ||
		got.Config.Name != got.Name || got.Config.Namespace != got.Namespace || !got.Config.Created.Equal(got.Created) || got.Config.Hash != "" {
		t.Errorf("Config = %+v, want the cached record, as Object without a hash", got.Config)
	}
	if got.Kind != KindServiceEntry || got.Namespace != "shop" || got.Name != "pay" || got.Source != "shop/pay (east)" ||
		got.ResourceVersion != "7" || !got.Created.Equal(created) {
		t.Errorf("cached %+v", got)
	}
	if !proto.Equal(got.Spec, want) {
		t.Errorf("cached spec = %v, want %v", got.Spec, want)
	}
	if got.Spec == proto.Message(&in.Spec) {
		t.Error("cached spec is the typed object's: the typed object stays alive")
	}
	if in.Name != "" || in.Spec.Hosts != nil || in.Labels != nil {
		t.Errorf("typed object after the transform: %+v, want it zeroed", in)
	}
	eps := got.Spec.(*apinetworking.ServiceEntry).GetEndpoints()
	if fmt.Sprintf("%p", eps[0].GetLabels()) != fmt.Sprintf("%p", eps[1].GetLabels()) {
		t.Error("equal endpoint label maps are not shared")
	}
	// What client-go reads of a cached object.
	if key, err := cache.MetaNamespaceKeyFunc(rec); err != nil || key != "shop/pay" {
		t.Errorf("key = %q, %v; want shop/pay", key, err)
	}
	m := rec.GetObjectMeta()
	if m.GetResourceVersion() != "7" || m.GetName() != "pay" || m.GetNamespace() != "shop" || len(m.GetLabels()) != 0 ||
		len(m.GetAnnotations()) != 0 || m.GetManagedFields() != nil || m.GetUID() != "" {
		t.Errorf("cached metadata = %+v, want namespace, name and resourceVersion only", m)
	}
	if again, _ := tr(rec); again != rec {
		t.Error("transform of a cached object is not the object itself")
	}
	if err := store.Add(rec); err != nil {
		t.Fatal(err)
	}
	n := w.Conversions()
	again := se("7")
	if relisted, _ := tr(again); relisted != rec || w.Conversions() != n || again.Name != "" {
		t.Error("a relist of an unchanged resourceVersion converted the object again, or kept the typed one")
	}
	if updated, _ := tr(se("8")); updated == rec || w.Conversions() != n+1 {
		t.Error("a new resourceVersion was not converted")
	}
	if other, _ := tr(&metav1.Status{}); other == nil {
		t.Error("transform dropped an object of another type")
	}
}

func TestExplain(t *testing.T) {
	t.Parallel()
	gr := schema.GroupResource{Group: "networking.istio.io", Resource: "virtualservices"}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{name: "no CRDs", err: fmt.Errorf("virtualservices: %w", apierrors.NewNotFound(gr, "")), want: "install Istio's CRDs"},
		{name: "no rights", err: fmt.Errorf("virtualservices: %w", apierrors.NewForbidden(gr, "", errors.New("no"))), want: "grant get, list and watch on virtualservices, destinationrules of"},
		{name: "other", err: errors.New("connection refused"), want: "connection refused"},
	}
	c := NewIstioWatch(IstioOptions{Clusters: []Cluster{{Name: "east"}}, Kinds: []string{KindVirtualService, KindDestinationRule}}).clusters[0]
	for _, tc := range tests {
		if got := c.explain(tc.err); !strings.Contains(got, tc.want) || !strings.HasPrefix(got, tc.err.Error()) {
			t.Errorf("%s: explain = %q, want the error and %q", tc.name, got, tc.want)
		}
	}
	se := NewIstioWatch(IstioOptions{Clusters: []Cluster{{Name: "east"}}, Kinds: []string{KindServiceEntry, KindWorkloadEntry}}).clusters[0]
	if got := se.explain(tests[1].err); !strings.Contains(got, "grant get, list and watch on serviceentries, workloadentries of networking.istio.io") {
		t.Errorf("explain for a ServiceEntry reader = %q, want the resources it reads named", got)
	}
}

// TestPartsConvertsChangedObjectsOnly: Parts converts an object again only
// when its resourceVersion changed; an unchanged one is returned with the
// same Spec pointer, and a deleted one leaves the cache.
// vs is VirtualService shop/vsNN of resourceVersion rv.
func vs(i int, rv string) *networkingv1.VirtualService {
	v := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("vs%02d", i), ResourceVersion: rv}}
	v.Spec.Hosts = []string{fmt.Sprintf("h%d.shop.svc.cluster.local", i)}
	return v
}

func TestPartsConvertsChangedObjectsOnly(t *testing.T) {
	t.Parallel()
	inf := NewInformer("virtualservices", &cache.ListWatch{}, &networkingv1.VirtualService{}, nil)
	w := NewIstioWatch(IstioOptions{Clusters: []Cluster{{Name: "east"}}, Kinds: []string{KindVirtualService}})
	c := w.clusters[0]
	c.informers, c.synced = []*Informer{inf}, true
	store := transformed{inf.GetStore(), c.transform(inf.GetStore())}
	for i := range 50 {
		if err := store.Add(vs(i, "1")); err != nil {
			t.Fatal(err)
		}
	}
	specs := func() map[string]proto.Message {
		out := map[string]proto.Message{}
		for _, o := range w.Parts()[0].Objects {
			out[o.Name] = o.Spec
		}
		return out
	}
	first := specs()
	if len(first) != 50 || w.Conversions() != 50 {
		t.Fatalf("first Parts: %d objects, %d conversions; want 50, 50", len(first), w.Conversions())
	}
	second := specs()
	if w.Conversions() != 50 {
		t.Fatalf("unchanged objects converted again: %d conversions, want 50", w.Conversions())
	}
	for n, s := range second {
		if first[n] != s {
			t.Fatalf("%s: unchanged object has a new Spec pointer", n)
		}
	}

	// One event: one object updated, one deleted.
	upd := vs(7, "2")
	upd.Spec.Hosts = []string{"new.shop.svc.cluster.local"}
	if err := store.Update(upd); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(vs(9, "1")); err != nil {
		t.Fatal(err)
	}
	third := specs()
	if got := w.Conversions() - 50; got != 1 {
		t.Fatalf("one update converted %d objects, want 1", got)
	}
	if len(third) != 49 || third["vs07"] == first["vs07"] || third["vs07"].(*apinetworking.VirtualService).GetHosts()[0] != "new.shop.svc.cluster.local" {
		t.Fatalf("after the update: %d objects, vs07 = %v", len(third), third["vs07"])
	}
	if third["vs08"] != first["vs08"] {
		t.Fatal("unchanged vs08 re-converted")
	}
	// An object re-created under the same name with a new resourceVersion
	// is converted again.
	if err := store.Add(vs(9, "3")); err != nil {
		t.Fatal(err)
	}
	if specs(); w.Conversions() != 52 {
		t.Fatalf("re-created object: %d conversions, want 52", w.Conversions())
	}
}

// TestDeltasConvertOnlyMarkedObjects: after the first (full) read, Deltas
// converts only the objects the event handlers marked, reports
// deletions, and lists nothing else.
func TestDeltasConvertOnlyMarkedObjects(t *testing.T) {
	t.Parallel()
	inf := NewInformer("virtualservices", &cache.ListWatch{}, &networkingv1.VirtualService{}, nil)
	w := NewIstioWatch(IstioOptions{Clusters: []Cluster{{Name: "east"}}, Kinds: []string{KindVirtualService}})
	c := w.clusters[0]
	c.informers, c.full = []*Informer{inf}, true
	store := transformed{inf.GetStore(), c.transform(inf.GetStore())}
	if d := w.Deltas()[0]; d.Full || len(d.Objects) != 0 || d.Synced {
		t.Fatalf("before the sync: %+v, want state only", d)
	}
	for i := range 50 {
		o, _ := store.tr(vs(i, "1"))
		if err := store.Store.Add(o); err != nil {
			t.Fatal(err)
		}
		c.mark(o, false)
	}
	c.synced = true
	if d := w.Deltas()[0]; !d.Full || len(d.Objects) != 50 || w.Conversions() != 50 {
		t.Fatalf("first read: full=%v, %d objects, %d conversions; want full, 50, 50", d.Full, len(d.Objects), w.Conversions())
	}
	if d := w.Deltas()[0]; d.Full || len(d.Objects) != 0 || len(d.Deleted) != 0 || w.Conversions() != 50 {
		t.Fatalf("no event: %+v, %d conversions; want nothing", d, w.Conversions())
	}
	typed := vs(7, "2")
	typed.Spec.Hosts = []string{"new.shop.svc.cluster.local"}
	upd, _ := store.tr(typed)
	if err := store.Store.Update(upd); err != nil {
		t.Fatal(err)
	}
	c.mark(upd, false)
	gone, _, _ := store.Store.GetByKey("shop/vs09")
	c.mark(cache.DeletedFinalStateUnknown{Key: "shop/vs09", Obj: gone}, true)
	d := w.Deltas()[0]
	if got := w.Conversions() - 50; got != 1 || len(d.Objects) != 1 || d.Objects[0].Name != "vs07" ||
		d.Objects[0].Spec.(*apinetworking.VirtualService).GetHosts()[0] != "new.shop.svc.cluster.local" {
		t.Fatalf("one update: %d conversions, objects %+v; want vs07 converted once", got, d.Objects)
	}
	if want := []ObjectKey{{KindVirtualService, "shop", "vs09"}}; len(d.Deleted) != 1 || d.Deleted[0] != want[0] {
		t.Fatalf("deleted = %v, want %v", d.Deleted, want)
	}
	// An update event of an unchanged resourceVersion (a resync) converts
	// nothing and hands back the same Spec.
	resync, _ := store.tr(vs(8, "1"))
	c.mark(resync, false)
	if d := w.Deltas()[0]; w.Conversions() != 51 || len(d.Objects) != 1 {
		t.Fatalf("resync of vs08: %d conversions, %d objects; want 51, 1", w.Conversions(), len(d.Objects))
	}
}

// transformed is a store whose Add, Update and Delete take typed objects
// through an informer's transform first, as the informer does.
type transformed struct {
	cache.Store
	tr cache.TransformFunc
}

func (s transformed) Add(obj any) error {
	o, err := s.tr(obj)
	if err != nil {
		return err
	}
	return s.Store.Add(o)
}

func (s transformed) Update(obj any) error { return s.Add(obj) }

func (s transformed) Delete(obj any) error {
	o, err := s.tr(obj)
	if err != nil {
		return err
	}
	return s.Store.Delete(o)
}

// TestTransformHoldsNoDecodedString: a cached record's namespace, name,
// source and resourceVersion are one new string, none of the typed
// object's, its cache key is the start of that string, and a
// VirtualService's destination hosts equal to one of its
// hosts are that host's string; the values are unchanged.
func TestTransformHoldsNoDecodedString(t *testing.T) {
	t.Parallel()
	w := NewIstioWatch(IstioOptions{Clusters: []Cluster{{Name: "east"}}, Kinds: []string{KindVirtualService}})
	tr := w.clusters[0].transform(cache.NewStore(cache.DeletionHandlingMetaNamespaceKeyFunc))
	host := "orders.shop.svc.cluster.local"
	in := &networkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", ResourceVersion: "42"},
		Spec: apinetworking.VirtualService{Hosts: []string{strings.Clone(host)},
			Http: []*apinetworking.HTTPRoute{{Route: []*apinetworking.HTTPRouteDestination{
				{Destination: &apinetworking.Destination{Host: strings.Clone(host), Subset: "v1"}},
				{Destination: &apinetworking.Destination{Host: "other.shop.svc.cluster.local"}},
			}}},
			Tcp: []*apinetworking.TCPRoute{{Route: []*apinetworking.RouteDestination{{Destination: &apinetworking.Destination{Host: strings.Clone(host)}}}}}},
	}
	want := proto.Clone(&in.Spec)
	decoded := []string{in.Namespace, in.Name, in.ResourceVersion}
	out, err := tr(in)
	if err != nil {
		t.Fatal(err)
	}
	rec := out.(*cached)
	got := rec.object()
	if got.Namespace != "shop" || got.Name != "orders" || got.Source != "shop/orders (east)" || got.ResourceVersion != "42" {
		t.Fatalf("got %q %q %q %q", got.Namespace, got.Name, got.Source, got.ResourceVersion)
	}
	data := func(s string) *byte { return unsafe.StringData(s) }
	if data(got.Namespace) != data(got.Source) || data(got.Name) != (*byte)(unsafe.Add(unsafe.Pointer(data(got.Source)), len("shop/"))) ||
		data(got.ResourceVersion) != (*byte)(unsafe.Add(unsafe.Pointer(data(got.Source)), len(got.Source))) {
		t.Error("namespace, name, source and resourceVersion are not one string")
	}
	key, err := cachedKey(rec)
	if want, _ := cache.MetaNamespaceKeyFunc(rec); err != nil || key != want || data(key) != data(got.Source) {
		t.Errorf("cachedKey = %q, %v; want %q, the start of the source", key, err, want)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "shop/orders", Obj: rec}
	if k, err := cachedKey(tomb); err != nil || k != "shop/orders" {
		t.Errorf("cachedKey of a tombstone = %q, %v", k, err)
	}
	for _, s := range decoded {
		for _, k := range []string{got.Namespace, got.Name, got.ResourceVersion} {
			if data(s) == data(k) {
				t.Errorf("%q is the typed object's string", k)
			}
		}
	}
	if !proto.Equal(got.Spec, want) {
		t.Fatalf("spec = %v, want %v", got.Spec, want)
	}
	vs := got.Spec.(*apinetworking.VirtualService)
	h := data(vs.Hosts[0])
	if data(vs.Http[0].Route[0].Destination.Host) != h || data(vs.Tcp[0].Route[0].Destination.Host) != h {
		t.Error("destination hosts equal to the host are not its string")
	}
}
