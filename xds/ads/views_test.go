package ads

import (
	"maps"
	"slices"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
)

// viewStream is a stream's watcher and wildcard CDS subscription in a
// store, without the protocol around them.
func viewStream(s *store, key string) (*watcher, *Subscription) {
	w := newWatcher()
	s.setView(w, nil, ClassEnvoy, key)
	sub := s.subscription(w, s.lookup(ClassEnvoy, ClusterType), ClusterType)
	s.subscribeSotw(sub, map[string]string{}, true, nil)
	w.take()
	sub.takeDirty()
	return w, sub
}

// visibleNames lists what sub reads now.
func visibleNames(s *store, sub *Subscription) []string {
	return slices.Sorted(maps.Keys(s.matching(sub)))
}

func clusters(names ...string) map[string]types.Resource {
	out := map[string]types.Resource{}
	for _, n := range names {
		out[n] = &cluster.Cluster{Name: n}
	}
	return out
}

// TestViews: a listing view shows what it lists, a hiding view all but
// what it hides, own resources replace the collection's; an update of
// the collection wakes only the streams whose view shows it; a view
// change wakes only its streams; a stream moved to another view is
// marked to compare everything, and dropping a view leaves its streams
// unscoped.
func TestViews(t *testing.T) {
	t.Parallel()
	s := newTestStore()
	cds := KindOf(ClassEnvoy, ClusterType)
	s.apply(Changes{cds: {Updated: clusters("a", "b", "c")}}, []ViewUpdate{
		{Key: "list", Changes: map[Kind]*ViewChange{cds: {Set: map[string]ViewEntry{"a": {}, "own": {Own: &cluster.Cluster{Name: "own"}}}}}},
		{Key: "hide", Changes: map[Kind]*ViewChange{cds: {All: true, Set: map[string]ViewEntry{"c": {}}}}},
	})
	wl, list := viewStream(s, "list")
	wh, hide := viewStream(s, "hide")
	wu, plain := viewStream(s, "")
	if got := visibleNames(s, list); !slices.Equal(got, []string{"a", "own"}) {
		t.Errorf("listing view reads %v", got)
	}
	if got := visibleNames(s, hide); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("hiding view reads %v", got)
	}
	if got := visibleNames(s, plain); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("unscoped reads %v", got)
	}
	if n := s.count(hide); n != 2 {
		t.Errorf("count of the hiding view = %d", n)
	}

	// b changes: the listing view does not show it.
	s.apply(Changes{cds: {Updated: clusters("b")}}, nil)
	woken := func(w *watcher) bool { return len(w.take()) > 0 }
	if woken(wl) || !woken(wh) || !woken(wu) {
		t.Error("an update of b woke the wrong streams (want the hiding view's and the unscoped one)")
	}
	hide.takeDirty()
	plain.takeDirty()

	// The listing view gains b: only its stream wakes, for b.
	s.apply(nil, []ViewUpdate{{Key: "list", Changes: map[Kind]*ViewChange{cds: {Set: map[string]ViewEntry{"b": {}}}}}})
	if !woken(wl) || woken(wh) || woken(wu) {
		t.Error("a view change woke streams of other views")
	}
	if d, _ := list.takeDirty(); !slices.Equal(slices.Collect(maps.Keys(d)), []string{"b"}) {
		t.Errorf("dirty after the view change = %v", d)
	}

	// The unscoped stream moves to the listing view.
	s.mu.Lock()
	s.moveLocked(wu, s.views["list"], nil)
	s.mu.Unlock()
	if _, all := plain.takeDirty(); !all {
		t.Error("a moved stream is not marked to compare everything")
	}
	if got := visibleNames(s, plain); !slices.Equal(got, []string{"a", "b", "own"}) {
		t.Errorf("moved stream reads %v", got)
	}
	if in := s.viewsInUse(); in["list"] != 2 || in["hide"] != 1 {
		t.Errorf("views in use = %v", in)
	}

	// The hiding view is dropped: its stream reads the collection.
	s.apply(nil, []ViewUpdate{{Key: "hide", Drop: true}})
	if got := visibleNames(s, hide); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("stream of a dropped view reads %v", got)
	}
	s.drop(wl, []*Subscription{list})
	s.drop(wh, []*Subscription{hide})
	s.drop(wu, []*Subscription{plain})
	if in := s.viewsInUse(); len(in) != 0 || len(s.watchers) != 0 {
		t.Errorf("after every stream closed: views in use %v, watchers %d", in, len(s.watchers))
	}
}
