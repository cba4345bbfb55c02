package model

import (
	"cmp"
	"slices"
	"sort"
	"strings"
	"time"
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
	// Created is the object's creation time as its backend records it
	// (Kubernetes metadata.creationTimestamp); zero for objects read
	// from files.
	Created time.Time
	// File and Line place an object read from a directory source: the
	// file's path and the line its YAML document starts on ("" and 0 for
	// other sources). They stand in for the creation time files lack.
	File string
	Line int
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

// CompareAge orders config objects oldest first, the order in which
// Istio lets rules for one host win or merge (docs/architecture.md §3.6):
// objects with a creation time (Kubernetes) before objects read from files,
// then by creation time; files by path and then by position in the file;
// ties by name, then namespace, as Istio's sortConfigByCreationTime.
func CompareAge(a, b *ConfigObject) int {
	if az, bz := a.Created.IsZero(), b.Created.IsZero(); az != bz {
		if bz {
			return -1
		}
		return 1
	}
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	if c := cmp.Compare(a.File, b.File); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Line, b.Line); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	return cmp.Compare(a.Namespace, b.Namespace)
}

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

// Replace returns a snapshot of version with the objects of c, each of
// objs in place of c's object of the same key (which must be there): it
// copies c's sorted slice instead of sorting again, so a change of a few
// objects costs a copy of pointers. c is not modified.
func (c *ConfigSnapshot) Replace(version uint64, objs ...*ConfigObject) *ConfigSnapshot {
	out := slices.Clone(c.objects)
	for _, o := range objs {
		k := o.Key()
		i, ok := slices.BinarySearchFunc(out, k, func(x *ConfigObject, k string) int { return strings.Compare(x.Key(), k) })
		if !ok {
			panic("model.ConfigSnapshot.Replace: no object " + k)
		}
		out[i] = o
	}
	return &ConfigSnapshot{Version: version, objects: out}
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
