package istioconfig

import (
	"cmp"
	"context"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
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
// states, each part's objects sorted by feedCompare.
type feedView struct {
	parts []FeedPart
}

// changedKey is an object a delta changed: part i's key.
type changedKey struct {
	part int
	key  FeedKey
}

// apply takes deltas in. It returns the objects they changed (added,
// updated or deleted), and whether a part's state (Synced, Failed, Err,
// the number of parts) changed or a part was listed in full.
func (v *feedView) apply(deltas []FeedDelta) (changed []changedKey, restate bool) {
	if len(deltas) != len(v.parts) {
		v.parts = make([]FeedPart, len(deltas))
		restate = true
	}
	for i, d := range deltas {
		p := &v.parts[i]
		if p.Name != d.Name || p.Synced != d.Synced || p.Failed != d.Failed || p.Err != d.Err {
			restate = true
		}
		p.Name, p.Synced, p.Failed, p.Err = d.Name, d.Synced, d.Failed, d.Err
		if d.Full {
			restate = true
			p.Objects = slices.SortedFunc(slices.Values(d.Objects), feedCompare)
			continue
		}
		for _, k := range d.Deleted {
			o := FeedObject{Kind: k.Kind, Namespace: k.Namespace, Name: k.Name}
			if j, ok := slices.BinarySearchFunc(p.Objects, o, feedCompare); ok {
				p.Objects = slices.Delete(p.Objects, j, j+1)
				changed = append(changed, changedKey{i, k})
			}
		}
		for _, o := range d.Objects {
			j, ok := slices.BinarySearchFunc(p.Objects, o, feedCompare)
			switch {
			case ok && p.Objects[j].Spec == o.Spec && p.Objects[j].Source == o.Source && p.Objects[j].Created.Equal(o.Created):
				continue // a resync: the same object
			case ok:
				p.Objects[j] = o
			default:
				p.Objects = slices.Insert(p.Objects, j, o)
			}
			changed = append(changed, changedKey{i, FeedKey{o.Kind, o.Namespace, o.Name}})
		}
	}
	return changed, restate
}

// object returns part i's object key, if held.
func (v *feedView) object(i int, k FeedKey) (FeedObject, bool) {
	objs := v.parts[i].Objects
	j, ok := slices.BinarySearchFunc(objs, FeedObject{Kind: k.Kind, Namespace: k.Namespace, Name: k.Name}, feedCompare)
	if !ok {
		return FeedObject{}, false
	}
	return objs[j], true
}

// readFeed turns the parts of f (from view for a DeltaFeed, sorted by
// feedCompare) into documents for the gate, the groups whose last good
// objects stay (parts not synced) and their states. Each object's hash
// is taken from memo while its Spec is the same pointer.
func readFeed(f Feed, view *feedView, memo *objectMemo) (docs []*parsed, keep []string, states []SourceState) {
	var parts []FeedPart
	if view != nil {
		view.apply(f.(DeltaFeed).Deltas())
		parts = view.parts
	} else {
		parts = f.Parts()
		for _, p := range parts {
			slices.SortStableFunc(p.Objects, feedCompare)
		}
	}
	for _, part := range parts {
		st := partState(f.Name(), part)
		states = append(states, st)
		group := feedGroup(f.Name(), part.Name)
		if !part.Synced {
			keep = append(keep, group)
			continue
		}
		for _, o := range part.Objects {
			docs = append(docs, feedDoc(group, o, memo))
		}
	}
	return docs, keep, states
}

// feedDoc is o of the part group as a document for the gate.
func feedDoc(group string, o FeedObject, memo *objectMemo) *parsed {
	return &parsed{kind: o.Kind, namespace: o.Namespace, name: o.Name, source: o.Source, file: group,
		spec: o.Spec, hash: memo.hash(group, o), fromFeed: true, created: o.Created}
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
