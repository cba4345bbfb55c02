package model

import (
	"sort"
	"strings"
)

// ConfigObject is one user traffic rule in force: an Istio networking
// object (VirtualService, DestinationRule) from a config source. It is
// immutable once in a ConfigSnapshot.
type ConfigObject struct {
	// Kind is the Istio kind: "VirtualService" or "DestinationRule".
	Kind string
	// Namespace and Name identify the object; Namespace defaults to
	// "default" as kubectl does.
	Namespace, Name string
	// Source is where the object came from: "file:line" or
	// "namespace/name" for a Kubernetes source.
	Source string
	// Hash is a hex hash of the object's canonical content: equal hashes,
	// equal objects.
	Hash string
	// Spec is the istio.io/api networking/v1alpha3 message
	// (*VirtualService, *DestinationRule). model stays free of non-stdlib
	// imports, so it is held as any; consumers type-assert it. Never
	// modified.
	Spec any
}

// Key is "<Kind>/<namespace>/<name>".
func (o *ConfigObject) Key() string { return o.Kind + "/" + o.Namespace + "/" + o.Name }

// ConfigSnapshot is an immutable set of config objects in force.
// Between two snapshots from one source, an object that did not change is
// the same *ConfigObject pointer.
type ConfigSnapshot struct {
	// Version increases with every snapshot a source publishes.
	Version uint64
	objects []*ConfigObject // sorted by Key
}

// NewConfigSnapshot sorts objs by key and takes ownership of the slice.
func NewConfigSnapshot(version uint64, objs []*ConfigObject) *ConfigSnapshot {
	sort.Slice(objs, func(i, j int) bool { return objs[i].Key() < objs[j].Key() })
	return &ConfigSnapshot{Version: version, objects: objs}
}

// Objects returns every object, sorted by key. Do not modify.
func (c *ConfigSnapshot) Objects() []*ConfigObject {
	if c == nil {
		return nil
	}
	return c.objects
}

// OfKind returns the objects of one kind, sorted by key.
func (c *ConfigSnapshot) OfKind(kind string) []*ConfigObject {
	var out []*ConfigObject
	for _, o := range c.Objects() {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

// ConfigHost resolves a host named by a config object in namespace ns as
// Istio does: a short name ("reviews") becomes
// reviews.<ns>.svc.cluster.local; names with a dot, wildcards and "*"
// are complete already.
func ConfigHost(h, ns string) string {
	if h == "" || h == "*" || ns == "" || strings.Contains(h, ".") {
		return h
	}
	return h + "." + ns + ".svc.cluster.local"
}
