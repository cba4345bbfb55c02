package kubeclient

// Reading Istio's networking CRDs from clusters.
//
// The objects are read with istio.io/client-go's typed clientset
// (networking.istio.io/v1) into client-go informers — built by a Tracker
// rather than istio.io/client-go's informer factory, so that every list
// and watch outcome is tracked the way the kubernetes registry tracks its
// own (a failing call makes the cluster Degraded). The API server
// converts objects written as v1beta1 or v1alpha3 (Istio's CRDs convert
// between these versions without a webhook: the schemas are one), so
// every version Istio accepts is read; a cluster whose CRDs do not serve
// v1 (Istio before 1.22) is reported with that reason. Specs are
// istio.io/api networking messages; v1 and v1beta1 alias v1alpha3.
//
// A typed informer decodes a whole list at once: an object whose spec
// cannot be decoded would fail the list. The CRDs' structural schemas
// make the API server refuse such objects, so that does not happen with
// Istio's CRDs installed; if it did, the cluster is Degraded with the
// decode error and its last read objects stay.
//
// Informers are per listed namespace, or cluster wide. What they cache
// is the converted object, not the typed object: their transform
// converts each object as it arrives (one conversion per
// resourceVersion) into one record, the model.ConfigObject a config
// source puts in force (Object.Config) and the resourceVersion — its
// spec copied out of the typed object, with equal label maps of
// ServiceEntry endpoints and WorkloadEntries shared
// (IstioOptions.ShareLabels) — so the typed object, its metadata (UID,
// labels, annotations, managed fields) and status are dropped at once,
// and a config source holds the informers' record rather than a copy of
// it. Cached objects are never modified, by the informers or by readers,
// except the Hash of Object.Config (see there).
//
// An object relisted with an unchanged resourceVersion (after a watch
// ended) keeps its cached Object. Parts and Deltas therefore hand out the
// same Object again (the same Spec pointer) while an object's
// resourceVersion is unchanged: one event costs one conversion, and
// consumers can key their own per-object caches (validation, checks) on
// the Spec pointer or on ResourceVersion (see Object).
//
// Deltas is the incremental form of Parts: the informers' event handlers
// record the keys of the objects that changed, and Deltas converts those
// only, without listing the caches, so a read after one event costs one
// object whatever the cluster holds. A watch is read with Parts or with
// Deltas, not both (a Parts call between two Deltas calls is harmless:
// deletions are reported whatever Parts saw).
//
// A cluster is Starting until every informer has listed once. A cluster
// whose first list is refused for good (404: Istio's CRDs not installed,
// 403: no rights, 401) is Failed instead, and syncs when the cause is
// fixed (client-go keeps relisting). When the API server becomes
// unreachable the cluster is Degraded: its informers' caches — the last
// objects seen — stay in force (stale beats empty), and client-go relists
// once it answers again. A cluster whose credentials cannot be read is
// Failed and retried every 30s.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/client-go/pkg/clientset/versioned"
	networkingclient "istio.io/client-go/pkg/clientset/versioned/typed/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/meshfed/meshfed/model"
)

// retryConnect is how long a cluster whose credentials failed waits
// before it tries them again.
const retryConnect = 30 * time.Second

// The kinds an IstioWatch reads (the names of Istio's documents).
const (
	KindVirtualService  = "VirtualService"
	KindDestinationRule = "DestinationRule"
	KindServiceEntry    = "ServiceEntry"
	KindWorkloadEntry   = "WorkloadEntry"
	KindSidecar         = "Sidecar"
)

// Cluster is one cluster an IstioWatch reads.
type Cluster struct {
	// Name is the registry's name; it names the cluster in sources.
	Name string
	// Connect returns a REST config for the cluster and a func that closes
	// its connections (a Connector's Connect).
	Connect func() (*rest.Config, func(), error)
}

// IstioOptions configure an IstioWatch.
type IstioOptions struct {
	Clusters []Cluster
	// Namespaces limits the watch to these namespaces; empty: all.
	Namespaces []string
	// Kinds are the kinds read (KindVirtualService, KindDestinationRule,
	// KindServiceEntry, KindWorkloadEntry, KindSidecar); at least one.
	Kinds  []string
	Logger *slog.Logger
	// ShareLabels, unless nil, is given the label map of every
	// ServiceEntry endpoint and WorkloadEntry received, and returns the map
	// to cache instead: an equal one it holds (registries.LabelSets.Share),
	// so that thousands of endpoints carrying a few sets hold a few maps.
	// It is called from the informers' goroutines.
	ShareLabels func(map[string]string) map[string]string
}

// Part is the state of one cluster of an IstioWatch.
type Part struct {
	// Name of the cluster.
	Name string
	// Synced: every informer listed once; Objects is complete. It stays
	// true while the API server is unreachable: Objects is then the last
	// known state.
	Synced bool
	// Failed: the cluster cannot be used as configured (credentials, or a
	// first list refused for good).
	Failed bool
	// Err is the last list or watch error (with what to do, for missing
	// CRDs or rights), "" while connected.
	Err string
	// Objects are the cluster's objects, only when Synced.
	Objects []Object
}

// Object is one object read from a cluster.
type Object struct {
	// Kind is one of the Kind constants.
	Kind            string
	Namespace, Name string
	// Source names it, "namespace/name (cluster)".
	Source string
	// Created is its creation time.
	Created time.Time
	// ResourceVersion is the API server's version of the object ("" when
	// it has none).
	ResourceVersion string
	// Spec is its spec, an istio.io/api networking/v1alpha3
	// message (*networking.VirtualService, …). It is shared: while the
	// object's ResourceVersion is unchanged, every call of Parts returns
	// the same pointer (so a consumer may cache what it derives from an
	// object by Spec pointer), and nobody may modify it.
	Spec proto.Message
	// Config is the object as a config source puts it in force: the
	// record the informers cache (Kind, Namespace, Name, Source, Created
	// and Spec as above), the same pointer while ResourceVersion is
	// unchanged, so that a config source holds it instead of a copy. Its
	// Hash is "" until the watch's reader sets it (istioconfig, from the
	// goroutine that calls Deltas; the informers never read it); nobody
	// modifies anything else of it. nil for an object Convert made of a
	// typed object.
	Config *model.ConfigObject
}

// ObjectKey names an object within a cluster.
type ObjectKey struct{ Kind, Namespace, Name string }

// Delta is what changed in one cluster since the previous Deltas call.
type Delta struct {
	// Part is the cluster's state; its Objects are the objects added or
	// changed since the previous call (every object when Full), in no
	// particular order, each converted once per resourceVersion as by
	// Parts.
	Part
	// Full: Objects are every object of the cluster (the first read after
	// it synced); what a consumer holds of the cluster and is not among
	// them is gone.
	Full bool
	// Deleted are the objects deleted since the previous call (never with
	// Full); it may name an object no Delta returned (added and deleted
	// between two calls): consumers ignore keys they do not hold.
	Deleted []ObjectKey
}

// resource is how one kind is listed and watched in a namespace.
type resource struct {
	plural string
	object runtime.Object
	list   func(nw networkingclient.NetworkingV1Interface, ns string) *cache.ListWatch
}

// resources are the kinds an IstioWatch can read.
var resources = map[string]resource{
	KindVirtualService: {"virtualservices", &networkingv1.VirtualService{}, func(nw networkingclient.NetworkingV1Interface, ns string) *cache.ListWatch {
		return listWatch(nw.VirtualServices(ns).List, nw.VirtualServices(ns).Watch)
	}},
	KindDestinationRule: {"destinationrules", &networkingv1.DestinationRule{}, func(nw networkingclient.NetworkingV1Interface, ns string) *cache.ListWatch {
		return listWatch(nw.DestinationRules(ns).List, nw.DestinationRules(ns).Watch)
	}},
	KindServiceEntry: {"serviceentries", &networkingv1.ServiceEntry{}, func(nw networkingclient.NetworkingV1Interface, ns string) *cache.ListWatch {
		return listWatch(nw.ServiceEntries(ns).List, nw.ServiceEntries(ns).Watch)
	}},
	KindWorkloadEntry: {"workloadentries", &networkingv1.WorkloadEntry{}, func(nw networkingclient.NetworkingV1Interface, ns string) *cache.ListWatch {
		return listWatch(nw.WorkloadEntries(ns).List, nw.WorkloadEntries(ns).Watch)
	}},
	KindSidecar: {"sidecars", &networkingv1.Sidecar{}, func(nw networkingclient.NetworkingV1Interface, ns string) *cache.ListWatch {
		return listWatch(nw.Sidecars(ns).List, nw.Sidecars(ns).Watch)
	}},
}

func listWatch[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error), w func(context.Context, metav1.ListOptions) (watch.Interface, error)) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return list(ctx, o)
		},
		WatchFuncWithContext: w,
	}
}

// IstioWatch reads Istio's CRDs of some kinds from clusters.
type IstioWatch struct {
	namespaces []string
	clusters   []*cluster
	// conversions counts the objects converted by the informers.
	conversions atomic.Uint64
}

// Conversions returns how many objects the informers have converted so
// far: one per object and resourceVersion received (a deletion's final
// state included; a relist of an unchanged resourceVersion converts
// nothing), not one per object per Parts or Deltas call. For tests and
// diagnostics.
func (w *IstioWatch) Conversions() uint64 { return w.conversions.Load() }

// NewIstioWatch returns an IstioWatch; it does no I/O. It panics without
// kinds or with an unknown one.
func NewIstioWatch(o IstioOptions) *IstioWatch {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &IstioWatch{namespaces: slices.Clone(o.Namespaces)}
	if len(w.namespaces) == 0 {
		w.namespaces = []string{metav1.NamespaceAll}
	}
	kinds := slices.Clone(o.Kinds)
	if len(kinds) == 0 {
		panic("kubeclient.NewIstioWatch: no kinds")
	}
	for _, k := range kinds {
		if _, ok := resources[k]; !ok {
			panic("kubeclient.NewIstioWatch: unknown kind " + k)
		}
	}
	for _, c := range o.Clusters {
		w.clusters = append(w.clusters, &cluster{Cluster: c, kinds: kinds, log: log.With("cluster", c.Name), shareLabels: o.ShareLabels, conversions: &w.conversions})
	}
	return w
}

// Run watches every cluster, one goroutine each, until ctx ends; then it
// returns ctx.Err(). It calls changed, which must not block, after every
// change of what Parts returns. Run is called once.
func (w *IstioWatch) Run(ctx context.Context, changed func()) error {
	var wg sync.WaitGroup
	for _, c := range w.clusters {
		wg.Go(func() { c.run(ctx, w.namespaces, changed) })
	}
	wg.Wait()
	return ctx.Err()
}

// Parts returns one part per cluster, in the configured order. It may be
// called at any time, before and concurrently with Run. An object whose
// resourceVersion did not change since the previous call is not converted
// again: its Object is the previous one, with the same Spec pointer.
func (w *IstioWatch) Parts() []Part {
	out := make([]Part, 0, len(w.clusters))
	for _, c := range w.clusters {
		out = append(out, c.part())
	}
	return out
}

// Deltas returns one Delta per cluster, in the configured order: what
// changed since the previous call. It may be called at any time, before
// and concurrently with Run, from one goroutine.
func (w *IstioWatch) Deltas() []Delta {
	out := make([]Delta, 0, len(w.clusters))
	for _, c := range w.clusters {
		out = append(out, c.delta())
	}
	return out
}

// cluster is the state of one cluster.
type cluster struct {
	Cluster
	kinds []string
	log   *slog.Logger

	mu        sync.Mutex
	failed    error // credentials could not be used
	tracker   *Tracker
	informers []*Informer // nil until connected
	synced    bool        // every informer listed once
	// shareLabels is IstioOptions.ShareLabels.
	shareLabels func(map[string]string) map[string]string
	// conversions counts the objects the transforms converted.
	conversions *atomic.Uint64
	// dirty holds the objects the event handlers saw change since the last
	// delta, by key: the object of the last event, nil when deleted.
	dirty map[objectKey]*cached
	// full: the next delta lists every object (informers new).
	full bool
}

// objectKey names an object within a cluster.
type objectKey = ObjectKey

func (c *cluster) part() Part {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.partLocked(true)
}

// partLocked is part, with the objects only if list; c.mu is held.
func (c *cluster) partLocked(list bool) Part {
	p := Part{Name: c.Name, Synced: c.synced}
	switch {
	case c.failed != nil:
		p.Failed, p.Err = true, c.failed.Error()
	case c.tracker != nil:
		if err := c.tracker.Err(); err != nil {
			p.Err = c.explain(err)
			// Before the first list, an answer that will not change by
			// itself (no CRDs: 404, no rights: 403, bad token: 401) is not
			// waited for: the cluster is Failed and keeps being retried.
			p.Failed = !c.synced && permanent(err)
		}
	}
	if !c.synced || !list {
		return p
	}
	for _, inf := range c.informers {
		for _, obj := range inf.GetStore().List() {
			if o, ok := obj.(*cached); ok {
				p.Objects = append(p.Objects, o.object())
			}
		}
	}
	return p
}

// delta is the cluster's Delta since the previous call.
func (c *cluster) delta() Delta {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.synced || c.full {
		// Unsynced: state only. First read after the sync: every object
		// (partLocked lists the caches), and the events seen until now
		// are in it.
		d := Delta{Part: c.partLocked(true), Full: c.synced}
		if c.synced {
			c.full, c.dirty = false, map[objectKey]*cached{}
		}
		return d
	}
	d := Delta{Part: c.partLocked(false)}
	for k, o := range c.dirty {
		if o == nil {
			d.Deleted = append(d.Deleted, k)
			continue
		}
		d.Objects = append(d.Objects, o.object())
	}
	clear(c.dirty)
	return d
}

// mark records an event's object in dirty (nil obj: deleted).
func (c *cluster) mark(obj any, deleted bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = t.Obj, true
	}
	o, ok := obj.(*cached)
	if !ok {
		return
	}
	k := objectKey{Kind: o.c.Kind, Namespace: o.c.Namespace, Name: o.c.Name}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dirty == nil {
		c.dirty = map[objectKey]*cached{}
	}
	if deleted {
		c.dirty[k] = nil
	} else {
		c.dirty[k] = o
	}
}

// permanent reports whether err is an API server's answer that retrying
// will not change until someone acts (a 4xx other than 408 Request
// Timeout, 409 Conflict, 410 Gone and 429 Too Many Requests).
func permanent(err error) bool {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		return false
	}
	code := se.Status().Code
	return code >= 400 && code < 500 && code != 408 && code != 409 && code != 410 && code != 429
}

// explain adds what to do to the error of a cluster without Istio's CRDs
// or without the rights to read them.
func (c *cluster) explain(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		switch se.Status().Code {
		case 404:
			return err.Error() + " (networking.istio.io/v1 is not served: install Istio's CRDs, Istio 1.22 or later)"
		case 403:
			plurals := make([]string, len(c.kinds))
			for i, k := range c.kinds {
				plurals[i] = resources[k].plural
			}
			return err.Error() + " (grant get, list and watch on " + strings.Join(plurals, ", ") + " of networking.istio.io, as the Helm chart's ClusterRole does)"
		}
	}
	return err.Error()
}

func (c *cluster) run(ctx context.Context, namespaces []string, changed func()) {
	for {
		rc, closeConns, err := c.Connect()
		var cs versioned.Interface
		if err == nil {
			cs, err = versioned.NewForConfig(rc)
			if err != nil {
				closeConns()
			}
		}
		if err != nil {
			c.log.Error("Kubernetes config source cannot connect; retrying", "err", err, "retryIn", retryConnect)
			c.mu.Lock()
			c.failed = err
			c.mu.Unlock()
			changed()
			select {
			case <-ctx.Done():
				return
			case <-time.After(retryConnect):
				continue
			}
		}
		c.watch(ctx, cs, namespaces, changed)
		closeConns()
		return
	}
}

// watch runs the informers until ctx ends.
func (c *cluster) watch(ctx context.Context, cs versioned.Interface, namespaces []string, changed func()) {
	tr := NewTracker()
	var infs []*Informer
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.mark(obj, false); changed() },
		UpdateFunc: func(_, obj any) { c.mark(obj, false); changed() },
		DeleteFunc: func(obj any) { c.mark(obj, true); changed() },
	}
	for _, ns := range namespaces {
		suffix := ""
		if ns != "" {
			suffix = "/" + ns
		}
		nw := cs.NetworkingV1()
		for _, k := range c.kinds {
			res := resources[k]
			infs = append(infs, tr.Informer(res.plural+suffix, res.list(nw, ns), res.object, nil, nil))
		}
	}
	for _, inf := range infs {
		if err := inf.SetKeyFunc(cachedKey); err != nil {
			panic(err) // only after Run: a bug here
		}
		if err := inf.SetTransform(c.transform(inf.GetStore())); err != nil {
			panic(err) // only after Run: a bug here
		}
		if err := inf.AddEventHandler(handler); err != nil {
			panic(err)
		}
	}
	c.mu.Lock()
	c.failed, c.tracker, c.informers, c.full = nil, tr, infs, true
	c.mu.Unlock()
	changed()

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, inf := range infs {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	wg.Go(func() {
		// Every change of the connection's health is a change of state.
		for {
			select {
			case <-ctx.Done():
				return
			case <-tr.Changed():
				if err := tr.Err(); err != nil {
					c.log.Warn("Kubernetes config source degraded; last objects kept", "err", c.explain(err))
				} else {
					c.log.Info("Kubernetes config source connected")
				}
				changed()
			}
		}
	})
	syncs := make([]cache.InformerSynced, len(infs))
	for i, inf := range infs {
		syncs[i] = inf.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), syncs...) {
		return
	}
	c.mu.Lock()
	c.synced = true
	c.mu.Unlock()
	c.log.Info("Kubernetes config source synced")
	changed()
	<-ctx.Done()
}

// cached is what the informers cache of an object: its conversion, one
// record (160 B) that is also what a config source puts in force
// (Object.Config). It gives client-go the metadata it keys and versions
// objects by (meta.Accessor) through GetObjectMeta.
type cached struct {
	c               model.ConfigObject // Hash is the reader's (Object.Config)
	resourceVersion string
}

// object is the Object of o. It reads every field of o.c but Hash, which
// the reader may be setting.
func (o *cached) object() Object {
	spec, _ := o.c.Spec.(proto.Message)
	return Object{Kind: o.c.Kind, Namespace: o.c.Namespace, Name: o.c.Name, Source: o.c.Source, Created: o.c.Created,
		ResourceVersion: o.resourceVersion, Spec: spec, Config: &o.c}
}

// cachedKey is the informers' key function: the key of a cached object
// ("namespace/name", Istio's kinds are namespaced) is the start of its
// source (metaStrings), so the cache holds no key string of its own;
// anything else is keyed by cache.DeletionHandlingMetaNamespaceKeyFunc.
func cachedKey(obj any) (string, error) {
	if o, ok := obj.(*cached); ok && o.c.Namespace != "" {
		return o.c.Source[:len(o.c.Namespace)+1+len(o.c.Name)], nil
	}
	return cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
}

// GetObjectMeta implements metav1.ObjectMetaAccessor: a copy of the
// metadata the object keeps (namespace, name, resourceVersion, creation
// time); setting its fields changes nothing.
func (o *cached) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: o.c.Namespace, Name: o.c.Name, ResourceVersion: o.resourceVersion,
		CreationTimestamp: metav1.NewTime(o.c.Created)}
}

// transform returns the informers' transform of the cluster, for the
// informer whose cache is store: a typed object becomes its conversion
// (cached), or, when store holds the same object at the same
// resourceVersion (a relist), the cached one; either way the typed
// object is zeroed (clearTyped). Anything else is returned as it is (a
// cached object again: the transform is idempotent).
func (c *cluster) transform(store cache.Store) cache.TransformFunc {
	return func(obj any) (any, error) {
		if _, ok := obj.(*cached); ok {
			return obj, nil
		}
		if m, ok := obj.(metav1.Object); ok && m.GetResourceVersion() != "" {
			if held, ok, _ := store.GetByKey(cache.MetaObjectToName(m).String()); ok {
				if h, ok := held.(*cached); ok && h.resourceVersion == m.GetResourceVersion() && h.c.Kind == kindOf(obj) {
					clearTyped(obj)
					return h, nil
				}
			}
		}
		kind, meta, spec := typed(obj)
		if kind == "" {
			return obj, nil
		}
		spec = detach(spec)
		c.share(spec)
		shareHosts(spec)
		if c.conversions != nil {
			c.conversions.Add(1)
		}
		r := &cached{c: model.ConfigObject{Kind: kind, Created: meta.CreationTimestamp.Time, Spec: spec}}
		r.c.Namespace, r.c.Name, r.c.Source, r.resourceVersion = metaStrings(meta.Namespace, meta.Name, c.Name, meta.ResourceVersion)
		clearTyped(obj)
		return r, nil
	}
}

// metaStrings returns the namespace, name, source ("namespace/name
// (cluster)") and resource version of a cached object as parts of one new
// string: the record keeps no string of the decoded object, each of
// which would keep its span of the decoder's garbage alive
// (bench/analysis.md), and the source, made anyway, holds the others.
func metaStrings(namespace, name, cluster, rv string) (ns, n, source, version string) {
	var b strings.Builder
	b.Grow(len(namespace) + len(name) + len(cluster) + len(rv) + 4)
	b.WriteString(namespace)
	b.WriteByte('/')
	b.WriteString(name)
	b.WriteString(" (")
	b.WriteString(cluster)
	b.WriteByte(')')
	src := b.Len()
	b.WriteString(rv)
	all := b.String()
	return all[:len(namespace)], all[len(namespace)+1 : len(namespace)+1+len(name)], all[:src], all[src:]
}

// shareHosts makes the destination hosts of a new VirtualService spec
// that equal one of its hosts (the usual case: a route to the service the
// rule is for) that host's string rather than an equal copy decoded apart.
func shareHosts(spec proto.Message) {
	vs, ok := spec.(*networking.VirtualService)
	if !ok || len(vs.Hosts) == 0 {
		return
	}
	same := func(d *networking.Destination) {
		if d == nil {
			return
		}
		for _, h := range vs.Hosts {
			if d.Host == h {
				d.Host = h
				return
			}
		}
	}
	for _, r := range vs.Http {
		for _, d := range r.Route {
			same(d.GetDestination())
		}
		for _, m := range r.Mirrors {
			same(m.GetDestination())
		}
		same(r.Mirror)
	}
	for _, r := range vs.Tls {
		for _, d := range r.Route {
			same(d.GetDestination())
		}
	}
	for _, r := range vs.Tcp {
		for _, d := range r.Route {
			same(d.GetDestination())
		}
	}
}

// clearTyped zeroes a typed object the transform has converted (as
// client-go's transforms may modify what they are given): what was
// decoded into it is garbage at once, although the list that holds it
// stays alive until its last object is converted, so the collections
// during a list's conversion free the decode of the objects converted so
// far and their conversions fill those holes. Measured: heap
// fragmentation at 5,000 VirtualServices 290 B per object instead of
// 365–660 (bench/analysis.md).
func clearTyped(obj any) {
	switch t := obj.(type) {
	case *networkingv1.VirtualService:
		*t = networkingv1.VirtualService{}
	case *networkingv1.DestinationRule:
		*t = networkingv1.DestinationRule{}
	case *networkingv1.ServiceEntry:
		*t = networkingv1.ServiceEntry{}
	case *networkingv1.WorkloadEntry:
		*t = networkingv1.WorkloadEntry{}
	case *networkingv1.Sidecar:
		*t = networkingv1.Sidecar{}
	}
}

// kindOf is the Kind constant of a typed object, "" for anything else.
func kindOf(obj any) string {
	kind, _, _ := typed(obj)
	return kind
}

// typed returns the Kind constant, metadata and spec (inside obj) of a
// typed object; kind is "" for anything else.
func typed(obj any) (kind string, meta *metav1.ObjectMeta, spec proto.Message) {
	switch t := obj.(type) {
	case *networkingv1.VirtualService:
		return KindVirtualService, &t.ObjectMeta, &t.Spec
	case *networkingv1.DestinationRule:
		return KindDestinationRule, &t.ObjectMeta, &t.Spec
	case *networkingv1.ServiceEntry:
		return KindServiceEntry, &t.ObjectMeta, &t.Spec
	case *networkingv1.WorkloadEntry:
		return KindWorkloadEntry, &t.ObjectMeta, &t.Spec
	case *networkingv1.Sidecar:
		return KindSidecar, &t.ObjectMeta, &t.Spec
	}
	return "", nil, nil
}

// detach returns a deep copy of m, the spec of a typed object just
// decoded: nothing of the typed object stays referenced, and the copy's
// pieces are allocated together, so the decoder's garbage, allocated
// among m's pieces, can leave whole spans free rather than holes in the
// spans that hold what is cached (bench/analysis.md).
func detach(m proto.Message) proto.Message { return proto.Clone(m) }

// share replaces the label maps of a new spec's ServiceEntry endpoints,
// or of a WorkloadEntry, with what c.shareLabels returns for them.
func (c *cluster) share(spec proto.Message) {
	if c.shareLabels == nil {
		return
	}
	switch sp := spec.(type) {
	case *networking.ServiceEntry:
		for _, e := range sp.GetEndpoints() {
			if len(e.Labels) > 0 {
				e.Labels = c.shareLabels(e.Labels)
			}
		}
	case *networking.WorkloadEntry:
		if len(sp.Labels) > 0 {
			sp.Labels = c.shareLabels(sp.Labels)
		}
	}
}

// Convert turns a typed VirtualService, DestinationRule, Sidecar,
// ServiceEntry or WorkloadEntry of cluster into an Object sharing its
// spec (the typed object's: nobody may modify it), and an object cached
// by an IstioWatch's informers into its Object; ok is false for anything
// else (including cache tombstones).
func Convert(obj any, cluster string) (o Object, ok bool) {
	if t, ok := obj.(*cached); ok {
		return t.object(), true
	}
	kind, meta, spec := typed(obj)
	if kind == "" {
		return o, false
	}
	o.Kind, o.Namespace, o.Name = kind, meta.Namespace, meta.Name
	o.Source = fmt.Sprintf("%s/%s (%s)", meta.Namespace, meta.Name, cluster)
	o.Created = meta.CreationTimestamp.Time
	o.ResourceVersion = meta.ResourceVersion
	o.Spec = spec
	return o, true
}
