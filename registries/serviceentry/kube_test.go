package serviceentry

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	apinetworking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/kubeclient"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/filewatch"
	"github.com/meshfed/meshfed/registries/registrytest"
)

func feedWE(cluster, name, addr string) kubeclient.Object {
	return kubeclient.Object{Kind: KindWorkloadEntry, Namespace: "shop", Name: name, Source: "shop/" + name + " (" + cluster + ")",
		Spec: &apinetworking.WorkloadEntry{Address: addr, Labels: map[string]string{"app": "pay"}}}
}

// kubeState reads deltas into a fresh kubeObjects and returns what its
// Publisher holds.
func kubeState(t *testing.T, s *kubeObjects, pub *registries.Publisher[string], deltas []kubeclient.Delta) ([]model.Service, []model.Rejection) {
	t.Helper()
	s.apply(deltas, pub)
	return pub.State()
}

func newKubeTest(clusters int, checked *atomic.Uint64) (*kubeObjects, *registries.Publisher[string]) {
	r := &Registry{common: common}
	pub := registries.NewPublisher(common, registrytest.NewSink(), nil, registries.PublisherOptions[string]{Compare: strings.Compare})
	return newKubeObjects(newKeyed(r), clusters, checked), pub
}

// TestKubeObjects: clusters in order, each sorted; an object equal to an
// earlier cluster's is one object, a differing one is rejected by the
// merge; an unsynced cluster adds nothing; checks name the source.
func TestKubeObjects(t *testing.T) {
	t.Parallel()
	se := kubeclient.Object{Kind: KindServiceEntry, Namespace: "shop", Name: "pay", Source: "shop/pay (east)",
		Spec: &apinetworking.ServiceEntry{Hosts: []string{"pay.ext.example"}, Ports: []*apinetworking.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}},
			WorkloadSelector: &apinetworking.WorkloadSelector{Labels: map[string]string{"app": "pay"}}}}
	deltas := []kubeclient.Delta{
		{Full: true, Part: kubeclient.Part{Name: "east", Synced: true, Objects: []kubeclient.Object{feedWE("east", "vm-2", "10.0.0.2"), se, feedWE("east", "vm-1", "10.0.0.1")}}},
		{Full: true, Part: kubeclient.Part{Name: "west", Synced: true, Objects: []kubeclient.Object{feedWE("west", "vm-1", "10.0.0.1"), feedWE("west", "vm-2", "10.0.0.99"), feedWE("west", "vm-3", "")}}},
		{Part: kubeclient.Part{Name: "north"}},
	}
	s, pub := newKubeTest(3, nil)
	svcs, rej := kubeState(t, s, pub, deltas)
	if got := endpointsOf(svcs, "pay.ext.example"); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Errorf("endpoints = %v, want east's", got)
	}
	if len(rej) != 2 {
		t.Fatalf("rejected:\n%s", reasons(rej))
	}
	want := []string{"shop/vm-2 (west) WorkloadEntry shop/vm-2: object rejected: WorkloadEntry shop/vm-2 is already declared at shop/vm-2 (east)",
		"shop/vm-3 (west)"}
	for _, w := range want {
		if !strings.Contains(reasons(rej), w) {
			t.Errorf("rejections lack %q:\n%s", w, reasons(rej))
		}
	}
	if !strings.Contains(reasons(rej), "spec.address") {
		t.Errorf("vm-3's rejection does not name its field:\n%s", reasons(rej))
	}
	// west's vm-2 deleted: nothing rejected for it any more; east's vm-1
	// deleted: west's equal one is served instead.
	svcs, rej = kubeState(t, s, pub, []kubeclient.Delta{
		{Part: kubeclient.Part{Name: "east", Synced: true}, Deleted: []kubeclient.ObjectKey{{Kind: KindWorkloadEntry, Namespace: "shop", Name: "vm-1"}}},
		{Part: kubeclient.Part{Name: "west", Synced: true}, Deleted: []kubeclient.ObjectKey{{Kind: KindWorkloadEntry, Namespace: "shop", Name: "vm-2"}}},
		{Part: kubeclient.Part{Name: "north"}},
	})
	if got := endpointsOf(svcs, "pay.ext.example"); !slices.Equal(slices.Sorted(slices.Values(got)), []string{"10.0.0.1", "10.0.0.2"}) {
		t.Errorf("after the deletes: endpoints = %v, want vm-1 from west and vm-2 from east", got)
	}
	if len(rej) != 1 || strings.Contains(reasons(rej), "already declared") {
		t.Errorf("after the deletes, rejected:\n%s", reasons(rej))
	}
}

// held counts the objects kubeObjects holds of cluster.
func held(s *kubeObjects, cluster int) int {
	n := 0
	for key := range s.k.recs {
		if s.k.declared(key, cluster) != nil {
			n++
		}
	}
	return n
}

func TestKubeStatus(t *testing.T) {
	t.Parallel()
	starting := []kubeclient.Part{{Name: "east", Synced: true}, {Name: "west"}}
	if decided(starting) {
		t.Error("decided with west neither listed nor failing")
	}
	if st := kubeStatus(starting); st.Failing() {
		t.Errorf("status = %+v, want Synced (nothing failing)", st)
	}
	failing := []kubeclient.Part{{Name: "east", Synced: true}, {Name: "west", Err: "connection refused"}, {Name: "north", Failed: true, Err: "no kubeconfig"}}
	if !decided(failing) {
		t.Error("not decided with every cluster listed or failing")
	}
	if st := kubeStatus(failing); !st.Failing() || st.Invalid ||
		st.Err != "cluster west: connection refused; cluster north: no kubeconfig" {
		t.Errorf("status = %+v, want Degraded naming west and north", st)
	}
}

func TestConfigKubernetes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Kubernetes: &Kubernetes{Clusters: []string{"east"}}}, ""},
		{Config{Options: filewatch.Options{Path: "x.yaml"}, Kubernetes: &Kubernetes{Clusters: []string{"east"}}}, "kubernetes: path/paths and kubernetes are exclusive"},
		{Config{Kubernetes: &Kubernetes{}}, "kubernetes.clusters: want at least one registry of kind kubernetes"},
		{Config{Kubernetes: &Kubernetes{Clusters: []string{"east", "east"}}}, `kubernetes.clusters[1]: "east" is named twice`},
		{Config{Kubernetes: &Kubernetes{Clusters: []string{"east"}, Namespaces: []string{""}}}, "kubernetes.namespaces[0]: is empty"},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.HasPrefix(err.Error(), tc.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.cfg.Kubernetes, err, tc.want)
		}
	}
	// A cluster whose block was not handed over fails when connecting,
	// naming it.
	c := &Config{Kubernetes: &Kubernetes{Clusters: []string{"east"}}}
	if _, _, err := c.clusters()[0].Connect(); err == nil || !strings.Contains(err.Error(), `registry "east"`) {
		t.Errorf("Connect without a block = %v", err)
	}
	if c.Files() != nil {
		t.Error("Files() of a kubernetes block names files")
	}
}

// TestKubeObjectsOnlyChangedObjects: a delta checks, converts and
// compares the objects it holds only; an object whose Spec is the one
// checked last time (a resync) is not checked again.
func TestKubeObjectsOnlyChangedObjects(t *testing.T) {
	t.Parallel()
	var objs []kubeclient.Object
	for i := range 50 {
		name := fmt.Sprintf("se-%02d", i)
		objs = append(objs, kubeclient.Object{Kind: KindServiceEntry, Namespace: "shop", Name: name, Source: "shop/" + name + " (east)",
			Spec: &apinetworking.ServiceEntry{Hosts: []string{name + ".ext.example"}, Ports: []*apinetworking.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}},
				Resolution: apinetworking.ServiceEntry_STATIC, Endpoints: []*apinetworking.WorkloadEntry{{Address: "10.0.0.1"}}}})
	}
	var n atomic.Uint64
	s, pub := newKubeTest(1, &n)
	work := func() (uint64, uint64, uint64) { _, conv, cmp := s.k.r.Work(); return n.Load(), conv, cmp }
	kubeState(t, s, pub, []kubeclient.Delta{{Full: true, Part: kubeclient.Part{Name: "east", Synced: true, Objects: objs}}})
	if c, conv, cmp := work(); c != 50 || conv != 50 || cmp != 50 {
		t.Fatalf("first read: %d checked, %d converted, %d compared; want 50 each", c, conv, cmp)
	}
	upd := objs[7]
	upd.Spec = &apinetworking.ServiceEntry{Hosts: []string{"se-07.ext.example"}, Ports: []*apinetworking.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}},
		Resolution: apinetworking.ServiceEntry_STATIC, Endpoints: []*apinetworking.WorkloadEntry{{Address: "10.9.9.9"}}}
	svcs, _ := kubeState(t, s, pub, []kubeclient.Delta{{Part: kubeclient.Part{Name: "east", Synced: true, Objects: []kubeclient.Object{upd, objs[8]}}}})
	if c, conv, cmp := work(); c != 51 || conv != 51 || cmp != 51 {
		t.Fatalf("one update (and a resync of another): %d checked, %d converted, %d compared; want 1 each", c-50, conv-50, cmp-50)
	}
	if got := endpointsOf(svcs, "se-07.ext.example"); !slices.Equal(got, []string{"10.9.9.9"}) || len(svcs) != 50 {
		t.Errorf("after the update: %d services, se-07 at %v", len(svcs), got)
	}
	svcs, _ = kubeState(t, s, pub, []kubeclient.Delta{{Part: kubeclient.Part{Name: "east", Synced: true},
		Deleted: []kubeclient.ObjectKey{{Kind: KindServiceEntry, Namespace: "shop", Name: "se-03"}}}})
	if c, conv, _ := work(); c != 51 || conv != 51 || len(svcs) != 49 || held(s, 0) != 49 {
		t.Fatalf("after a deletion: %d checked, %d converted, %d services, %d held; want 51, 51, 49, 49", c, conv, len(svcs), held(s, 0))
	}
}

// TestKeyedDropsGoneObjects: once every object of a cluster is deleted
// (among them a ServiceEntry whose host another claims, one whose update
// is invalid and keeps its last good version, and a WorkloadEntry),
// nothing is published and keyed holds no record, claim or file of them.
func TestKeyedDropsGoneObjects(t *testing.T) {
	t.Parallel()
	ports := []*apinetworking.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}}
	se := func(name, host, addr string) kubeclient.Object {
		return kubeclient.Object{Kind: KindServiceEntry, Namespace: "shop", Name: name, Source: "shop/" + name + " (east)",
			Spec: &apinetworking.ServiceEntry{Hosts: []string{host}, Ports: ports, Resolution: apinetworking.ServiceEntry_STATIC,
				Endpoints: []*apinetworking.WorkloadEntry{{Address: addr}}}}
	}
	objs := []kubeclient.Object{se("a", "pay.ext.example", "10.0.0.1"), se("b", "pay.ext.example", "10.0.0.2"),
		se("c", "cart.ext.example", "10.0.0.3"), feedWE("east", "vm-1", "10.0.0.9")}
	s, pub := newKubeTest(1, nil)
	svcs, rej := kubeState(t, s, pub, []kubeclient.Delta{{Full: true, Part: kubeclient.Part{Name: "east", Synced: true, Objects: objs}}})
	if got := endpointsOf(svcs, "pay.ext.example"); !slices.Equal(got, []string{"10.0.0.1"}) || len(rej) != 1 {
		t.Fatalf("pay at %v (want a's), rejected:\n%s", got, reasons(rej))
	}
	bad := se("c", "cart.ext.example", "10.0.0.4")
	bad.Spec.(*apinetworking.ServiceEntry).Hosts = nil // invalid
	svcs, rej = kubeState(t, s, pub, []kubeclient.Delta{{Part: kubeclient.Part{Name: "east", Synced: true, Objects: []kubeclient.Object{bad}}}})
	if got := endpointsOf(svcs, "cart.ext.example"); !slices.Equal(got, []string{"10.0.0.3"}) || len(rej) != 2 {
		t.Fatalf("cart at %v (want its last good version), rejected:\n%s", got, reasons(rej))
	}
	if len(s.k.recs) != 4 {
		t.Errorf("%d records, want one per object key (4)", len(s.k.recs))
	}
	var gone []kubeclient.ObjectKey
	for _, o := range objs {
		gone = append(gone, kubeclient.ObjectKey{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name})
	}
	svcs, rej = kubeState(t, s, pub, []kubeclient.Delta{{Part: kubeclient.Part{Name: "east", Synced: true}, Deleted: gone}})
	if len(svcs) != 0 || len(rej) != 0 {
		t.Errorf("after deleting everything: %d services, rejected:\n%s", len(svcs), reasons(rej))
	}
	if len(s.k.recs) != 0 || len(s.k.claims) != 0 || len(s.k.files) != 0 || len(s.k.workloads) != 0 {
		t.Errorf("after deleting everything keyed holds %d records, %d claimed hosts, %d files, %d namespaces of workloads",
			len(s.k.recs), len(s.k.claims), len(s.k.files), len(s.k.workloads))
	}
}

// TestKubeOrderIsClusterKindNamespaceName: cluster objects are ordered as
// (cluster, kind, namespace, name), which decides which ServiceEntry
// serves a host: the same order as the path "cluster\x00kind\x00
// namespace\x00name" they were once declared at, whatever the names'
// dashes and dots (which sort below '/').
func TestKubeOrderIsClusterKindNamespaceName(t *testing.T) {
	t.Parallel()
	path := func(at order) string {
		return fmt.Sprintf("%04d\x00%s", at.idx, strings.ReplaceAll(at.path, "/", "\x00"))
	}
	parts := []string{"a", "a-b", "a.b", "ab", "a0", "b", "a-", "z.a-0"}
	var ats []order
	for cl := range 2 {
		for _, kind := range []string{KindServiceEntry, KindWorkloadEntry} {
			for _, ns := range parts {
				for _, name := range parts {
					ats = append(ats, order{kubeKey(kind, ns, name), cl})
				}
			}
		}
	}
	k := &keyed{kube: true}
	for _, a := range ats {
		for _, b := range ats {
			if got, want := k.compare(a, b), strings.Compare(path(a), path(b)); got != want {
				t.Fatalf("compare(%q, %q) = %d, want %d", path(a), path(b), got, want)
			}
		}
	}
	// Two ServiceEntries claiming one host in namespaces "a" and "a-b":
	// "a" comes first ("a/" sorts after "a-b/" as a string).
	se := func(ns string) kubeclient.Object {
		return kubeclient.Object{Kind: KindServiceEntry, Namespace: ns, Name: "pay", Source: ns + "/pay (east)",
			Spec: &apinetworking.ServiceEntry{Hosts: []string{"pay.ext.example"}, Ports: []*apinetworking.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}},
				Resolution: apinetworking.ServiceEntry_STATIC, Endpoints: []*apinetworking.WorkloadEntry{{Address: "10.0.0." + strconv.Itoa(len(ns))}}}}
	}
	s, pub := newKubeTest(1, nil)
	svcs, rej := kubeState(t, s, pub, []kubeclient.Delta{{Full: true, Part: kubeclient.Part{Name: "east", Synced: true, Objects: []kubeclient.Object{se("a-b"), se("a")}}}})
	if got := endpointsOf(svcs, "pay.ext.example"); !slices.Equal(got, []string{"10.0.0.1"}) || len(rej) != 1 || !strings.Contains(reasons(rej), "a-b/pay (east)") {
		t.Errorf("pay at %v (want namespace a's, 10.0.0.1), rejected:\n%s", got, reasons(rej))
	}
}

// TestKubeRelistAndClusters: a full relist that lacks an object removes
// it; an object equal to an earlier cluster's is served once and takes
// over when the earlier one goes; once every cluster's objects are gone,
// keyed holds nothing of them.
func TestKubeRelistAndClusters(t *testing.T) {
	t.Parallel()
	s, pub := newKubeTest(2, nil)
	se := kubeclient.Object{Kind: KindServiceEntry, Namespace: "shop", Name: "pay", Source: "shop/pay (east)",
		Spec: &apinetworking.ServiceEntry{Hosts: []string{"pay.ext.example"}, Ports: []*apinetworking.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}},
			WorkloadSelector: &apinetworking.WorkloadSelector{Labels: map[string]string{"app": "pay"}}}}
	svcs, rej := kubeState(t, s, pub, []kubeclient.Delta{
		{Full: true, Part: kubeclient.Part{Name: "east", Synced: true, Objects: []kubeclient.Object{se, feedWE("east", "vm-1", "10.0.0.1"), feedWE("east", "vm-2", "10.0.0.2")}}},
		{Full: true, Part: kubeclient.Part{Name: "west", Synced: true, Objects: []kubeclient.Object{feedWE("west", "vm-2", "10.0.0.2")}}},
	})
	if got := endpointsOf(svcs, "pay.ext.example"); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"}) || len(rej) != 0 {
		t.Fatalf("endpoints %v, want vm-1 and vm-2 once; rejected:\n%s", got, reasons(rej))
	}
	// east relists without its WorkloadEntries: vm-1 is gone, west's vm-2
	// is served.
	svcs, rej = kubeState(t, s, pub, []kubeclient.Delta{
		{Full: true, Part: kubeclient.Part{Name: "east", Synced: true, Objects: []kubeclient.Object{se}}},
		{Part: kubeclient.Part{Name: "west", Synced: true}},
	})
	if got := endpointsOf(svcs, "pay.ext.example"); !slices.Equal(got, []string{"10.0.0.2"}) || len(rej) != 0 || held(s, 0) != 1 || held(s, 1) != 1 {
		t.Fatalf("after east's relist: endpoints %v (want west's vm-2), %d and %d held; rejected:\n%s", got, held(s, 0), held(s, 1), reasons(rej))
	}
	svcs, rej = kubeState(t, s, pub, []kubeclient.Delta{
		{Full: true, Part: kubeclient.Part{Name: "east", Synced: true}},
		{Part: kubeclient.Part{Name: "west", Synced: true}, Deleted: []kubeclient.ObjectKey{{Kind: KindWorkloadEntry, Namespace: "shop", Name: "vm-2"}}},
	})
	if len(svcs) != 0 || len(rej) != 0 {
		t.Errorf("after deleting everything: %d services, rejected:\n%s", len(svcs), reasons(rej))
	}
	if len(s.k.recs) != 0 || len(s.k.claims) != 0 || len(s.k.files) != 0 || len(s.k.workloads) != 0 || len(s.k.selectors["shop"]) != 0 {
		t.Errorf("after deleting everything keyed holds %d records, %d claimed hosts, %d files, %d namespaces of workloads, %d selectors",
			len(s.k.recs), len(s.k.claims), len(s.k.files), len(s.k.workloads), len(s.k.selectors["shop"]))
	}
}

// TestKubeObjectsMatchFullMerge: after every step of random events in
// three clusters (adds and updates, resyncs of an unchanged object,
// deletes, full relists; objects often equal to another cluster's), what
// kubeObjects publishes is the full merge (merger) of the clusters'
// objects in order — clusters in configured order, each by kind,
// namespace and name — where an object equal to an earlier cluster's is
// the same object.
func TestKubeObjectsMatchFullMerge(t *testing.T) {
	t.Parallel()
	seeded(t, kubeMatchesFullMerge)
}

func kubeMatchesFullMerge(t *testing.T, rnd *rand.Rand) {
	const clusters = 3
	names := []string{"east", "west", "north"}
	// spec returns a new message for variant v of kind (equal variants
	// are equal messages, never the same pointer).
	spec := func(kind string, v int) proto.Message {
		if kind == KindWorkloadEntry {
			addr := fmt.Sprintf("10.1.0.%d", v%4+1)
			if v%5 == 4 {
				addr = "unix:///x" // invalid
			}
			return &apinetworking.WorkloadEntry{Address: addr, Labels: map[string]string{"app": fmt.Sprintf("x%d", v%2)}}
		}
		if v%4 == 3 {
			return &apinetworking.ServiceEntry{Hosts: []string{fmt.Sprintf("h%d.ext.example", v%3)}, Ports: []*apinetworking.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}},
				Resolution: apinetworking.ServiceEntry_STATIC, WorkloadSelector: &apinetworking.WorkloadSelector{Labels: map[string]string{"app": fmt.Sprintf("x%d", v%2)}}}
		}
		port := []uint32{80, 81, 0}[v%3] // 0: invalid
		return &apinetworking.ServiceEntry{Hosts: []string{fmt.Sprintf("h%d.ext.example", v%4), fmt.Sprintf("h%d.ext.example", v%3)},
			Ports:      []*apinetworking.ServicePort{{Name: "http", Number: port, Protocol: "HTTP"}},
			Resolution: apinetworking.ServiceEntry_STATIC, Endpoints: []*apinetworking.WorkloadEntry{{Address: fmt.Sprintf("10.0.0.%d", v%5+1)}}}
	}
	held := make([]map[kubeclient.ObjectKey]kubeclient.Object, clusters) // what each cluster holds
	for i := range held {
		held[i] = map[kubeclient.ObjectKey]kubeclient.Object{}
	}
	s, pub := newKubeTest(clusters, nil)
	full := &merger{common: common, lastGood: map[string]Object{}}
	listAll := func(i int) []kubeclient.Object { return slices.Collect(maps.Values(held[i])) }
	for step := range 300 {
		deltas := make([]kubeclient.Delta, clusters)
		for i := range deltas {
			deltas[i].Part = kubeclient.Part{Name: names[i], Synced: true}
		}
		i := rnd.IntN(clusters)
		key := kubeclient.ObjectKey{Kind: []string{KindServiceEntry, KindWorkloadEntry}[rnd.IntN(2)], Namespace: []string{"a", "a-b"}[rnd.IntN(2)], Name: fmt.Sprintf("o%d", rnd.IntN(3))}
		switch op := rnd.IntN(10); {
		case step == 0:
			for i := range deltas {
				deltas[i].Full = true
			}
		case op < 5: // added or updated
			o := kubeclient.Object{Kind: key.Kind, Namespace: key.Namespace, Name: key.Name,
				Source: key.Namespace + "/" + key.Name + " (" + names[i] + ")", Spec: spec(key.Kind, rnd.IntN(10))}
			held[i][key] = o
			deltas[i].Objects = []kubeclient.Object{o}
		case op < 6: // resynced: the same object again
			if o, ok := held[i][key]; ok {
				deltas[i].Objects = []kubeclient.Object{o}
			}
		case op < 9:
			delete(held[i], key)
			deltas[i].Deleted = []kubeclient.ObjectKey{key}
		default: // relisted, after losing an object while the watch was down
			delete(held[i], key)
			deltas[i].Full = true
		}
		for i := range deltas {
			if deltas[i].Full {
				deltas[i].Objects = listAll(i)
			}
		}
		got, gotRej := kubeState(t, s, pub, deltas)

		var all []Object
		for i := range clusters {
			for _, k := range slices.SortedFunc(maps.Keys(held[i]), func(a, b kubeclient.ObjectKey) int {
				return strings.Compare(a.Kind+"\x00"+a.Namespace+"\x00"+a.Name, b.Kind+"\x00"+b.Namespace+"\x00"+b.Name)
			}) {
				f := held[i][k]
				var first proto.Message
				for j := range i {
					if o, ok := held[j][k]; ok {
						first = o.Spec
						break
					}
				}
				if first != nil && proto.Equal(first, f.Spec) {
					continue // the same object as an earlier cluster's
				}
				o := Object{Kind: f.Kind, Namespace: f.Namespace, Name: f.Name, Source: f.Source, Spec: f.Spec}
				check(&o)
				all = append(all, o)
			}
		}
		want, wantRej := full.mergeObjects(all)
		if diff := registrytest.DiffServices(registrytest.Published(common, want), got); diff != "" {
			t.Fatalf("step %d: services differ from the full merge:\n%s", step, diff)
		}
		if diff := cmp.Diff(rejectionSet(wantRej), rejectionSet(gotRej)); diff != "" {
			t.Fatalf("step %d: rejections differ from the full merge (-full +kube):\n%s", step, diff)
		}
	}
	if len(s.k.files) != 0 {
		t.Errorf("%d files held for cluster objects", len(s.k.files))
	}
}
