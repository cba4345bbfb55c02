package kube

import (
	"cmp"
	"slices"
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// podIndex maps each pod that an EndpointSlice lists to the services of
// the slices listing it, so that a pod's events enqueue those services.
// It counts per service how many slices list the pod (a pod sits in two
// slices of its service while the controller moves it). One entry per
// endpoint, about 80 bytes where an index of client-go's informer holds a
// set per value (about 250 bytes). Safe for concurrent use.
type podIndex struct {
	mu   sync.Mutex
	one  map[podRef]svcCount   // pods of one service: nearly all
	more map[podRef][]svcCount // pods of several services
}

type podRef struct{ ns, name string }

type svcCount struct {
	svc svcKey
	n   int32
}

func newPodIndex() *podIndex {
	return &podIndex{one: map[podRef]svcCount{}, more: map[podRef][]svcCount{}}
}

// services returns the services whose slices list pod.
func (x *podIndex) services(pod podRef) []svcKey {
	x.mu.Lock()
	defer x.mu.Unlock()
	if c, ok := x.one[pod]; ok {
		return []svcKey{c.svc}
	}
	var out []svcKey
	for _, c := range x.more[pod] {
		out = append(out, c.svc)
	}
	return out
}

// change counts the pods of slice s in (delta 1) or out (delta -1).
func (x *podIndex) change(s *discoveryv1.EndpointSlice, delta int32) {
	svc, ok := sliceService(s)
	if !ok {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, e := range s.Endpoints {
		if r := e.TargetRef; r != nil && r.Kind == "Pod" {
			x.add(podRef{cmp.Or(r.Namespace, s.Namespace), r.Name}, svc, delta)
		}
	}
}

func (x *podIndex) add(pod podRef, svc svcKey, delta int32) {
	if c, ok := x.one[pod]; ok {
		if c.svc == svc {
			if c.n += delta; c.n > 0 {
				x.one[pod] = c
			} else {
				delete(x.one, pod)
			}
			return
		}
		if delta < 0 {
			return // not counted for svc
		}
		delete(x.one, pod)
		x.more[pod] = []svcCount{c}
	}
	cs := x.more[pod]
	i := slices.IndexFunc(cs, func(c svcCount) bool { return c.svc == svc })
	switch {
	case i >= 0:
		if cs[i].n += delta; cs[i].n <= 0 {
			cs = slices.Delete(cs, i, i+1)
		}
	case delta > 0:
		cs = append(cs, svcCount{svc, delta})
	}
	switch len(cs) {
	case 0:
		delete(x.more, pod)
	case 1:
		delete(x.more, pod)
		x.one[pod] = cs[0]
	default:
		x.more[pod] = cs
	}
}

// handler keeps the index from a slice informer's events, those of its
// initial list included.
func (x *podIndex) handler() cache.ResourceEventHandler {
	slice := func(obj any) *discoveryv1.EndpointSlice {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		s, _ := obj.(*discoveryv1.EndpointSlice)
		return s
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if s := slice(obj); s != nil {
				x.change(s, 1)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			if s := slice(oldObj); s != nil {
				x.change(s, -1)
			}
			if s := slice(newObj); s != nil {
				x.change(s, 1)
			}
		},
		DeleteFunc: func(obj any) {
			if s := slice(obj); s != nil {
				x.change(s, -1)
			}
		},
	}
}

// sliceService is the Service a slice belongs to (its service-name label).
func sliceService(s *discoveryv1.EndpointSlice) (svcKey, bool) {
	n := s.Labels[labelServiceName]
	return svcKey{s.Namespace, n}, n != ""
}
