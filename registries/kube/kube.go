// Package kube is the registry of kind kubernetes: it watches one
// Kubernetes cluster with client-go informers and publishes its Services
// as <name>.<namespace>.<domain> (domain is svc.<clusterDomain>, e.g.
// svc.cluster.local).
//
// # What becomes what
//
//   - A Service of type ClusterIP, NodePort or LoadBalancer, with or
//     without a selector: EDS. Its endpoints are the addresses of its
//     EndpointSlices (discovery.k8s.io/v1, IPv4 and IPv6; the first address
//     of each endpoint), with the slice's port numbers for the service's
//     port names (targetPort), the pod's labels (for subsets), the locality
//     of its node (topology.kubernetes.io/region and /zone, the endpoint's
//     own zone first, topology.istio.io/subzone), the entry's network and
//     the registry's name as cluster.
//   - A headless Service (clusterIP: None) with ports: EDS as well, with
//     the pod addresses as endpoints, so proxies and gRPC clients balance
//     over pods as they would with DNS. Without ports: nothing (listed on
//     /debug/conflictz).
//   - An ExternalName Service with ports: DNS, one endpoint whose address
//     is the external name. Without ports: nothing (listed).
//   - UDP and SCTP ports are not served (listed); a Service left without
//     a port is not published. FQDN EndpointSlices are ignored (listed).
//
// Endpoint health from the slice's conditions: ready → HEALTHY; serving
// and terminating → DRAINING; anything else → UNHEALTHY. Port protocol
// from appProtocol, else the port name's prefix (grpc, http, http2, tcp,
// as Istio reads them), else TCP.
//
// # Informers
//
// Services, EndpointSlices and Pods (per listed namespace, or cluster
// wide), Nodes, and Namespaces when a namespace selector is set. Objects
// are slimmed by a transform before they are cached (only what conversion
// reads is kept) and are never modified afterwards. Event handlers only
// enqueue the key of the affected Service; workers recompute that
// service from the listers and the full state is handed to the sink.
// Nothing is published before every informer synced.
//
// # Outages
//
// Every list and watch call goes through a tracker: a failing call, or a
// watch dropped with an error (the reflector's watch error handler), makes
// the registry Degraded with the last published state kept; the informers
// retry with client-go's backoff, and once every informer's list or watch
// succeeds again the registry reports Synced. Changes made meanwhile arrive
// as events (or a relist) and are published as usual.
//
// # Remote clusters
//
// With secretDiscovery, the registry also watches Secrets holding remote
// kubeconfigs (istioctl create-remote-secret's format) and runs one
// registry per remote cluster through a Launcher (the gateway): a new
// Secret starts one, a changed kubeconfig is swapped make-before-break (the
// new connection syncs before the old one stops, meanwhile the old state is
// served), a deleted Secret stops it and its endpoints leave.
package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/client-go/util/workqueue"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// workers recompute services from the listers.
const workers = 2

// Indexes on the EndpointSlice informers.
const (
	idxService = "service" // namespace/service-name label
	idxPod     = "pod"     // namespace/name of target pods
	idxNode    = "node"    // node names
)

// Registry watches one Kubernetes cluster. Build it with Config.New or
// NewForClient. Run may be called again after it returned.
type Registry struct {
	common registries.Common
	cfg    Config
	log    *slog.Logger
	m      metrics

	creds  func() (*rest.Config, error) // static clusters
	client kubernetes.Interface         // NewForClient: used instead of creds
	remote *remoteSource                // a remote cluster found by secretDiscovery

	// clientFor connects with a kubeconfig from a Secret; tests replace it.
	clientFor func(kubeconfig []byte) (kubernetes.Interface, func(), error)

	disc discovery // secretDiscovery state; outlives Run
}

var _ registries.Registry = (*Registry)(nil)

func newRegistry(common registries.Common, cfg Config, creds func() (*rest.Config, error), log *slog.Logger) *Registry {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.ApplyDefaults()
	r := &Registry{
		common: common,
		cfg:    cfg,
		log:    log, // the caller's child logger carries the registry key
		m:      newMetrics(common.Name),
		creds:  creds,
	}
	r.clientFor = r.connectKubeconfig
	return r
}

// NewForClient returns a registry that watches the cluster behind client
// (for example client-go's fake clientset, in tests and benchmarks)
// instead of one named by a kubeconfig. cfg's Kubeconfig and Context are
// ignored; defaults are applied.
func NewForClient(common registries.Common, cfg Config, client kubernetes.Interface, log *slog.Logger) *Registry {
	r := newRegistry(common, cfg.clone(), nil, log)
	r.client = client
	return r
}

// fileCredentials reads a kubeconfig file (with a context), or the
// in-cluster service account when path is "".
func fileCredentials(path, kubeContext string) func() (*rest.Config, error) {
	return func() (*rest.Config, error) {
		if path == "" {
			c, err := rest.InClusterConfig()
			if err != nil {
				return nil, fmt.Errorf("in-cluster credentials (no kubeconfig set): %w", err)
			}
			return c, nil
		}
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
		c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
			&clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
		}
		return c, nil
	}
}

// connect builds a clientset from rc with its own dialer, so that close
// ends every connection it opened (client-go would otherwise share and
// keep transports process-wide).
func (r *Registry) connect(rc *rest.Config) (kubernetes.Interface, func(), error) {
	rc, closeAll := ownConnections(rc, r.cfg.QPS, r.cfg.Burst)
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	return client, closeAll, nil
}

// ownConnections returns a copy of rc with the given rate limits and a
// dialer of its own, and a func that closes every connection made through
// it.
func ownConnections(rc *rest.Config, qps float32, burst int) (*rest.Config, func()) {
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = qps, burst
	rc.UserAgent = "meshfed"
	if rc.Dial == nil {
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
		rc.Dial = d.DialContext
	}
	dialer := connrotation.NewDialer(connrotation.DialFunc(rc.Dial))
	rc.Dial = dialer.DialContext
	return rc, dialer.CloseAll
}

// Run implements registries.Registry.
func (r *Registry) Run(ctx context.Context, sink registries.Sink) error {
	if r.remote != nil {
		return r.runRemote(ctx, sink)
	}
	client, closeClient := r.client, func() {}
	if client == nil {
		rc, err := r.creds()
		if err != nil {
			return registries.Permanent(err)
		}
		if client, closeClient, err = r.connect(rc); err != nil {
			return registries.Permanent(err)
		}
	}
	defer closeClient()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	if sd := r.cfg.SecretDiscovery; sd != nil {
		wg.Go(func() { r.discoverSecrets(ctx, client) })
	}
	err := newWatch(r, client, r.clusterInfo(r.cfg.Network)).run(ctx, sink)
	cancel()
	wg.Wait()
	return err
}

func (r *Registry) clusterInfo(network string) clusterInfo {
	return clusterInfo{registry: r.common.Name, cluster: r.common.Name, network: network, domain: r.common.Domain}
}

// svcKey names a Service.
type svcKey struct{ ns, name string }

func (k svcKey) String() string { return k.ns + "/" + k.name }

// scope holds the namespaced informers of one namespace ("" = all).
type scope struct {
	services, slices, pods cache.SharedIndexInformer
}

// clusterWatch is one connection to a cluster: the informers, the work queue and
// the converted state. It lives for one call of run.
type clusterWatch struct {
	r      *Registry
	ci     clusterInfo
	client kubernetes.Interface
	log    *slog.Logger

	scopes     map[string]*scope // by namespace; "" = all namespaces
	nodes      cache.SharedIndexInformer
	namespaces cache.SharedIndexInformer // only with a namespace selector
	nsSel      labels.Selector
	all        []cache.SharedIndexInformer
	queue      *workqueue.Typed[svcKey]
	health     *health

	pub     *registries.Publisher[svcKey] // each Service as last computed
	mu      sync.Mutex
	eventAt map[svcKey]time.Time // first unprocessed event per key
	dirty   chan struct{}        // capacity 1: state changed
}

func newWatch(r *Registry, client kubernetes.Interface, ci clusterInfo) *clusterWatch {
	w := &clusterWatch{
		r:       r,
		ci:      ci,
		client:  client,
		log:     r.log,
		scopes:  map[string]*scope{},
		queue:   workqueue.NewTyped[svcKey](),
		eventAt: map[svcKey]time.Time{},
		dirty:   make(chan struct{}, 1),
	}
	w.health = newHealth()
	return w
}

// informer builds one informer whose list and watch calls are tracked.
func (w *clusterWatch) informer(name, resource string, lw *cache.ListWatch, obj runtime.Object, idx cache.Indexers) cache.SharedIndexInformer {
	inf := trackedInformer(w.health, name, lw, obj, cache.SharedIndexInformerOptions{Indexers: idx, ObjectDescription: name},
		func() { w.r.m.watchError(resource) })
	must(inf.SetTransform(slim))
	w.all = append(w.all, inf)
	return inf
}

// trackedInformer builds an informer over lw whose list and watch calls,
// and the watch errors its reflector sees, are recorded in h under name;
// onError is called for every failure.
func trackedInformer(h *health, name string, lw *cache.ListWatch, obj runtime.Object, opts cache.SharedIndexInformerOptions, onError func()) cache.SharedIndexInformer {
	t := &trackedLW{lw: lw, name: name, health: h, onError: onError}
	inf := cache.NewSharedIndexInformerWithOptions(t, obj, opts)
	must(inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, _ *cache.Reflector, err error) {
		// An expired resource version only means "relist"; not an outage.
		if ctx.Err() == nil && !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) && !errors.Is(err, io.EOF) {
			onError()
			h.set(name, err)
		}
	}))
	return inf
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
	sliceIdx := cache.Indexers{idxService: indexSliceService, idxPod: indexSlicePods, idxNode: indexSliceNodes}
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
			pods: w.informer("pods"+suffix, resPod, &cache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return cs.CoreV1().Pods(ns).List(ctx, o)
				},
				WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return cs.CoreV1().Pods(ns).Watch(ctx, o)
				},
			}, &corev1.Pod{}, nil),
		}
		w.scopes[ns] = sc
		if _, err := sc.services.AddEventHandler(w.serviceHandler()); err != nil {
			return err
		}
		if _, err := sc.slices.AddEventHandler(w.sliceHandler()); err != nil {
			return err
		}
		if _, err := sc.pods.AddEventHandler(w.podHandler(sc)); err != nil {
			return err
		}
	}
	w.nodes = w.informer("nodes", resNode, &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cs.CoreV1().Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().Nodes().Watch(ctx, o)
		},
	}, &corev1.Node{}, nil)
	if _, err := w.nodes.AddEventHandler(w.nodeHandler()); err != nil {
		return err
	}
	if cfg.NamespaceSelector != "" {
		sel, err := labels.Parse(cfg.NamespaceSelector)
		if err != nil {
			return err
		}
		w.nsSel = sel
		w.namespaces = w.informer("namespaces", resNamespace, &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return cs.CoreV1().Namespaces().List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return cs.CoreV1().Namespaces().Watch(ctx, o)
			},
		}, &corev1.Namespace{}, nil)
		if _, err := w.namespaces.AddEventHandler(w.namespaceHandler()); err != nil {
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

func indexSlicePods(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, e := range s.Endpoints {
		if r := e.TargetRef; r != nil && r.Kind == "Pod" {
			ns := r.Namespace
			if ns == "" {
				ns = s.Namespace
			}
			out = append(out, ns+"/"+r.Name)
		}
	}
	return out, nil
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

// Event handlers: they only enqueue keys of affected services.

func (w *clusterWatch) enqueue(k svcKey) {
	w.mu.Lock()
	if _, ok := w.eventAt[k]; !ok {
		w.eventAt[k] = time.Now()
	}
	w.mu.Unlock()
	w.queue.Add(k)
}

func metaOf(obj any) (metav1.Object, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	return m, ok
}

func (w *clusterWatch) serviceHandler() cache.ResourceEventHandler {
	on := func(ev string) func(obj any) {
		return func(obj any) {
			w.r.m.event(resService, ev)
			if m, ok := metaOf(obj); ok {
				w.enqueue(svcKey{m.GetNamespace(), m.GetName()})
			}
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: on(evAdd),
		UpdateFunc: func(oldObj, newObj any) {
			w.r.m.event(resService, evUpdate)
			o, ok1 := oldObj.(*corev1.Service)
			n, ok2 := newObj.(*corev1.Service)
			if ok1 && ok2 && reflect.DeepEqual(o.Spec, n.Spec) {
				return
			}
			if m, ok := metaOf(newObj); ok {
				w.enqueue(svcKey{m.GetNamespace(), m.GetName()})
			}
		},
		DeleteFunc: on(evDelete),
	}
}

func (w *clusterWatch) sliceHandler() cache.ResourceEventHandler {
	keyOf := func(obj any) (svcKey, bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok || s.Labels[labelServiceName] == "" {
			return svcKey{}, false
		}
		return svcKey{s.Namespace, s.Labels[labelServiceName]}, true
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			w.r.m.event(resEndpointSlice, evAdd)
			if k, ok := keyOf(obj); ok {
				w.enqueue(k)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			w.r.m.event(resEndpointSlice, evUpdate)
			ko, okO := keyOf(oldObj)
			kn, okN := keyOf(newObj)
			if okO && (!okN || ko != kn) {
				w.enqueue(ko)
			}
			if okN {
				w.enqueue(kn)
			}
		},
		DeleteFunc: func(obj any) {
			w.r.m.event(resEndpointSlice, evDelete)
			if k, ok := keyOf(obj); ok {
				w.enqueue(k)
			}
		},
	}
}

// enqueueByIndex enqueues the services of the slices found under an index
// value, in every scope.
func (w *clusterWatch) enqueueByIndex(index, value string) {
	for _, sc := range w.scopes {
		objs, err := sc.slices.GetIndexer().ByIndex(index, value)
		if err != nil {
			continue
		}
		for _, o := range objs {
			s := o.(*discoveryv1.EndpointSlice)
			if n := s.Labels[labelServiceName]; n != "" {
				w.enqueue(svcKey{s.Namespace, n})
			}
		}
	}
}

func labelsOf(obj any) map[string]string {
	if m, ok := metaOf(obj); ok {
		return m.GetLabels()
	}
	return nil
}

func (w *clusterWatch) podHandler(sc *scope) cache.ResourceEventHandler {
	on := func(ev string) func(obj any) {
		return func(obj any) {
			w.r.m.event(resPod, ev)
			if m, ok := metaOf(obj); ok {
				w.enqueuePod(sc, m.GetNamespace()+"/"+m.GetName())
			}
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: on(evAdd),
		UpdateFunc: func(oldObj, newObj any) {
			w.r.m.event(resPod, evUpdate)
			if reflect.DeepEqual(labelsOf(oldObj), labelsOf(newObj)) {
				return
			}
			if m, ok := metaOf(newObj); ok {
				w.enqueuePod(sc, m.GetNamespace()+"/"+m.GetName())
			}
		},
		DeleteFunc: on(evDelete),
	}
}

func (w *clusterWatch) enqueuePod(sc *scope, key string) {
	objs, err := sc.slices.GetIndexer().ByIndex(idxPod, key)
	if err != nil {
		return
	}
	for _, o := range objs {
		s := o.(*discoveryv1.EndpointSlice)
		if n := s.Labels[labelServiceName]; n != "" {
			w.enqueue(svcKey{s.Namespace, n})
		}
	}
}

func (w *clusterWatch) nodeHandler() cache.ResourceEventHandler {
	on := func(ev string) func(obj any) {
		return func(obj any) {
			w.r.m.event(resNode, ev)
			if m, ok := metaOf(obj); ok {
				w.enqueueByIndex(idxNode, m.GetName())
			}
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: on(evAdd),
		UpdateFunc: func(oldObj, newObj any) {
			w.r.m.event(resNode, evUpdate)
			if reflect.DeepEqual(labelsOf(oldObj), labelsOf(newObj)) {
				return
			}
			if m, ok := metaOf(newObj); ok {
				w.enqueueByIndex(idxNode, m.GetName())
			}
		},
		DeleteFunc: on(evDelete),
	}
}

func (w *clusterWatch) namespaceHandler() cache.ResourceEventHandler {
	enqueueNS := func(obj any) {
		m, ok := metaOf(obj)
		if !ok {
			return
		}
		sc := w.scopes[metav1.NamespaceAll]
		objs, err := sc.services.GetIndexer().ByIndex(cache.NamespaceIndex, m.GetName())
		if err != nil {
			return
		}
		for _, o := range objs {
			s := o.(*corev1.Service)
			w.enqueue(svcKey{s.Namespace, s.Name})
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { w.r.m.event(resNamespace, evAdd); enqueueNS(obj) },
		UpdateFunc: func(oldObj, newObj any) {
			w.r.m.event(resNamespace, evUpdate)
			if !reflect.DeepEqual(labelsOf(oldObj), labelsOf(newObj)) {
				enqueueNS(newObj)
			}
		},
		DeleteFunc: func(obj any) { w.r.m.event(resNamespace, evDelete); enqueueNS(obj) },
	}
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
	return obj.(*corev1.Pod).Labels
}

func (w *clusterWatch) nodeLocality(name string) model.Locality {
	obj, ok, err := w.nodes.GetIndexer().GetByKey(name)
	if err != nil || !ok {
		return model.Locality{}
	}
	return localityFromLabels(obj.(*corev1.Node).Labels)
}

func (w *clusterWatch) namespaceSelected(ns string) bool {
	if w.namespaces == nil {
		return true
	}
	obj, ok, err := w.namespaces.GetIndexer().GetByKey(ns)
	if err != nil || !ok {
		return false
	}
	return w.nsSel.Matches(labels.Set(obj.(*corev1.Namespace).Labels))
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
func (w *clusterWatch) status() registries.Status {
	if msg := w.health.err(); msg != "" {
		return registries.Status{State: registries.Degraded, Err: msg}
	}
	return registries.Status{State: registries.Synced}
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
	if w.pub.Published() && w.pub.Status().State == registries.Synced {
		w.r.m.synced.Set(1)
	} else {
		w.r.m.synced.Set(0)
	}
}

// run starts the informers, publishes once they synced and after every
// change, and reports the connection's health until ctx ends.
func (w *clusterWatch) run(ctx context.Context, sink registries.Sink) error {
	w.pub = registries.NewPublisher(w.r.common, sink, w.log, registries.PublisherOptions[svcKey]{
		Compare: func(a, b svcKey) int { return strings.Compare(a.String(), b.String()) },
	})
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
		case <-w.health.changed():
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
		case <-w.health.changed():
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

// health tracks the last outcome of every informer's list and watch calls.
type health struct {
	mu     sync.Mutex
	errs   map[string]error
	notify chan struct{} // closed and replaced on every change
}

func newHealth() *health { return &health{errs: map[string]error{}, notify: make(chan struct{})} }

// set records the outcome of a call of informer name (nil: success).
func (h *health) set(name string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	old, had := h.errs[name]
	if err == nil {
		if !had {
			return
		}
		delete(h.errs, name)
	} else {
		if had && old.Error() == err.Error() {
			return
		}
		h.errs[name] = err
	}
	close(h.notify)
	h.notify = make(chan struct{})
}

func (h *health) changed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.notify
}

// err summarizes the failing informers, "" if none.
func (h *health) err() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.errs) == 0 {
		return ""
	}
	names := make([]string, 0, len(h.errs))
	for n := range h.errs {
		names = append(names, n)
	}
	slices.Sort(names)
	return fmt.Sprintf("%s: %s", strings.Join(names, ", "), stableError(h.errs[names[0]]))
}

// stableError formats err without the query of a failed request's URL
// (client-go's carries a random watch timeout), so that one outage gives
// one message.
func stableError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil {
			u.RawQuery = ""
			return fmt.Sprintf("%s %s: %v", ue.Op, u.Redacted(), ue.Err)
		}
	}
	return err.Error()
}

// trackedLW is a ListerWatcher that records the outcome of every call.
type trackedLW struct {
	lw      *cache.ListWatch
	name    string
	health  *health
	onError func()
}

var _ cache.ListerWatcherWithContext = (*trackedLW)(nil)

func (t *trackedLW) record(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		t.onError()
	}
	t.health.set(t.name, err)
}

func (t *trackedLW) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	obj, err := t.lw.ListWithContext(ctx, o)
	t.record(ctx, err)
	return obj, err
}

func (t *trackedLW) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	wi, err := t.lw.WatchWithContext(ctx, o)
	t.record(ctx, err)
	return wi, err
}

func (t *trackedLW) List(o metav1.ListOptions) (runtime.Object, error) {
	return t.ListWithContext(context.Background(), o)
}

func (t *trackedLW) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return t.WatchWithContext(context.Background(), o)
}

// IsWatchListSemanticsUnSupported makes the reflector list and then watch
// instead of streaming the list (WatchListClient): client-go's streaming
// path waits out its retry backoff (up to 30s) without watching the
// context, which would stall stopping a registry whose API server is
// down.
func (t *trackedLW) IsWatchListSemanticsUnSupported() bool { return true }

var errNoLauncher = errors.New("secretDiscovery needs a launcher (the gateway); remote clusters are not started")
