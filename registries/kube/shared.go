package kube

import (
	"errors"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// This file is what other packages reuse of the registry's way to reach a
// cluster: the Kubernetes config source (istioconfig/crd) reads Istio's
// CRDs from the clusters of registries of kind kubernetes, with their
// credentials and the same outage tracking (docs/architecture.md §3.6).

// Connect returns a REST config for the cluster of this block — its
// kubeconfig and context, or the in-cluster credentials when kubeconfig is
// "" — with its qps and burst and a dialer of its own, and a func that
// closes every connection made through it. The kubeconfig is read on
// every call, so rotated credentials are picked up. Call it on a block
// with defaults applied.
func (c *Config) Connect() (*rest.Config, func(), error) {
	rc, err := fileCredentials(c.Kubeconfig, c.Context)()
	if err != nil {
		return nil, nil, err
	}
	rc, closeAll := ownConnections(rc, c.QPS, c.Burst)
	return rc, closeAll, nil
}

// Tracker records the outcome of the list and watch calls of the
// informers it builds: a failing call, or a watch dropped with an error,
// is remembered until that informer's next successful call. It is what
// makes a registry Degraded, and is safe for concurrent use.
type Tracker struct{ h *health }

// NewTracker returns a Tracker with no failures.
func NewTracker() *Tracker { return &Tracker{h: newHealth()} }

// Informer builds an informer over lw (objects of type obj) whose calls
// are tracked under name. The informer uses list-then-watch (not the
// streaming list), so stopping it never waits out client-go's backoff.
func (t *Tracker) Informer(name string, lw *cache.ListWatch, obj runtime.Object, opts cache.SharedIndexInformerOptions) cache.SharedIndexInformer {
	return trackedInformer(t.h, name, lw, obj, opts, func() {})
}

// Err summarizes the informers whose last call failed ("" if none), e.g.
// "virtualservices: Get https://...: connection refused".
// The error unwraps to the first failing informer's error (by name), so
// errors.As finds an API status in it.
func (t *Tracker) Err() error {
	s := t.h.err()
	if s == "" {
		return nil
	}
	t.h.mu.Lock()
	defer t.h.mu.Unlock()
	names := make([]string, 0, len(t.h.errs))
	for n := range t.h.errs {
		names = append(names, n)
	}
	if len(names) == 0 { // recovered in between
		return errors.New(s)
	}
	slices.Sort(names)
	return trackerError{msg: s, first: t.h.errs[names[0]]}
}

type trackerError struct {
	msg   string
	first error
}

func (e trackerError) Error() string { return e.msg }
func (e trackerError) Unwrap() error { return e.first }

// Changed returns a channel closed at the next change of Err.
func (t *Tracker) Changed() <-chan struct{} { return t.h.changed() }
