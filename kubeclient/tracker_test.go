package kubeclient

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestTrackerErr: failures are kept per informer until its next success;
// the summary names the failing informers, sorted, with the first one's
// error (its URL without the query) and unwraps to it; Changed fires on
// every change and only then.
func TestTrackerErr(t *testing.T) {
	t.Parallel()
	tr := NewTracker()
	if err := tr.Err(); err != nil {
		t.Fatalf("new tracker: %v", err)
	}
	ch := tr.Changed()
	tr.h.set("pods", nil) // a success with no failure: no change
	if closed(ch) {
		t.Error("Changed fired for a success that changed nothing")
	}

	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "", errors.New("no"))
	tr.h.set("services", fmt.Errorf("list: %w", forbidden))
	tr.h.set("pods", &url.Error{Op: "Get", URL: "https://api:6443/api/v1/pods?timeout=7m31s&watch=true", Err: errors.New("connection refused")})
	if !closed(ch) {
		t.Error("Changed did not fire for a failure")
	}
	err := tr.Err()
	if err == nil || err.Error() != "pods, services: Get https://api:6443/api/v1/pods: connection refused" {
		t.Errorf("Err = %v, want both names, sorted, and the first one's error without the query", err)
	}
	var ue *url.Error
	if !errors.As(err, &ue) {
		t.Errorf("Err does not unwrap to the first failing informer's error: %#v", err)
	}

	ch = tr.Changed()
	tr.h.set("pods", &url.Error{Op: "Get", URL: "https://api:6443/api/v1/pods?timeout=7m31s&watch=true", Err: errors.New("connection refused")})
	if closed(ch) {
		t.Error("Changed fired for the same failure again")
	}
	tr.h.set("pods", nil)
	if !closed(ch) {
		t.Error("Changed did not fire for a recovery")
	}
	if err := tr.Err(); err == nil || !strings.HasPrefix(err.Error(), "services: ") || !apierrors.IsForbidden(err) {
		t.Errorf("Err = %v, want services' Forbidden only (errors.As finds the API status)", err)
	}
	tr.h.set("services", nil)
	if err := tr.Err(); err != nil {
		t.Errorf("Err after every informer recovered = %v", err)
	}
}

// flakyLW fails its first lists, then lists nothing and watches forever.
type flakyLW struct {
	failures atomic.Int32
}

func (f *flakyLW) listWatch() *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			if f.failures.Add(-1) >= 0 {
				return nil, errors.New("connection refused")
			}
			return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			return watch.NewFake(), nil
		},
	}
}

// TestTrackerInformer: an informer's failing list is tracked under its
// name (and counted through onError) until a list succeeds; stopping is
// prompt.
func TestTrackerInformer(t *testing.T) {
	t.Parallel()
	tr := NewTracker()
	lw := &flakyLW{}
	lw.failures.Store(1)
	var errs atomic.Int32
	inf := tr.Informer("pods/shop", lw.listWatch(), &corev1.Pod{}, nil, func() { errs.Add(1) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	defer func() { cancel(); <-done }()

	waitUntil := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20s (Err %v)", what, tr.Err())
			}
		}
	}
	waitUntil("failed list tracked", func() bool { return tr.Err() != nil })
	// The failed call, then the reflector's report of it (the watch error
	// handler): both tracked and counted.
	if err := tr.Err(); !strings.HasPrefix(err.Error(), "pods/shop: ") || !strings.HasSuffix(err.Error(), "connection refused") || errs.Load() < 1 {
		t.Errorf("Err %v after %d errors, want pods/shop: ...connection refused, counted", err, errs.Load())
	}
	waitUntil("synced and recovered", func() bool { return inf.HasSynced() && tr.Err() == nil })

	// Stopping does not wait out client-go's backoff.
	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("informer did not stop within 2s")
	}
}

// TestTrackedListerWatcher: a tracked ListerWatcher records its calls,
// with a nil onError, and asks for list-then-watch.
func TestTrackedListerWatcher(t *testing.T) {
	t.Parallel()
	tr := NewTracker()
	lw := &flakyLW{}
	lw.failures.Store(1)
	var tlw cache.ListerWatcher = tr.track("secrets/istio-system", lw.listWatch(), nil)
	lwc, ok := tlw.(cache.ListerWatcherWithContext)
	if !ok {
		t.Fatalf("%T does not take a context", tlw)
	}
	if _, err := lwc.ListWithContext(t.Context(), metav1.ListOptions{}); err == nil {
		t.Fatal("first list succeeded")
	}
	if err := tr.Err(); err == nil || err.Error() != "secrets/istio-system: connection refused" {
		t.Errorf("Err = %v", err)
	}
	if _, err := lwc.ListWithContext(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Err(); err != nil {
		t.Errorf("Err after a good list = %v", err)
	}
	if u, ok := tlw.(interface{ IsWatchListSemanticsUnSupported() bool }); !ok || !u.IsWatchListSemanticsUnSupported() {
		t.Error("streaming lists not turned off: stopping would wait out client-go's backoff")
	}
}

// TestCallsAfterCancelAreNotFailures: a call that fails because its
// context ended is not an outage.
func TestCallsAfterCancelAreNotFailures(t *testing.T) {
	t.Parallel()
	tr := NewTracker()
	lw := &flakyLW{}
	lw.failures.Store(1)
	tlw := tr.track("pods", lw.listWatch(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tlw.ListWithContext(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("list succeeded")
	}
	if err := tr.Err(); err != nil {
		t.Errorf("Err = %v, want none for a cancelled call", err)
	}
}
