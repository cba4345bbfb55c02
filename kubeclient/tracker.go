package kubeclient

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Tracker records the outcome of the list and watch calls of the
// informers it builds: a failing call, or a watch dropped with an error,
// is remembered until that informer's next successful call. It is what
// makes a registry or a config source Degraded, and is safe for
// concurrent use.
type Tracker struct{ h *health }

// NewTracker returns a Tracker with no failures.
func NewTracker() *Tracker { return &Tracker{h: newHealth()} }

// Informer builds an Informer over lw (objects of type obj, indexed by
// indexers) whose list and watch calls, and the errors its watches
// report, are tracked under name; onError, unless nil, is called for
// every failure (metrics). The informer lists and then watches (not the
// streaming list), so stopping it never waits out a backoff.
func (t *Tracker) Informer(name string, lw *cache.ListWatch, obj runtime.Object, indexers cache.Indexers, onError func()) *Informer {
	return NewInformer(name, t.track(name, lw, onError), obj, indexers)
}

func (t *Tracker) track(name string, lw *cache.ListWatch, onError func()) *trackedLW {
	if onError == nil {
		onError = func() {}
	}
	return &trackedLW{lw: lw, name: name, health: t.h, onError: onError}
}

// Err summarizes the informers whose last call failed (nil if none), e.g.
// "virtualservices: Get https://...: connection refused": the failing
// names, sorted, and the first one's error without the query of its URL
// (client-go's carries a random watch timeout), so that one outage gives
// one message. The error unwraps to the first failing informer's error
// (by name), so errors.As finds an API status in it.
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

// WatchWithContext records the call's outcome and every error the watch
// then reports. An expired resource version (410, as after an API server
// restart) is recorded too: the cache may be missing changes until the
// reflector's relist, whose success clears it.
func (t *trackedLW) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	wi, err := t.lw.WatchWithContext(ctx, o)
	t.record(ctx, err)
	if err != nil {
		return wi, err
	}
	tw := &trackedWatch{in: wi, out: make(chan watch.Event), stop: make(chan struct{})}
	go tw.loop(func(ev watch.Event) {
		err := apierrors.FromObject(ev.Object)
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			err = fmt.Errorf("watch expired, relisting: %w", err)
		}
		t.record(ctx, err)
	})
	return tw, nil
}

// trackedWatch passes a watch's events on, reporting its errors first.
// Unlike watch.Filter, Stop also ends the goroutine when nobody reads.
type trackedWatch struct {
	in   watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func (w *trackedWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *trackedWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.in.Stop()
	})
}

func (w *trackedWatch) loop(onError func(watch.Event)) {
	defer close(w.out)
	for {
		select {
		case ev, ok := <-w.in.ResultChan():
			if !ok {
				return
			}
			if ev.Type == watch.Error {
				onError(ev)
			}
			select {
			case w.out <- ev:
			case <-w.stop:
				return
			}
		case <-w.stop:
			return
		}
	}
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
// context, which would stall stopping a reader whose API server is down.
func (t *trackedLW) IsWatchListSemanticsUnSupported() bool { return true }
