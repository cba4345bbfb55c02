package istioconfig

import (
	"context"
	"sort"
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

// readFeed turns the parts of f into documents for the gate, the groups
// whose last good objects stay (parts not synced) and their states. Each
// object's hash is taken from memo while its Spec is the same pointer.
func readFeed(f Feed, memo *objectMemo) (docs []*parsed, keep []string, states []SourceState) {
	for _, part := range f.Parts() {
		st := SourceState{Name: f.Name(), Kind: "kubernetes", Cluster: part.Name, Error: part.Err}
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
		states = append(states, st)
		group := feedGroup(f.Name(), part.Name)
		if !part.Synced {
			keep = append(keep, group)
			continue
		}
		objs := part.Objects
		sort.SliceStable(objs, func(i, j int) bool {
			a, b := objs[i], objs[j]
			return a.Kind+"/"+a.Namespace+"/"+a.Name < b.Kind+"/"+b.Namespace+"/"+b.Name
		})
		for _, o := range objs {
			docs = append(docs, &parsed{kind: o.Kind, namespace: o.Namespace, name: o.Name, source: o.Source, file: group,
				spec: o.Spec, hash: memo.hash(group, o), fromFeed: true, created: o.Created})
		}
	}
	return docs, keep, states
}
