package kube

import (
	"maps"
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// Event handlers: they only enqueue keys of affected services.

func (w *clusterWatch) enqueue(k svcKey) {
	w.mu.Lock()
	if _, ok := w.eventAt[k]; !ok {
		w.eventAt[k] = time.Now()
	}
	w.mu.Unlock()
	w.queue.Add(k)
}

// afterInitialList wraps h so that the adds of an informer's initial list
// are only counted: run converts every service from the caches once all
// informers listed, so enqueueing them too would convert every service
// again after the first publish (with 100,000 pods, a queue of ten
// thousand services that a change waits behind).
func (w *clusterWatch) afterInitialList(resource string, h cache.ResourceEventHandler) cache.ResourceEventHandler {
	return initialListSkipper{h: h, skipped: func() { w.r.m.event(resource, evAdd) }}
}

type initialListSkipper struct {
	h       cache.ResourceEventHandler
	skipped func()
}

func (s initialListSkipper) OnAdd(obj any, isInInitialList bool) {
	if isInInitialList {
		s.skipped()
		return
	}
	s.h.OnAdd(obj, false)
}

func (s initialListSkipper) OnUpdate(oldObj, newObj any) { s.h.OnUpdate(oldObj, newObj) }
func (s initialListSkipper) OnDelete(obj any)            { s.h.OnDelete(obj) }

func metaOf(obj any) (metav1.Object, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if l, ok := obj.(*labelled); ok {
		return l.GetObjectMeta(), true
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
			if ok1 && ok2 && reflect.DeepEqual(o.Spec, n.Spec) && maps.Equal(o.Annotations, n.Annotations) { // the transform keeps only the annotations conversion reads
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
		if !ok {
			return svcKey{}, false
		}
		return sliceService(s)
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
		w.enqueueSlices(sc, index, value)
	}
}

// enqueueSlices enqueues the services of the slices of scope sc found
// under an index value.
func (w *clusterWatch) enqueueSlices(sc *scope, index, value string) {
	objs, err := sc.slices.GetIndexer().ByIndex(index, value)
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

func labelsOf(obj any) map[string]string {
	if l, ok := obj.(*labelled); ok {
		return l.labels // conversion reads each endpoint's pod: no copy
	}
	if m, ok := metaOf(obj); ok {
		return m.GetLabels()
	}
	return nil
}

func (w *clusterWatch) podHandler() cache.ResourceEventHandler {
	return w.labelsHandler(resPod, func(m metav1.Object) {
		for _, k := range w.pods.services(podRef{m.GetNamespace(), m.GetName()}) {
			w.enqueue(k)
		}
	})
}

func (w *clusterWatch) nodeHandler() cache.ResourceEventHandler {
	return w.labelsHandler(resNode, func(m metav1.Object) { w.enqueueByIndex(idxNode, m.GetName()) })
}

// labelsHandler counts resource's events and hands the object to enqueue
// when it is added or deleted, and when an update changed its labels
// (what endpoints read of pods and nodes).
func (w *clusterWatch) labelsHandler(resource string, enqueue func(metav1.Object)) cache.ResourceEventHandler {
	on := func(ev string) func(obj any) {
		return func(obj any) {
			w.r.m.event(resource, ev)
			if m, ok := metaOf(obj); ok {
				enqueue(m)
			}
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: on(evAdd),
		UpdateFunc: func(oldObj, newObj any) {
			w.r.m.event(resource, evUpdate)
			if reflect.DeepEqual(labelsOf(oldObj), labelsOf(newObj)) {
				return
			}
			if m, ok := metaOf(newObj); ok {
				enqueue(m)
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
