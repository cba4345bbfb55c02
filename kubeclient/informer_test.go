package kubeclient

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
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

func pod(name, rv string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, ResourceVersion: rv, Labels: labels,
		Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}}}
}

// scriptLW lists what lists holds (one list per call; the last repeats)
// and hands out the watchers of watches in turn. A list blocks while
// gate is not nil and open.
type scriptLW struct {
	mu      sync.Mutex
	lists   [][]corev1.Pod
	nlist   int
	watches chan *watch.FakeWatcher
	gate    chan struct{}
}

func (s *scriptLW) listWatch() *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
			s.mu.Lock()
			gate := s.gate
			s.mu.Unlock()
			if gate != nil {
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			items := s.lists[min(s.nlist, len(s.lists)-1)]
			s.nlist++
			return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: fmt.Sprint(10 * s.nlist)}, Items: items}, nil
		},
		WatchFuncWithContext: func(ctx context.Context, _ metav1.ListOptions) (watch.Interface, error) {
			select {
			case w := <-s.watches:
				return w, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	}
}

// events records what the handlers saw, in order.
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, s)
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

func (e *events) handler(inf *Informer) cache.ResourceEventHandler {
	// The indexer holds an added or updated object before the handlers
	// see it, and no longer holds a deleted one.
	name := func(obj any, stored bool) string {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		p := obj.(*corev1.Pod)
		s := p.Name + "@" + p.ResourceVersion
		if _, ok, _ := inf.GetIndexer().GetByKey("shop/" + p.Name); ok != stored {
			s += fmt.Sprintf("(stored=%v)", ok)
		}
		return s
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			e.add(fmt.Sprintf("add %s initial=%v annotations=%d", name(obj, true), initial, len(obj.(*corev1.Pod).Annotations)))
		},
		UpdateFunc: func(_, obj any) { e.add("update " + name(obj, true)) },
		DeleteFunc: func(obj any) { e.add("delete " + name(obj, false)) },
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
	}
}

// TestInformer: the first list's objects are added as initial, watch
// events become adds, updates and deletes (stored before the handlers
// see them, transformed), and after a watch that expired (410) the
// informer lists again: objects gone meanwhile are deleted, changed ones
// updated. The expiry is tracked until that list succeeds.
func TestInformer(t *testing.T) {
	t.Parallel()
	lw := &scriptLW{watches: make(chan *watch.FakeWatcher, 2)}
	lw.lists = [][]corev1.Pod{
		{*pod("a", "1", nil), *pod("b", "1", nil)},
		{*pod("a", "7", nil), *pod("c", "7", nil)}, // the relist: b gone, a changed, c new
	}
	w1 := watch.NewFake()
	lw.watches <- w1
	tr := NewTracker()
	inf := tr.Informer("pods/shop", lw.listWatch(), &corev1.Pod{}, nil, nil)
	if err := inf.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			p.Annotations = nil
		}
		return obj, nil
	}); err != nil {
		t.Fatal(err)
	}
	var ev events
	if err := inf.AddEventHandler(ev.handler(inf)); err != nil {
		t.Fatal(err)
	}
	if inf.HasSynced() {
		t.Fatal("synced before running")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	defer func() { cancel(); <-done }()

	waitFor(t, "synced", inf.HasSynced)
	if err := inf.AddEventHandler(ev.handler(inf)); err == nil {
		t.Error("a handler was added to a running informer")
	}
	w1.Add(pod("d", "11", nil))
	w1.Modify(pod("a", "12", nil))
	w1.Delete(pod("d", "13", nil))
	want := []string{
		"add a@1 initial=true annotations=0",
		"add b@1 initial=true annotations=0",
		"add d@11 initial=false annotations=0",
		"update a@12",
		"delete d@13",
	}
	waitFor(t, "watch events handled", func() bool { return len(ev.list()) >= len(want) })
	if got := ev.list(); !slices.Equal(got, want) {
		t.Fatalf("events:\n got %q\nwant %q", got, want)
	}

	// The watch expires; the relist waits on the gate meanwhile.
	gate := make(chan struct{})
	lw.mu.Lock()
	lw.gate = gate
	lw.mu.Unlock()
	lw.watches <- watch.NewFake()
	w1.Error(&apierrors.NewResourceExpired("too old resource version: 12 (20)").ErrStatus)
	waitFor(t, "expiry tracked", func() bool { return tr.Err() != nil })
	if err := tr.Err(); !strings.Contains(err.Error(), "pods/shop: watch expired, relisting") || !apierrors.IsResourceExpired(err) {
		t.Errorf("Err while relisting = %v", err)
	}
	close(gate)
	want = append(want, "update a@7", "add c@7 initial=false annotations=0", "delete b@1")
	waitFor(t, "relist handled", func() bool { return len(ev.list()) >= len(want) })
	got := ev.list()
	// The relist's deletes and adds may come in either order.
	slices.Sort(got[5:])
	slices.Sort(want[5:])
	if !slices.Equal(got, want) {
		t.Fatalf("events after the relist:\n got %q\nwant %q", got, want)
	}
	waitFor(t, "relist clears the expiry", func() bool { return tr.Err() == nil })
	keys := inf.GetStore().ListKeys()
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"shop/a", "shop/c"}) {
		t.Errorf("store keys %v, want shop/a, shop/c", keys)
	}
}

// TestWatchErrorsAreTracked: an error a watch reports (not only a failed
// call) makes the informer failing until its next successful call.
func TestWatchErrorsAreTracked(t *testing.T) {
	t.Parallel()
	tr := NewTracker()
	w := watch.NewFake()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.PodList{}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return w, nil },
	}
	tlw := tr.track("pods", lw, nil)
	wi, err := tlw.WatchWithContext(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer wi.Stop()
	go w.Error(&apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", fmt.Errorf("no")).ErrStatus)
	ev := <-wi.ResultChan()
	if ev.Type != watch.Error {
		t.Fatalf("event %v, want the error passed on to the reflector", ev.Type)
	}
	if err := tr.Err(); err == nil || !apierrors.IsForbidden(err) {
		t.Errorf("Err = %v, want the watch's Forbidden", err)
	}
	if _, err := tlw.ListWithContext(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Err(); err != nil {
		t.Errorf("Err after a good list = %v", err)
	}
}
