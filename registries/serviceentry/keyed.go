package serviceentry

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/filewatch"
)

// keyed is one Run's state over files, published under one Publisher key
// per ServiceEntry ("se:" + kind/namespace/name) and one per object with
// rejections ("obj:" + its key). It is the incremental form of
// merger.mergeObjects (same rules: the first declaration in path and
// document order wins, an invalid object keeps its last good version, a
// host is served by the first ServiceEntry in that order claiming it) so
// that an edit costs what it changed (docs/architecture.md §3.1.1): only the
// objects of a file whose parse changed are resolved again, and only the
// ServiceEntries whose object, host outcomes or (with a workloadSelector)
// namespace's WorkloadEntries changed are converted and compared. Used
// from the Run's goroutine only.
//
// Objects read from clusters (kube: runKube's kubeObjects) are declared
// with place, not set: each at order{key, cluster}, in its record only
// (no files entry, no path string), and a later cluster's object equal
// to the first cluster's is one object (not rejected).
type keyed struct {
	r      *Registry
	kube   bool                 // objects from clusters (place), not files (set)
	caches map[string]*docCache // by path

	files map[string][]Object // by path: the objects last resolved (files only)
	recs  map[string]*record  // by object key: its declarations, version in force, share and conversion
	nIn   map[string]int      // objects in force by kind
	nRej  map[string]int      // objects rejected by kind

	claims    map[string][]claimant      // by host: the ServiceEntries in force naming it, in order
	workloads map[string][]forced        // by namespace: the WorkloadEntries in force, in order
	selectors map[string]map[string]bool // by namespace: keys of ServiceEntries with a workloadSelector
}

func newKeyed(r *Registry) *keyed {
	return &keyed{r: r, caches: map[string]*docCache{}, files: map[string][]Object{}, recs: map[string]*record{},
		nIn: map[string]int{}, nRej: map[string]int{}, claims: map[string][]claimant{},
		workloads: map[string][]forced{}, selectors: map[string]map[string]bool{}}
}

// record is keyed's state of one object key, one record per key so that
// the key is held once (docs/architecture.md §8: per-object state at
// size). It is dropped when it holds nothing (idle).
type record struct {
	key     string // the object key (the map's)
	decls   []decl // its declarations in order
	inForce forced // the version in force, its last good one (obj nil: none)
	count   contrib
	conv    entryConv // a ServiceEntry's last conversion (spec nil: none)
}

// idle: nothing declared, in force, counted or converted.
func (r *record) idle() bool {
	return len(r.decls) == 0 && r.inForce.obj == nil && r.count == (contrib{}) && r.conv.spec == nil
}

// rec is key's record, created when missing.
func (k *keyed) rec(key string) *record {
	r := k.recs[key]
	if r == nil {
		r = &record{key: key}
		k.recs[key] = r
	}
	return r
}

// drop removes r's record when it is idle.
func (k *keyed) drop(r *record) {
	if r.idle() {
		delete(k.recs, r.key)
	}
}

// order is where a declaration is: files in path order, documents in
// file order. For objects from clusters (keyed.kube) path is the object
// key and idx the cluster: clusters in configured order, each cluster's
// objects by kind, namespace and name.
type order struct {
	path string
	idx  int
}

// compare orders declarations (see order).
func (k *keyed) compare(a, b order) int {
	if k.kube {
		return cmp.Or(cmp.Compare(a.idx, b.idx), compareKeys(a.path, b.path))
	}
	return cmp.Or(strings.Compare(a.path, b.path), cmp.Compare(a.idx, b.idx))
}

// compareKeys compares two object keys ("kind/namespace/name") as
// (kind, namespace, name): as strings with '/' below every other byte
// (Kubernetes names never hold '/').
func compareKeys(a, b string) int {
	for i := range min(len(a), len(b)) {
		x, y := a[i], b[i]
		if x == '/' {
			x = 0
		}
		if y == '/' {
			y = 0
		}
		if x != y {
			return cmp.Compare(x, y)
		}
	}
	return cmp.Compare(len(a), len(b))
}

// decl is one declaration of an object: obj points into the files slice
// that declares it (never modified, and undeclared before it is
// replaced), so that each object is held once, not once per map.
type decl struct {
	at  order
	obj *Object
}

// forced is an object in force, at the place of its first declaration:
// obj points into a declaring slice (see decl), so the object is held
// once.
type forced struct {
	at  order
	obj *Object
}

// same: the same object at the same place (a decode is the same pointer
// while its bytes and lines are).
func (f forced) same(g forced) bool { return f.at == g.at && sameDecode(*f.obj, *g.obj) }

// contrib is an object's share of the objects gauge, of its key's kind
// (keyKind).
type contrib struct{ in, rej int32 }

// keyKind is the kind of the objects of key (objKey): "" for what is not
// an object.
func keyKind(key string) string {
	kind, _, _ := strings.Cut(key, "/")
	if strings.HasPrefix(key, "?") {
		return ""
	}
	return kind
}

// claimant is host i of a ServiceEntry in force: rec's, whose inForce
// it is while it claims, so that its place is rec.inForce.at (16 B: most
// hosts have one claimant, one per ServiceEntry).
type claimant struct {
	i   int
	rec *record
}

// entryConv is what a ServiceEntry was last converted from: claims is
// nil when every host was served (they are then spec's hosts in order).
type entryConv struct {
	node   *yaml.Node
	spec   proto.Message
	claims []hostClaim
}

// keptClaims is claims as entryConv keeps them: nil when none has a
// reason.
func keptClaims(claims []hostClaim) []hostClaim {
	for _, cl := range claims {
		if cl.reason != "" {
			return claims
		}
	}
	return nil
}

func objKey(o Object) string {
	if o.Kind == "" {
		return "?" + o.Source // not an object: rejected alone, never a duplicate
	}
	return o.Kind + "/" + o.Namespace + "/" + o.Name
}

// sameIdentity: two parses of a file (or two reads of a cluster object)
// hold the very same decodes.
func sameIdentity(a, b []Object) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !sameDecode(a[i], b[i]) || a[i].Source != b[i].Source {
			return false
		}
	}
	return true
}

// sameDecode: the same decode of a document (its YAML node) or the same
// read of a cluster object (its Spec: kubeclient.Object's is the same
// pointer while the object's resourceVersion is).
func sameDecode(a, b Object) bool { return a.Node == b.Node && a.Spec == b.Spec }

// publish implements filewatch.Watch.Publish.
func (k *keyed) publish(files []filewatch.File[[]Object], pub *registries.Publisher[string]) {
	touched := map[string]bool{}
	seen := make(map[string]bool, len(files))
	for _, f := range files {
		seen[f.Path] = true
		k.set(f.Path, f.Value, touched)
	}
	for p := range k.files {
		if !seen[p] {
			k.set(p, nil, touched)
		}
	}
	for p := range k.caches {
		if !seen[p] {
			delete(k.caches, p)
		}
	}
	k.apply(touched, pub)
}

// set makes objs the objects declared at path (a file), in order, and
// marks the object keys it touched.
// Objects identical to those already there (sameIdentity) touch nothing.
func (k *keyed) set(path string, objs []Object, touched map[string]bool) {
	old := k.files[path]
	if sameIdentity(old, objs) {
		return
	}
	for i, o := range old {
		k.undeclare(objKey(o), order{path, i})
		touched[objKey(o)] = true
	}
	for i := range objs {
		key := objKey(objs[i])
		k.declare(key, decl{order{path, i}, &objs[i]})
		touched[key] = true
	}
	if len(objs) == 0 {
		delete(k.files, path)
	} else {
		k.files[path] = objs
	}
}

// apply resolves the touched object keys again, converts the
// ServiceEntries their change affects and sets their Publisher keys.
func (k *keyed) apply(touched map[string]bool, pub *registries.Publisher[string]) {
	convert := map[string]bool{}   // ServiceEntry keys to convert again
	nsChanged := map[string]bool{} // namespaces whose WorkloadEntries changed
	for key := range touched {
		k.resolve(key, pub, convert, nsChanged)
	}
	for ns := range nsChanged {
		for key := range k.selectors[ns] {
			convert[key] = true
		}
	}
	for key := range convert {
		k.convert(key, pub, nsChanged)
	}
	setObjects(k.r.common.Name, k.nIn, k.nRej)
}

// place makes o (nil: none) the object that cluster declares under key,
// and marks key touched unless it is the object declared there already
// (sameDecode). Objects of clusters are held by their records alone:
// declared returns them.
func (k *keyed) place(key string, cluster int, o *Object, touched map[string]bool) {
	old := k.declared(key, cluster)
	if old == o || (old != nil && o != nil && sameDecode(*old, *o) && old.Source == o.Source) {
		return
	}
	if old != nil {
		k.undeclare(key, order{key, cluster})
	}
	if o != nil {
		r := k.rec(key)
		k.declare(key, decl{order{r.key, cluster}, o})
	}
	touched[key] = true
}

// declared is the object cluster declares under key (place), or nil.
func (k *keyed) declared(key string, cluster int) *Object {
	r := k.recs[key]
	if r == nil {
		return nil
	}
	if i, ok := k.search(r.decls, order{key, cluster}); ok {
		return r.decls[i].obj
	}
	return nil
}

// search is where at is, or would be, in decls (in order).
func (k *keyed) search(decls []decl, at order) (int, bool) {
	return slices.BinarySearchFunc(decls, at, func(x decl, at order) int { return k.compare(x.at, at) })
}

func (k *keyed) declare(key string, d decl) {
	r := k.rec(key)
	i, _ := k.search(r.decls, d.at)
	r.decls = slices.Insert(r.decls, i, d)
}

func (k *keyed) undeclare(key string, at order) {
	r := k.recs[key]
	if r == nil {
		return
	}
	if i, ok := k.search(r.decls, at); ok {
		r.decls = slices.Delete(r.decls, i, i+1)
	}
	if len(r.decls) == 0 {
		r.decls = nil
	}
	// Not dropped here: resolve, which every touched key reaches, does.
}

// resolve decides the object key's version in force and its rejections
// (merger.resolve's rules), publishes the rejections, and marks what its
// change affects: the ServiceEntry itself and those claiming its hosts
// (convert), its namespace's selectors (nsChanged).
func (k *keyed) resolve(key string, pub *registries.Publisher[string], convert, nsChanged map[string]bool) {
	r := k.recs[key]
	if r == nil {
		return
	}
	defer k.drop(r)
	ds := r.decls
	var rejected []model.Rejection
	var next *forced
	c := contrib{}
	if len(ds) > 0 {
		first := ds[0]
		o := *first.obj
		subject := func(o Object) string {
			if o.Kind == "" {
				return o.Source
			}
			return o.Source + " " + describe(o)
		}
		if o.Err != nil {
			c.rej++
			// The version in force is the last good one.
			last := r.inForce
			kept := last.obj != nil && o.Kind != ""
			var lastObj Object
			if kept {
				lastObj = *last.obj
			}
			rejected = append(rejected, problemRejections(k.r.common.Name, o, lastObj, kept)...)
			if kept {
				next = &forced{at: first.at, obj: last.obj}
			}
		} else {
			next = &forced{at: first.at, obj: first.obj}
		}
		withSpec := k.firstSpec(ds)
		for j, d := range ds[1:] {
			if repeats(ds, withSpec, j+1) {
				continue // the same object in a later cluster: one object
			}
			c.rej++
			rejected = append(rejected, model.Rejection{Registry: k.r.common.Name, Subject: subject(*d.obj),
				Reason: fmt.Sprintf("object rejected: %s is already declared at %s, which is served", describe(*d.obj), o.Source)})
		}
	}
	if next != nil {
		c.in = 1
	}
	old, kind := r.count, keyKind(key)
	k.nIn[kind] += int(c.in - old.in)
	k.nRej[kind] += int(c.rej - old.rej)
	r.count = c
	pub.Set("obj:"+key, registries.Converted{Rejected: rejected})

	prev := r.inForce
	had := prev.obj != nil
	if had && next != nil && prev.same(*next) {
		if prev.obj != next.obj {
			k.rebind(r, *next)
		}
		return
	}
	if had {
		k.withdraw(r, prev, convert, nsChanged)
		r.inForce = forced{}
	}
	if next != nil {
		r.inForce = *next
		k.enforce(r, *next, convert, nsChanged)
	}
}

// firstSpec is, for objects from clusters (kube), the index of the
// first of a key's declarations ds that has a spec: a later cluster's
// object with an equal spec is the same object (repeats), not declared
// twice. It is -1 for files, which declare nothing twice without a
// rejection.
func (k *keyed) firstSpec(ds []decl) int {
	if !k.kube {
		return -1
	}
	return slices.IndexFunc(ds, func(d decl) bool { return d.obj.Spec != nil })
}

// repeats: declaration i of ds is the same object as declaration first
// (firstSpec), which comes before it.
func repeats(ds []decl, first, i int) bool {
	if first < 0 || i <= first {
		return false
	}
	a, b := ds[first].obj.Spec, ds[i].obj.Spec
	return a == b || proto.Equal(a, b)
}

// rebind points r's version in force, and its place among the
// workloads, at next, the same decode as the one in force (forced.same)
// declared anew: a file's other documents changed, so it was parsed into
// a new slice. Nothing is converted again, but the superseded slice is
// no longer held by the objects it shares with the new one.
func (k *keyed) rebind(r *record, next forced) {
	prev := r.inForce
	r.inForce = next
	if _, ok := prev.obj.Spec.(*networking.WorkloadEntry); ok {
		ws := k.workloads[prev.obj.Namespace]
		if j, ok := slices.BinarySearchFunc(ws, prev.at, func(w forced, at order) int { return k.compare(w.at, at) }); ok && ws[j].obj == prev.obj {
			ws[j] = next
		}
	}
}

// withdraw takes the object in force f out of the host claims, the
// workloads and the selectors.
func (k *keyed) withdraw(r *record, f forced, convert, nsChanged map[string]bool) {
	key := r.key
	switch sp := f.obj.Spec.(type) {
	case *networking.ServiceEntry:
		convert[key] = true
		for i, h := range sp.GetHosts() {
			host := strings.ToLower(strings.TrimSuffix(h, "."))
			cs := slices.DeleteFunc(k.claims[host], func(c claimant) bool { return c.rec == r && c.i == i })
			if len(cs) == 0 {
				delete(k.claims, host)
			} else {
				k.claims[host] = cs
			}
			for _, c := range cs {
				convert[c.rec.key] = true
			}
		}
		if sp.GetWorkloadSelector() != nil {
			delete(k.selectors[f.obj.Namespace], key)
		}
	case *networking.WorkloadEntry:
		ns := f.obj.Namespace
		k.workloads[ns] = slices.DeleteFunc(k.workloads[ns], func(w forced) bool { return w.same(f) })
		if len(k.workloads[ns]) == 0 {
			delete(k.workloads, ns)
		}
		nsChanged[ns] = true
	}
}

// enforce puts the object in force f into the host claims, the workloads
// and the selectors.
func (k *keyed) enforce(r *record, f forced, convert, nsChanged map[string]bool) {
	key := r.key
	switch sp := f.obj.Spec.(type) {
	case *networking.ServiceEntry:
		convert[key] = true
		for i, h := range sp.GetHosts() {
			host := strings.ToLower(strings.TrimSuffix(h, "."))
			c := claimant{i: i, rec: r} // r.inForce is f
			cs := k.claims[host]
			for _, o := range cs {
				convert[o.rec.key] = true
			}
			j, _ := slices.BinarySearchFunc(cs, c, func(x, y claimant) int {
				return cmp.Or(k.compare(x.rec.inForce.at, y.rec.inForce.at), cmp.Compare(x.i, y.i))
			})
			k.claims[host] = slices.Insert(cs, j, c)
		}
		if sp.GetWorkloadSelector() != nil {
			ns := f.obj.Namespace
			if k.selectors[ns] == nil {
				k.selectors[ns] = map[string]bool{}
			}
			k.selectors[ns][key] = true
		}
	case *networking.WorkloadEntry:
		ns := f.obj.Namespace
		ws := k.workloads[ns]
		j, _ := slices.BinarySearchFunc(ws, f.at, func(w forced, at order) int { return k.compare(w.at, at) })
		k.workloads[ns] = slices.Insert(ws, j, f)
		nsChanged[ns] = true
	}
}

// convert converts the ServiceEntry key again if its object, its host
// outcomes or (with a selector) its namespace's WorkloadEntries changed,
// and sets its Publisher key.
func (k *keyed) convert(key string, pub *registries.Publisher[string], nsChanged map[string]bool) {
	r := k.recs[key]
	var f forced
	if r != nil {
		f = r.inForce
	}
	var se *networking.ServiceEntry
	if f.obj != nil {
		se, _ = f.obj.Spec.(*networking.ServiceEntry)
	}
	if se == nil {
		if r != nil && r.conv.spec != nil {
			r.conv = entryConv{}
			k.drop(r)
			pub.Delete("se:" + key)
		}
		return
	}
	domain := normDomain(k.r.common.Domain)
	claims := make([]hostClaim, 0, len(se.GetHosts()))
	for i, h := range se.GetHosts() {
		host := strings.ToLower(strings.TrimSuffix(h, "."))
		cl := hostClaim{i: i, host: host, reason: unservable(host, domain)}
		if w := k.winner(host); cl.reason == "" && (w.rec != r || w.i != i) {
			cl.reason = fmt.Sprintf("host rejected: already served by %s (the first in file order wins)", describe(*w.rec.inForce.obj))
		}
		claims = append(claims, cl)
	}
	prev := r.conv
	kept := keptClaims(claims)
	if prev.spec != nil && prev.node == f.obj.Node && prev.spec == f.obj.Spec && slices.Equal(prev.claims, kept) &&
		(se.GetWorkloadSelector() == nil || !nsChanged[f.obj.Namespace]) {
		return
	}
	r.conv = entryConv{node: f.obj.Node, spec: f.obj.Spec, claims: kept}
	ws := k.workloads[f.obj.Namespace]
	objs := make([]Object, len(ws))
	for i, w := range ws {
		objs[i] = *w.obj
	}
	k.r.work.converted.Add(1)
	k.r.work.compared.Add(1)
	pub.Set("se:"+key, convertEntry(*f.obj, se, claims, objs, k.r.common))
}

// winner is the claimant that serves host: the first in order. (A
// wildcard host or one outside the domain is rejected for itself in every
// ServiceEntry naming it, so its claimants never serve it.)
func (k *keyed) winner(host string) claimant {
	return k.claims[host][0]
}
