package kube

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/meshfed/meshfed/kubeclient"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// scope holds the namespaced informers of one namespace ("" = all).
type scope struct {
	services, slices, pods *kubeclient.Informer
}

// clusterWatch is one connection to a cluster: the informers, the work queue and
// the converted state. It lives for one call of run.
type clusterWatch struct {
	r      *Registry
	ci     clusterInfo
	client kubernetes.Interface
	meta   metadata.Interface // nil: Pods, Nodes and Namespaces listed in full
	log    *slog.Logger

	scopes     map[string]*scope // by namespace; "" = all namespaces
	nodes      *kubeclient.Informer
	namespaces *kubeclient.Informer // only with a namespace selector
	nsSel      labels.Selector
	all        []*kubeclient.Informer
	queue      *workqueue.Typed[svcKey]
	tracker    *kubeclient.Tracker
	pods       *podIndex  // pod → services whose slices list it
	in         *interning // the transform's tables, held while run runs

	pub     *registries.Publisher[svcKey] // each Service as last computed
	mu      sync.Mutex
	eventAt map[svcKey]time.Time // first unprocessed event per key
	dirty   chan struct{}        // capacity 1: state changed
}

func newWatch(r *Registry, c clients, ci clusterInfo) *clusterWatch {
	w := &clusterWatch{
		r:       r,
		ci:      ci,
		client:  c.kube,
		meta:    c.meta,
		log:     r.log,
		scopes:  map[string]*scope{},
		queue:   workqueue.NewTyped[svcKey](),
		eventAt: map[svcKey]time.Time{},
		dirty:   make(chan struct{}, 1),
		pods:    newPodIndex(),
	}
	w.tracker = kubeclient.NewTracker()
	return w
}

// informer builds one informer whose list and watch calls are tracked,
// with the registry's transform.
func (w *clusterWatch) informer(name, resource string, lw *cache.ListWatch, obj runtime.Object, idx cache.Indexers) *kubeclient.Informer {
	return w.informerWith(name, resource, lw, obj, idx, w.transform())
}

// transform is the informers' transform: nil for a raw registry.
func (w *clusterWatch) transform() cache.TransformFunc {
	if w.r.raw {
		return nil
	}
	return w.in.slim
}

func (w *clusterWatch) informerWith(name, resource string, lw *cache.ListWatch, obj runtime.Object, idx cache.Indexers, transform cache.TransformFunc) *kubeclient.Informer {
	inf := w.tracker.Informer(name, lw, obj, idx, func() { w.r.m.watchError(resource) })
	if transform != nil {
		must(inf.SetTransform(transform))
	}
	w.all = append(w.all, inf)
	return inf
}

// labelled builds the informer of a core/v1 kind read for its labels only
// (Pods, Nodes, Namespaces) in namespace ns ("" = all): with a metadata
// client the API server sends only metadata (PartialObjectMetadata; with
// 100,000 pods the full list is most of the first sync's bytes and
// decoding), else typed lists through typed; the transform keeps either
// as a labelled.
func (w *clusterWatch) labelled(name, resource, kind, ns string, typed *cache.ListWatch, obj runtime.Object) *kubeclient.Informer {
	if w.meta == nil {
		return w.informer(name, resource, typed, obj, nil)
	}
	ri := w.meta.Resource(corev1.SchemeGroupVersion.WithResource(strings.ToLower(kind) + "s")).Namespace(ns)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return ri.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return ri.Watch(ctx, o)
		},
	}
	var transform cache.TransformFunc
	if slim := w.transform(); slim != nil {
		// The API server sends kind PartialObjectMetadata; slim keeps
		// labels by kind.
		transform = func(obj any) (any, error) {
			if p, ok := obj.(*metav1.PartialObjectMetadata); ok {
				p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: kind}
			}
			return slim(obj)
		}
	}
	return w.informerWith(name, resource, lw, &metav1.PartialObjectMetadata{}, nil, transform)
}

func must(err error) {
	if err != nil {
		panic(err) // only when called after Run, a bug here
	}
}

func (w *clusterWatch) setup() error {
	cfg := w.r.cfg
	cs := w.client
	namespaces := cfg.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	sliceIdx := cache.Indexers{idxService: indexSliceService, idxNode: indexSliceNodes}
	svcIdx := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	for _, ns := range namespaces {
		suffix := ""
		if ns != "" {
			suffix = "/" + ns
		}
		sc := &scope{
			services: w.informer("services"+suffix, resService, &cache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return cs.CoreV1().Services(ns).List(ctx, o)
				},
				WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return cs.CoreV1().Services(ns).Watch(ctx, o)
				},
			}, &corev1.Service{}, svcIdx),
			slices: w.informer("endpointslices"+suffix, resEndpointSlice, &cache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return cs.DiscoveryV1().EndpointSlices(ns).List(ctx, o)
				},
				WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return cs.DiscoveryV1().EndpointSlices(ns).Watch(ctx, o)
				},
			}, &discoveryv1.EndpointSlice{}, sliceIdx),
			pods: w.labelled("pods"+suffix, resPod, "Pod", ns, &cache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return cs.CoreV1().Pods(ns).List(ctx, o)
				},
				WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return cs.CoreV1().Pods(ns).Watch(ctx, o)
				},
			}, &corev1.Pod{}),
		}
		w.scopes[ns] = sc
		if err := sc.services.AddEventHandler(w.afterInitialList(resService, w.serviceHandler())); err != nil {
			return err
		}
		if err := sc.slices.AddEventHandler(w.afterInitialList(resEndpointSlice, w.sliceHandler())); err != nil {
			return err
		}
		if err := sc.slices.AddEventHandler(w.pods.handler()); err != nil {
			return err
		}
		if err := sc.pods.AddEventHandler(w.afterInitialList(resPod, w.podHandler())); err != nil {
			return err
		}
	}
	w.nodes = w.labelled("nodes", resNode, "Node", "", &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cs.CoreV1().Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().Nodes().Watch(ctx, o)
		},
	}, &corev1.Node{})
	if err := w.nodes.AddEventHandler(w.afterInitialList(resNode, w.nodeHandler())); err != nil {
		return err
	}
	if cfg.NamespaceSelector != "" {
		sel, err := labels.Parse(cfg.NamespaceSelector)
		if err != nil {
			return err
		}
		w.nsSel = sel
		w.namespaces = w.labelled("namespaces", resNamespace, "Namespace", "", &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return cs.CoreV1().Namespaces().List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return cs.CoreV1().Namespaces().Watch(ctx, o)
			},
		}, &corev1.Namespace{})
		if err := w.namespaces.AddEventHandler(w.afterInitialList(resNamespace, w.namespaceHandler())); err != nil {
			return err
		}
	}
	return nil
}

// Indexes of EndpointSlices.

func indexSliceService(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	if n := s.Labels[labelServiceName]; n != "" {
		return []string{s.Namespace + "/" + n}, nil
	}
	return nil, nil
}

func indexSliceNodes(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, e := range s.Endpoints {
		if e.NodeName != nil && *e.NodeName != "" && !slices.Contains(out, *e.NodeName) {
			out = append(out, *e.NodeName)
		}
	}
	return out, nil
}

// Lookups for conversion, from the caches.

func (w *clusterWatch) scopeFor(ns string) *scope {
	if sc, ok := w.scopes[ns]; ok {
		return sc
	}
	return w.scopes[metav1.NamespaceAll]
}

func (w *clusterWatch) podLabels(ns, name string) map[string]string {
	sc := w.scopeFor(ns)
	if sc == nil {
		return nil
	}
	obj, ok, err := sc.pods.GetIndexer().GetByKey(ns + "/" + name)
	if err != nil || !ok {
		return nil
	}
	return labelsOf(obj)
}

func (w *clusterWatch) nodeLocality(name string) model.Locality {
	obj, ok, err := w.nodes.GetIndexer().GetByKey(name)
	if err != nil || !ok {
		return model.Locality{}
	}
	return localityFromLabels(labelsOf(obj))
}

func (w *clusterWatch) namespaceSelected(ns string) bool {
	if w.namespaces == nil {
		return true
	}
	obj, ok, err := w.namespaces.GetIndexer().GetByKey(ns)
	if err != nil || !ok {
		return false
	}
	return w.nsSel.Matches(labels.Set(labelsOf(obj)))
}

// compute converts one service from the caches.
func (w *clusterWatch) compute(k svcKey) registries.Converted {
	sc := w.scopeFor(k.ns)
	if sc == nil || !w.namespaceSelected(k.ns) {
		return registries.Converted{}
	}
	obj, ok, err := sc.services.GetIndexer().GetByKey(k.String())
	if err != nil || !ok {
		return registries.Converted{}
	}
	objs, _ := sc.slices.GetIndexer().ByIndex(idxService, k.String())
	eps := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		eps = append(eps, o.(*discoveryv1.EndpointSlice))
	}
	w.r.conversions.Add(1)
	svc, rejected, ok := convertService(w.ci, obj.(*corev1.Service), eps, w)
	return registries.One(svc, ok, rejected)
}

// update recomputes k and, when its conversion changed, tells the loop.
func (w *clusterWatch) update(k svcKey) {
	c := w.compute(k)
	w.mu.Lock()
	at := w.eventAt[k]
	delete(w.eventAt, k)
	w.mu.Unlock()
	if !w.pub.Set(k, c) {
		return
	}
	if !at.IsZero() {
		w.pub.Changed(at)
	}
	select {
	case w.dirty <- struct{}{}:
	default:
	}
}

func (w *clusterWatch) worker() {
	for {
		k, quit := w.queue.Get()
		if quit {
			return
		}
		w.update(k)
		w.queue.Done(k)
	}
}

// status is the connection's health as the sink should hear it.
func (w *clusterWatch) status() registries.Condition {
	if err := w.tracker.Err(); err != nil {
		return registries.Condition{Err: err.Error()}
	}
	return registries.Condition{}
}

// publish hands the full state to the sink if it changed, with the
// connection's health: while a call fails it stays Degraded.
func (w *clusterWatch) publish() {
	w.pub.Flush(w.status())
	w.setSynced()
}

// report tells the sink the connection's health (Synced only once the
// first state was published).
func (w *clusterWatch) report() {
	w.pub.Report(w.status())
	w.setSynced()
}

func (w *clusterWatch) setSynced() {
	if w.pub.Published() && !w.pub.Condition().Failing() {
		w.r.m.synced.Set(1)
	} else {
		w.r.m.synced.Set(0)
	}
}

// run starts the informers, publishes once they synced and after every
// change, and reports the connection's health until ctx ends.
func (w *clusterWatch) run(ctx context.Context, sink registries.Sink) error {
	w.pub = registries.NewPublisher(w.r.common, sink, w.log, registries.PublisherOptions[svcKey]{
		Compare: func(a, b svcKey) int { return cmp.Or(strings.Compare(a.ns, b.ns), strings.Compare(a.name, b.name)) },
		// Flushed only once the informers listed everything: the state
		// is complete even while a watch fails.
		CompleteWhileDegraded: true,
	})
	w.in = acquireInterning()
	defer releaseInterning() // last: after the informers stopped
	if err := w.setup(); err != nil {
		return registries.Permanent(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		w.queue.ShutDown()
		wg.Wait()
		w.r.m.synced.Set(0)
	}()
	for _, inf := range w.all {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}

	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for synced := false; !synced; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.tracker.Changed():
			w.report()
		case <-tick.C:
			synced = w.hasSynced()
		}
	}
	tick.Stop()

	// First full state, straight from the caches.
	for _, sc := range w.scopes {
		for _, k := range sc.services.GetIndexer().ListKeys() {
			ns, name, _ := cache.SplitMetaNamespaceKey(k)
			w.update(svcKey{ns, name})
		}
	}
	select {
	case <-w.dirty:
	default:
	}
	w.publish()
	w.log.Info("kubernetes cluster synced", "services", w.pub.Len())
	for range workers {
		wg.Go(w.worker)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.dirty:
			w.publish()
		case <-w.tracker.Changed():
			w.report()
		}
	}
}

func (w *clusterWatch) hasSynced() bool {
	for _, inf := range w.all {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}
