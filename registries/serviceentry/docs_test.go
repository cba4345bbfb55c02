package serviceentry

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries/registrytest"
)

// entries returns n ServiceEntries (one document each) with inline
// endpoints, the i-th endpoint of entry e at addr(e, i).
func entries(n int, addr func(e, i int) string) string {
	var b strings.Builder
	for e := range n {
		fmt.Fprintf(&b, "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: se-%d, namespace: shop}\nspec:\n  hosts: [se-%d.ext.example]\n  resolution: STATIC\n  ports:\n  - {name: http, number: 80, protocol: HTTP}\n  endpoints:\n", e, e)
		for i := range 2 {
			fmt.Fprintf(&b, "  - {address: %s, labels: {version: v1}}\n", addr(e, i))
		}
	}
	return b.String()
}

func seAddr(e, i int) string { return fmt.Sprintf("10.1.%d.%d", e%250, i+1) }

// selected returns n WorkloadEntries of namespace vm and one
// ServiceEntry selecting them.
func selected(n int, addr func(i int) string) string {
	b := strings.Builder{}
	b.WriteString("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: vms, namespace: vm}\nspec:\n  hosts: [vms.ext.example]\n  resolution: STATIC\n  ports: [{name: http, number: 80, protocol: HTTP}]\n  workloadSelector: {labels: {app: vms}}\n")
	for i := range n {
		fmt.Fprintf(&b, "---\napiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: we-%d, namespace: vm}\nspec: {address: %s, labels: {app: vms}}\n", i, addr(i))
	}
	return b.String()
}

// TestEditWorkPerObject: one edit of one ServiceEntry among many decodes,
// converts and compares that one (counted, not timed); an edit of a
// WorkloadEntry decodes it and converts the one ServiceEntry selecting
// it; an unchanged re-read does nothing; a document that moved to other
// lines is not decoded again. What is published is what the full parse
// and conversion of the files give.
func TestEditWorkPerObject(t *testing.T) {
	t.Parallel()
	const n, nw = 200, 30
	dir := t.TempDir()
	weAddr := func(i int) string { return fmt.Sprintf("10.2.0.%d", i+1) }
	files := map[string]string{"a.yaml": entries(n, seAddr), "b.yaml": selected(nw, weAddr)}
	for name, content := range files {
		write(t, filepath.Join(dir, name), content)
	}
	r, c := newDirRegistry(t, dir)
	sink := registrytest.NewSink()
	loop, err := r.fileWatch().NewLoop(sink)
	if err != nil {
		t.Fatal(err)
	}
	defer loop.Close()
	check := func(step string, decoded, converted, compared uint64) {
		t.Helper()
		d0, c0, k0 := r.Work()
		loop.Reload(true)
		d1, c1, k1 := r.Work()
		if d1-d0 != decoded || c1-c0 != converted || k1-k0 != compared {
			t.Errorf("%s: decoded %d, converted %d, compared %d; want %d, %d, %d", step, d1-d0, c1-c0, k1-k0, decoded, converted, compared)
		}
		var all []Object
		for _, name := range []string{"a.yaml", "b.yaml"} {
			objs, err := Parse(filepath.Join(dir, name), []byte(files[name]))
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, objs...)
		}
		want, wantRej := (&merger{common: c, lastGood: map[string]Object{}}).mergeObjects(all)
		got, gotRej, _ := sink.Last(c.Shard())
		if diff := registrytest.DiffServices(registrytest.Published(c, want), got); diff != "" {
			t.Errorf("%s: published state differs from the full parse:\n%s", step, diff)
		}
		if diff := cmp.Diff(len(wantRej), len(gotRej)); diff != "" {
			t.Errorf("%s: rejections differ: %s", step, diff)
		}
	}
	check("first read", n+nw+1, n+1, n+1)
	files["a.yaml"] = entries(n, func(e, i int) string {
		if e == 123 && i == 1 {
			return "10.9.9.9"
		}
		return seAddr(e, i)
	})
	write(t, filepath.Join(dir, "a.yaml"), files["a.yaml"])
	check("one ServiceEntry edited", 1, 1, 1)
	files["b.yaml"] = selected(nw, func(i int) string {
		if i == 7 {
			return "10.9.9.8"
		}
		return weAddr(i)
	})
	write(t, filepath.Join(dir, "b.yaml"), files["b.yaml"])
	check("one WorkloadEntry edited", 1, 1, 1)
	check("unchanged", 0, 0, 0)
	// A comment line at the top moves every document of a.yaml: none is
	// decoded again, each is converted again (its positions moved).
	files["a.yaml"] = "# moved\n" + files["a.yaml"]
	write(t, filepath.Join(dir, "a.yaml"), files["a.yaml"])
	check("documents moved", 0, n, n)
	got, _, _ := sink.Last(c.Shard())
	if s, ok := registrytest.Find(got, "se-0.ext.example"); !ok || !strings.HasSuffix(strings.Fields(s.Endpoints[0].Origin)[0], "a.yaml:12") {
		t.Errorf("moved endpoint origin: %+v", s.Endpoints)
	}
}

// TestParseDocsErrors: an invalid document and a syntax error read
// document by document say what the full parse says.
func TestParseDocsErrors(t *testing.T) {
	t.Parallel()
	good := entries(20, seAddr)
	cache := &docCache{}
	var w work
	if _, err := parseDocs("a.yaml", []byte(good), cache, &w); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		strings.Replace(good, "number: 80,", "number: 0,", 1+7), // documents 0-7: an invalid port
		strings.Replace(good, "metadata: {name: se-5,", "metadata: {name: se-5, x: [", 1),
	} {
		want, wantErr := Parse("a.yaml", []byte(bad))
		got, err := parseDocs("a.yaml", []byte(bad), cache, &w)
		if fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Errorf("error %v, want %v", err, wantErr)
		}
		if len(got) != len(want) {
			t.Fatalf("%d objects, want %d", len(got), len(want))
		}
		for i := range want {
			if got[i].Source != want[i].Source || fmt.Sprint(got[i].Err) != fmt.Sprint(want[i].Err) || got[i].Hash != want[i].Hash ||
				fmt.Sprint(got[i].Problems) != fmt.Sprint(want[i].Problems) {
				t.Errorf("object %d: %s %v, want %s %v", i, got[i].Source, got[i].Err, want[i].Source, want[i].Err)
			}
		}
	}
}

// TestKeyedMatchesFullMerge: over random edits of a few files —
// duplicate objects, invalid versions, hosts claimed twice, selectors and
// workloads moving between namespaces, files removed — the state
// published key by key is, after every read, what the full merge of
// every file gives with the same history (mergeObjects).
func TestKeyedMatchesFullMerge(t *testing.T) {
	t.Parallel()
	seeded(t, keyedMatchesFullMerge)
}

// seeded runs f in parallel subtests, one per seed of four.
func seeded(t *testing.T, f func(*testing.T, *rand.Rand)) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			f(t, rand.New(rand.NewPCG(22, seed)))
		})
	}
}

func keyedMatchesFullMerge(t *testing.T, rnd *rand.Rand) {
	doc := func() string {
		ns := []string{"a", "b"}[rnd.IntN(2)]
		name := fmt.Sprintf("o%d", rnd.IntN(6))
		switch rnd.IntN(4) {
		case 0:
			port := []int{80, 81, 0}[rnd.IntN(3)] // 0: invalid
			return fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: %s, namespace: %s}\nspec:\n  hosts: [h%d.ext.example, h%d.ext.example]\n  ports: [{name: http, number: %d, protocol: HTTP}]\n  resolution: STATIC\n  endpoints: [{address: 10.0.0.%d}]\n",
				name, ns, rnd.IntN(4), rnd.IntN(4), port, rnd.IntN(9)+1)
		case 1:
			return fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: %s, namespace: %s}\nspec:\n  hosts: [h%d.ext.example]\n  ports: [{name: http, number: 80, protocol: HTTP}]\n  resolution: STATIC\n  workloadSelector: {labels: {app: x%d}}\n",
				name, ns, rnd.IntN(4), rnd.IntN(2))
		default:
			addr := fmt.Sprintf("10.1.0.%d", rnd.IntN(9)+1)
			if rnd.IntN(5) == 0 {
				addr = "unix:///x" // invalid
			}
			return fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: %s, namespace: %s}\nspec: {address: %q, labels: {app: x%d}}\n", name, ns, addr, rnd.IntN(2))
		}
	}
	dir := t.TempDir()
	r, c := newDirRegistry(t, dir)
	sink := registrytest.NewSink()
	loop, err := r.fileWatch().NewLoop(sink)
	if err != nil {
		t.Fatal(err)
	}
	defer loop.Close()
	full := &merger{common: c, lastGood: map[string]Object{}}
	files := map[string][]string{}
	for step := range 150 {
		name := fmt.Sprintf("f%d.yaml", rnd.IntN(3))
		docs := files[name]
		switch op := rnd.IntN(10); {
		case op < 4 || len(docs) == 0:
			docs = slices.Insert(docs, rnd.IntN(len(docs)+1), doc())
		case op < 7:
			docs[rnd.IntN(len(docs))] = doc()
		case op < 9:
			i := rnd.IntN(len(docs))
			docs = slices.Delete(docs, i, i+1)
		default:
			docs = nil
		}
		files[name] = docs
		path := filepath.Join(dir, name)
		if docs == nil {
			delete(files, name)
			if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		} else {
			write(t, path, strings.Join(docs, "---\n"))
		}
		loop.Reload(true)
		var all []Object
		for _, n := range slices.Sorted(maps.Keys(files)) {
			objs, err := Parse(filepath.Join(dir, n), []byte(strings.Join(files[n], "---\n")))
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, objs...)
		}
		want, wantRej := full.mergeObjects(all)
		got, gotRej, _ := sink.Last(c.Shard())
		if diff := registrytest.DiffServices(registrytest.Published(c, want), got); diff != "" {
			t.Fatalf("step %d: services differ from the full merge:\n%s", step, diff)
		}
		if diff := cmp.Diff(rejectionSet(wantRej), rejectionSet(gotRej)); diff != "" {
			t.Fatalf("step %d: rejections differ from the full merge (-full +keyed):\n%s", step, diff)
		}
	}
}

func rejectionSet(rs []model.Rejection) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	slices.Sort(out)
	return out
}

// TestLabelSetsShared: the endpoints of a file that carry the same labels
// share one label map (counted): 40 endpoints, two label sets, two maps;
// the services converted from them hold the same values.
func TestLabelSetsShared(t *testing.T) {
	t.Parallel()
	data := strings.Replace(entries(20, seAddr), "labels: {version: v1}", "labels: {version: v2, track: canary}", 7)
	cache := &docCache{}
	var w work
	objs, err := parseDocs("a.yaml", []byte(data), cache, &w)
	if err != nil {
		t.Fatal(err)
	}
	sets := map[uintptr]map[string]string{} // by identity
	n := 0
	for _, o := range objs {
		for _, we := range o.Spec.(*networking.ServiceEntry).GetEndpoints() {
			sets[reflect.ValueOf(we.GetLabels()).Pointer()] = we.GetLabels()
			n++
		}
	}
	if n != 40 || len(sets) != 2 {
		t.Errorf("%d endpoints hold %d distinct label maps, want 40 and 2: %v", n, len(sets), slices.Collect(maps.Values(sets)))
	}
	want, _ := Parse("a.yaml", []byte(data))
	for i := range want {
		if !proto.Equal(want[i].Spec, objs[i].Spec) {
			t.Fatalf("object %d differs from the full parse: %v, want %v", i, objs[i].Spec, want[i].Spec)
		}
	}
}

// TestKeyedHoldsCurrentParse: after edits of some documents of a file
// (one that moves the lines of the documents below it), the objects in
// force and the WorkloadEntries point into the file's current parse, not
// into a superseded one, which would then stay held (a whole file's
// objects per edited object); what is published is the same as a fresh
// read of the file.
func TestKeyedHoldsCurrentParse(t *testing.T) {
	t.Parallel()
	doc := func(i, addr int, comment bool) string {
		c := ""
		if comment {
			c = "# moved\n"
		}
		if i%2 == 1 {
			return fmt.Sprintf("%sapiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: vm-%d, namespace: shop}\nspec: {address: 10.1.0.%d, labels: {app: pay}}\n", c, i, addr)
		}
		return fmt.Sprintf("%sapiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: se-%d, namespace: shop}\nspec:\n  hosts: [se-%d.ext.example]\n  ports: [{name: http, number: 80, protocol: HTTP}]\n  resolution: STATIC\n  workloadSelector: {labels: {app: pay}}\n", c, i, i)
	}
	addrs := []int{1, 1, 1, 1, 1, 1}
	comments := make([]bool, len(addrs))
	file := func() string {
		var docs []string
		for i, a := range addrs {
			docs = append(docs, doc(i, a, comments[i]))
		}
		return strings.Join(docs, "---\n")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "f.yaml")
	write(t, path, file())
	r, c := newDirRegistry(t, dir)
	k := newKeyed(r)
	w := r.fileWatch()
	w.Parse, w.Publish = func(p string, data []byte) ([]Object, error) {
		if k.caches[p] == nil {
			k.caches[p] = &docCache{}
		}
		return parseDocs(p, data, k.caches[p], &r.work)
	}, k.publish
	sink := registrytest.NewSink()
	loop, err := w.NewLoop(sink)
	if err != nil {
		t.Fatal(err)
	}
	defer loop.Close()
	for step, edit := range []func(){
		func() { addrs[1]++ },
		func() { addrs[3]++ },
		func() { comments[0] = true }, // every document below moves a line
		func() { addrs[5]++ },
	} {
		edit()
		write(t, path, file())
		loop.Reload(true)
		cur := k.files[path]
		current := func(o *Object) bool {
			for i := range cur {
				if o == &cur[i] {
					return true
				}
			}
			return false
		}
		for key, rec := range k.recs {
			if rec.inForce.obj != nil && !current(rec.inForce.obj) {
				t.Errorf("step %d: %s: the version in force is held from a superseded parse", step, key)
			}
		}
		for _, wl := range k.workloads["shop"] {
			if !current(wl.obj) {
				t.Errorf("step %d: WorkloadEntry %s is held from a superseded parse", step, wl.obj.Name)
			}
		}
		objs, err := Parse(path, []byte(file()))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := (&merger{common: c, lastGood: map[string]Object{}}).mergeObjects(objs)
		got, _, _ := sink.Last(c.Shard())
		if diff := registrytest.DiffServices(registrytest.Published(c, want), got); diff != "" {
			t.Errorf("step %d: services differ from a fresh read:\n%s", step, diff)
		}
	}
}
