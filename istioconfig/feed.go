package istioconfig

import (
	"cmp"
	"context"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/model"
)

// Feed is a config source whose objects arrive already typed from a
// backend that holds them (the Kubernetes source, package istioconfig/crd)
// instead of from files. The Source reads every Feed on each Reload and
// puts its objects through the same gate as the objects of directories:
// validated one by one, an invalid or conflicting object rejected alone
// with its last good version kept (docs/architecture.md §3.6).
type Feed interface {
	// Name is the config source's name (clusters.yaml configSources[].name).
	Name() string
	// Run watches the backends until ctx ends and then returns ctx.Err().
	// It calls changed, which does not block and may be called from any
	// goroutine, after every change of what Parts returns (objects or
	// state). Run is called once.
	Run(ctx context.Context, changed func()) error
	// Parts returns the current state of each backend, in a stable order.
	// It may be called at any time, before and concurrently with Run.
	Parts() []FeedPart
}

// DeltaFeed is a Feed that also tells what changed since its previous
// read, so that the Source's read after one event costs one object
// (kubeclient.IstioWatch.Deltas). The Source then reads it with Deltas
// only, never with Parts, and keeps each part's objects itself.
type DeltaFeed interface {
	Feed
	// Deltas returns one FeedDelta per part, in the order of Parts: what
	// changed since the previous call. Called from one goroutine.
	Deltas() []FeedDelta
}

// FeedKey names an object within a feed part.
type FeedKey struct{ Kind, Namespace, Name string }

// FeedDelta is what changed in one part of a DeltaFeed.
type FeedDelta struct {
	// FeedPart is the part's state; its Objects are the objects added or
	// changed since the previous call (every object when Full).
	FeedPart
	// Full: Objects are every object of the part; any other is gone.
	Full bool
	// Deleted are the objects deleted since the previous call (keys not
	// held are ignored).
	Deleted []FeedKey
}

// FeedPart is one backend of a Feed (for the Kubernetes source, one
// cluster).
type FeedPart struct {
	// Name of the backend ("east").
	Name string
	// Synced: the backend's objects were listed completely at least once,
	// and Objects is complete. It stays true while the backend is
	// unreachable: Objects is then its last known state (stale beats
	// empty). Until then the part's objects are not read; whatever of it
	// was in force stays (nothing, at start).
	Synced bool
	// Failed: the backend cannot be used as configured (bad credentials);
	// it does not keep the source from being ready.
	Failed bool
	// Err is the last list or watch error, "" while connected.
	Err string
	// Objects are the backend's objects (only read when Synced).
	Objects []FeedObject
}

// FeedObject is one object of a FeedPart.
type FeedObject struct {
	// Kind is KindVirtualService, KindDestinationRule or KindSidecar.
	Kind            string
	Namespace, Name string
	// Source names it on /debug/configz, e.g. "shop/orders (east)".
	Source string
	// Created is its creation time: of two objects that claim one host,
	// the older wins (as in Istio), unless the other is in force already.
	Created time.Time
	// Spec is the *networking.VirtualService, *networking.DestinationRule
	// or *networking.Sidecar
	// (istio.io/api networking/v1alpha3, which v1 and v1beta1 alias). It
	// is never modified afterwards. A Feed returns the same pointer again
	// for an object that did not change (kubeclient.IstioWatch does, per
	// resourceVersion): the Source then reuses the object's hash and
	// validation instead of computing them again, so a change of one
	// object costs one hash and one validation. A new pointer is always
	// correct, only slower.
	Spec proto.Message
	// Config, if not nil, is the object as the Source puts it in force,
	// made by the feed with the fields above and no Hash (the same
	// pointer while Spec is: kubeclient.Object.Config). The Source then
	// holds it rather than a copy, and sets its Hash; nobody else
	// modifies it. nil: the Source makes its own.
	Config *model.ConfigObject
}

// Source states on /debug/configz (Status.Sources), named like registry
// states.
const (
	StateStarting = "Starting" // no complete read yet
	StateSynced   = "Synced"   // read and current
	StateDegraded = "Degraded" // backend unreachable: last read kept
	StateFailed   = "Failed"   // cannot start: bad credentials, bad config
)

// SourceState is the state of one config source (one cluster of a
// Kubernetes source).
type SourceState struct {
	// Name is the config source's name.
	Name string `json:"name"`
	// Kind is "dir" or "kubernetes".
	Kind string `json:"kind"`
	// Cluster is the registry name of a Kubernetes source's cluster.
	Cluster string `json:"cluster,omitempty"`
	// State is one of Starting, Synced, Degraded, Failed.
	State string `json:"state"`
	// Error is the last error reading it, "" when none.
	Error string `json:"error,omitempty"`
}

// feedGroup names the objects of one part of a feed the way a file names
// the objects read from it: they are kept together when the part cannot be
// read.
func feedGroup(feed, part string) string { return feedPrefix + feed + "\x00" + part }

const feedPrefix = "feed\x00"

// feedCompare orders feed objects as the strings kind/namespace/name
// would sort, without building them.
func feedCompare(a, b FeedObject) int {
	return joinedCompare([3]string{a.Kind, a.Namespace, a.Name}, [3]string{b.Kind, b.Namespace, b.Name})
}

// joinedCompare compares a[0]+"/"+a[1]+"/"+a[2] with the same of b.
func joinedCompare(a, b [3]string) int {
	ai, aj, bi, bj := 0, 0, 0, 0 // part and byte of each
	next := func(p [3]string, i, j *int) (byte, bool) {
		switch {
		case *j < len(p[*i]):
			c := p[*i][*j]
			*j++
			return c, true
		case *i == 2:
			return 0, false
		}
		*i, *j = *i+1, 0
		return '/', true
	}
	for {
		x, okx := next(a, &ai, &aj)
		y, oky := next(b, &bi, &bj)
		switch {
		case !okx && !oky:
			return 0
		case !okx:
			return -1
		case !oky:
			return 1
		case x != y:
			return cmp.Compare(x, y)
		}
	}
}

// feedView is what the Source holds of a DeltaFeed's parts: their last
// states, each part's objects sorted by feedCompare. Beside each object
// it keeps what the gate derived from it (viewObject): a read after one
// event hashes and validates that object only, without a memo of its own.
type feedView struct {
	parts []viewPart
}

// viewPart is one part of a feedView: FeedPart's state (its Objects
// unused) and its objects.
type viewPart struct {
	FeedPart
	objs []*viewObject
}

// viewObject is an object of a feedView, made once per Spec pointer (a
// new pointer gets a new viewObject): the ConfigObject it is put in force
// as (its Hash "" until hashed: viewDoc) and its validation result.
type viewObject struct {
	obj *model.ConfigObject
	// checked: err is the validation result of the object.
	checked bool
	err     error
}

func newViewObject(o FeedObject) *viewObject {
	if o.Config != nil {
		return &viewObject{obj: o.Config}
	}
	return &viewObject{obj: &model.ConfigObject{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Source: o.Source,
		Created: o.Created, Spec: o.Spec}}
}

// changedKey is an object a delta changed: part i's key.
type changedKey struct {
	part int
	key  FeedKey
}

// viewCompare orders viewObjects by feedCompare.
func viewCompare(a *viewObject, b FeedObject) int {
	return joinedCompare([3]string{a.obj.Kind, a.obj.Namespace, a.obj.Name}, [3]string{b.Kind, b.Namespace, b.Name})
}

// apply takes deltas in. It returns the objects they changed (added,
// updated or deleted), and whether a part's state (Synced, Failed, Err,
// the number of parts) changed or a part was listed in full.
func (v *feedView) apply(deltas []FeedDelta) (changed []changedKey, restate bool) {
	if len(deltas) != len(v.parts) {
		v.parts = make([]viewPart, len(deltas))
		restate = true
	}
	for i, d := range deltas {
		p := &v.parts[i]
		if p.Name != d.Name || p.Synced != d.Synced || p.Failed != d.Failed || p.Err != d.Err {
			restate = true
		}
		p.Name, p.Synced, p.Failed, p.Err = d.Name, d.Synced, d.Failed, d.Err
		if d.Full {
			// A relist: objects whose Spec did not change keep what was
			// derived from them.
			restate = true
			objs := make([]*viewObject, len(d.Objects))
			for j, o := range slices.SortedFunc(slices.Values(d.Objects), feedCompare) {
				objs[j] = p.keep(o)
			}
			p.objs = objs
			continue
		}
		for _, k := range d.Deleted {
			o := FeedObject{Kind: k.Kind, Namespace: k.Namespace, Name: k.Name}
			if j, ok := slices.BinarySearchFunc(p.objs, o, viewCompare); ok {
				p.objs = slices.Delete(p.objs, j, j+1)
				changed = append(changed, changedKey{i, k})
			}
		}
		for _, o := range d.Objects {
			j, ok := slices.BinarySearchFunc(p.objs, o, viewCompare)
			switch {
			case ok && p.objs[j].same(o):
				continue // a resync: the same object
			case ok:
				p.objs[j] = newViewObject(o)
			default:
				p.objs = slices.Insert(p.objs, j, newViewObject(o))
			}
			changed = append(changed, changedKey{i, FeedKey{o.Kind, o.Namespace, o.Name}})
		}
	}
	return changed, restate
}

// same: v is o (the same Spec pointer, source and creation time).
func (v *viewObject) same(o FeedObject) bool {
	return v.obj.Spec == any(o.Spec) && v.obj.Source == o.Source && v.obj.Created.Equal(o.Created)
}

// keep returns the part's viewObject of o when it is the same object,
// else a new one.
func (p *viewPart) keep(o FeedObject) *viewObject {
	if j, ok := slices.BinarySearchFunc(p.objs, o, viewCompare); ok && p.objs[j].same(o) {
		return p.objs[j]
	}
	return newViewObject(o)
}

// object returns part i's object key, if held.
func (v *feedView) object(i int, k FeedKey) (*viewObject, bool) {
	objs := v.parts[i].objs
	j, ok := slices.BinarySearchFunc(objs, FeedObject{Kind: k.Kind, Namespace: k.Namespace, Name: k.Name}, viewCompare)
	if !ok {
		return nil, false
	}
	return objs[j], true
}

// readFeed turns the parts of f (from view for a DeltaFeed, sorted by
// feedCompare) into documents for the gate, the groups whose last good
// objects stay (parts not synced) and their states. A view's objects
// keep their hashes and validation results (viewDoc); a plain Feed's
// hashes are taken from memo while an object's Spec is the same pointer.
func readFeed(f Feed, view *feedView, memo *objectMemo) (docs []*parsed, keep []string, states []SourceState) {
	if view != nil {
		view.apply(f.(DeltaFeed).Deltas())
		for _, part := range view.parts {
			st, group, ok := feedPart(f.Name(), part.FeedPart)
			states = append(states, st)
			if !ok {
				keep = append(keep, group)
				continue
			}
			for _, o := range part.objs {
				docs = append(docs, viewDoc(group, o, memo))
			}
		}
		return docs, keep, states
	}
	parts := f.Parts()
	for _, part := range parts {
		slices.SortStableFunc(part.Objects, feedCompare)
		st, group, ok := feedPart(f.Name(), part)
		states = append(states, st)
		if !ok {
			keep = append(keep, group)
			continue
		}
		for _, o := range part.Objects {
			docs = append(docs, feedDoc(group, o, memo.hash(group, o)))
		}
	}
	return docs, keep, states
}

// feedPart is the state and group of a part of feed, and whether its
// objects are read (it synced).
func feedPart(feed string, part FeedPart) (st SourceState, group string, synced bool) {
	return partState(feed, part), feedGroup(feed, part.Name), part.Synced
}

// feedDoc is o of the part group, of hash hash, as a document for the
// gate.
func feedDoc(group string, o FeedObject, hash string) *parsed {
	return &parsed{kind: o.Kind, namespace: o.Namespace, name: o.Name, source: o.Source, file: group,
		spec: o.Spec, hash: hash, fromFeed: true, created: o.Created}
}

// viewDoc is feedDoc of a view's object, hashed once (counted in memo)
// and validated once (p.view).
func viewDoc(group string, v *viewObject, memo *objectMemo) *parsed {
	o := v.obj
	spec, _ := o.Spec.(proto.Message)
	if o.Hash == "" {
		o.Hash = hashOf(o.Kind, o.Namespace, o.Name, spec)
		memo.hashed.Add(1)
	}
	return &parsed{kind: o.Kind, namespace: o.Namespace, name: o.Name, source: o.Source, file: group,
		spec: spec, hash: o.Hash, fromFeed: true, created: o.Created, view: v}
}

// partState is the state of a feed part on /debug/configz.
func partState(feed string, part FeedPart) SourceState {
	st := SourceState{Name: feed, Kind: "kubernetes", Cluster: part.Name, Error: part.Err}
	switch {
	case part.Failed:
		st.State = StateFailed
	case !part.Synced:
		st.State = StateStarting
	case part.Err != "":
		st.State = StateDegraded
	default:
		st.State = StateSynced
	}
	return st
}
