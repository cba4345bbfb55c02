package kube

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

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
