package ads

import (
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
)

// Views: what one scope of clients reads of some collections
// (docs/architecture.md §3.7, Istio's Sidecar and exportTo). A view is
// named by a key its owner chooses (Config.ViewOf) and holds, per
// collection it covers, entries over the collection's resources:
//
//   - All false: the view holds only the names it lists, each either the
//     collection's resource of that name (entry Shared) or a resource of
//     its own;
//   - All true: the view holds every resource of the collection except
//     the names it hides, and resources of its own in place of some.
//
// Every stream of one view reads the same resources: each resource of a
// view is marshalled once however many streams read it, and a shared
// entry reuses the collection's wire form. An update of the collection
// wakes a view's streams only for names the view shows; a change of a
// view wakes only that view's streams. A stream moved to another view
// (Server.Rescope) is compared name by name with what its client holds,
// as any update is, so a resource in both views is not sent again and
// never removed on the way (make-before-break).

// ViewEntry is how a view holds one name of a collection.
type ViewEntry struct {
	// Own is the view's own resource of that name; nil: the collection's
	// resource (All false) or hidden (All true).
	Own types.Resource
}

// ViewChange changes one collection of a view.
type ViewChange struct {
	// All is the view's mode for the collection (see the package's Views
	// comment); it is fixed when the view first names the collection.
	All bool
	// Set adds or replaces entries.
	Set map[string]ViewEntry
	// Delete removes entries (All false: the name is no longer in the
	// view; All true: it is shown as the collection holds it).
	Delete []string
}

// ViewUpdate creates, changes or drops one view.
type ViewUpdate struct {
	Key string
	// Drop removes the view; its streams read the collections unscoped
	// until they are moved (Rescope).
	Drop bool
	// Changes per collection the view covers.
	Changes map[Kind]*ViewChange
}

// view is one view in the store. Guarded by store.mu.
type view struct {
	key     string
	colls   map[*collection]*viewColl
	streams int // watchers in the view
}

// viewColl is a view's part of one collection.
type viewColl struct {
	all     bool
	entries map[string]*cachedRes // nil value: shared (all false) or hidden (all true)
	wild    map[*Subscription]struct{}
}

// resource is the resource the view shows for name in c; nil when none.
func (vc *viewColl) resource(c *collection, name string) *cachedRes {
	r, listed := vc.entries[name]
	if r != nil {
		return r
	}
	if listed == vc.all { // hidden, or not in the view
		return nil
	}
	return c.res[name]
}

// showsShared reports whether the view shows the collection's resource
// of name (so an update of it concerns the view's streams).
func (vc *viewColl) showsShared(name string) bool {
	r, listed := vc.entries[name]
	return r == nil && listed != vc.all
}

// each calls f for every resource the view shows of c.
func (vc *viewColl) each(c *collection, f func(name string, r *cachedRes)) {
	if !vc.all {
		for n, r := range vc.entries {
			if r == nil {
				r = c.res[n]
			}
			if r != nil {
				f(n, r)
			}
		}
		return
	}
	for n, r := range c.res {
		if e, listed := vc.entries[n]; listed {
			if e != nil {
				f(n, e)
			}
			continue
		}
		f(n, r)
	}
	for n, e := range vc.entries {
		if _, inColl := c.res[n]; e != nil && !inColl {
			f(n, e)
		}
	}
}

// size is how many resources the view shows of c.
func (vc *viewColl) size(c *collection) int {
	n := 0
	vc.each(c, func(string, *cachedRes) { n++ })
	return n
}

// viewColl returns the view's part of the collection ts reads, nil when
// ts reads it unscoped. Callers hold store.mu.
func (ts *Subscription) viewColl() *viewColl {
	if ts.view == nil || ts.coll == nil {
		return nil
	}
	return ts.view.colls[ts.coll]
}

// resource is the current resource name ts would read, nil when none.
// Callers hold store.mu.
func (ts *Subscription) resource(name string) *cachedRes {
	if vc := ts.viewColl(); vc != nil {
		return vc.resource(ts.coll, name)
	}
	return ts.coll.res[name]
}

// eachVisible calls f for every resource ts can read (the whole
// collection, or its view's part). Callers hold store.mu.
func (ts *Subscription) eachVisible(f func(name string, r *cachedRes)) {
	if vc := ts.viewColl(); vc != nil {
		vc.each(ts.coll, f)
		return
	}
	for n, r := range ts.coll.res {
		f(n, r)
	}
}

// wildSet is where a wildcard ts is indexed: its view's part of the
// collection, or the collection's. Callers hold store.mu.
func (ts *Subscription) wildSet() map[*Subscription]struct{} {
	if vc := ts.viewColl(); vc != nil {
		return vc.wild
	}
	return ts.coll.wild
}

// applyViews installs view updates. Callers hold store.mu; the watchers
// to wake are appended to woken.
func (s *store) applyViews(ups []ViewUpdate, woken []*watcher) []*watcher {
	for _, u := range ups {
		v := s.views[u.Key]
		if u.Drop {
			if v != nil {
				woken = s.dropView(v, woken)
			}
			continue
		}
		if v == nil {
			v = &view{key: u.Key, colls: map[*collection]*viewColl{}}
			s.views[u.Key] = v
		}
		for _, coll := range s.order { // the order streams send types in
			ch := u.Changes[coll.Kind]
			if ch == nil {
				continue
			}
			vc := v.colls[coll]
			if vc == nil {
				vc = &viewColl{all: ch.All, entries: map[string]*cachedRes{}, wild: map[*Subscription]struct{}{}}
				v.colls[coll] = vc
				coll.views[vc] = struct{}{}
				woken = s.resync(v, coll, vc, woken) // the view's streams read it from now on
			}
			if vc.all != ch.All { // the view changed mode: it starts again
				vc.all = ch.All
				clear(vc.entries)
				woken = s.resync(v, coll, nil, woken)
			}
			for name, e := range ch.Set {
				var r *cachedRes
				if e.Own != nil {
					r = newResource(coll.AnyTypeURL, name, e.Own)
				}
				vc.entries[name] = r
				woken = vc.mark(v, coll, name, woken)
			}
			for _, name := range ch.Delete {
				delete(vc.entries, name)
				woken = vc.mark(v, coll, name, woken)
			}
		}
	}
	return woken
}

// resync marks every name the subscriptions of view v's streams to coll
// read dirty; with to (the view's new part of coll), a wildcard one is
// first moved from the collection's index to it. Callers hold store.mu.
func (s *store) resync(v *view, coll *collection, to *viewColl, woken []*watcher) []*watcher {
	for w := range s.watchers {
		if w.view != v {
			continue
		}
		for _, sub := range w.subs {
			if sub.coll != coll {
				continue
			}
			if to != nil && sub.wildcard {
				delete(coll.wild, sub)
				to.wild[sub] = struct{}{}
			}
			sub.markAll()
			woken = sub.wakeFor(woken)
		}
	}
	return woken
}

// mark records name as dirty on the subscriptions of view v that read it.
func (vc *viewColl) mark(v *view, c *collection, name string, woken []*watcher) []*watcher {
	for sub := range vc.wild {
		woken = sub.markDirty(name, woken)
	}
	if e := c.subs[name]; e != nil {
		for sub := range e.set {
			if sub.view == v {
				woken = sub.markDirty(name, woken)
			}
		}
	}
	return woken
}

// dropView removes v; its streams read the collections unscoped.
func (s *store) dropView(v *view, woken []*watcher) []*watcher {
	for w := range s.watchers {
		if w.view == v {
			woken = s.moveLocked(w, nil, woken)
		}
	}
	for coll, vc := range v.colls {
		delete(coll.views, vc)
	}
	delete(s.views, v.key)
	return woken
}

// moveLocked moves w's subscriptions to view to (nil: unscoped) and marks
// everything they read dirty. Callers hold store.mu.
func (s *store) moveLocked(w *watcher, to *view, woken []*watcher) []*watcher {
	if w.view == to {
		return woken
	}
	if w.view != nil {
		w.view.streams--
	}
	if to != nil {
		to.streams++
	}
	for _, sub := range w.subs {
		if sub.coll != nil && sub.wildcard {
			delete(sub.wildSet(), sub)
		}
		sub.view = to
		if sub.coll != nil && sub.wildcard {
			sub.wildSet()[sub] = struct{}{}
		}
		sub.markAll()
		woken = sub.wakeFor(woken)
	}
	w.view = to
	return woken
}

// wakeFor queues sub on its watcher and appends the watcher to woken if
// it was not pending. Callers hold store.mu.
func (sub *Subscription) wakeFor(woken []*watcher) []*watcher {
	w := sub.w
	w.mu.Lock()
	first := sub.queueLocked()
	w.mu.Unlock()
	if first {
		woken = append(woken, w)
	}
	return woken
}

// setView puts a new stream's watcher in the view key ("" or unknown:
// none) before it subscribes to anything.
func (s *store) setView(w *watcher, node *core.Node, class Class, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.node, w.class = node, class
	s.watchers[w] = struct{}{}
	if key != "" {
		if v := s.views[key]; v != nil {
			s.moveLocked(w, v, nil)
		}
	}
}

// rescope moves every watcher whose view viewOf names now differs, and
// returns the keys of the views that have streams.
func (s *store) rescope(viewOf func(*core.Node, Class) string) map[string]int {
	type stream struct {
		node  *core.Node
		class Class
	}
	s.mu.RLock()
	streams := make(map[*watcher]stream, len(s.watchers))
	for w := range s.watchers {
		streams[w] = stream{w.node, w.class}
	}
	s.mu.RUnlock()
	keys := make(map[*watcher]string, len(streams))
	for w, st := range streams {
		keys[w] = viewOf(st.node, st.class) // may apply views (the owner builds new ones)
	}
	var woken []*watcher
	s.mu.Lock()
	for w, key := range keys {
		if _, open := s.watchers[w]; !open {
			continue
		}
		var to *view
		if key != "" {
			to = s.views[key]
		}
		woken = s.moveLocked(w, to, woken)
	}
	inUse := s.viewsInUseLocked()
	s.mu.Unlock()
	for _, w := range woken {
		w.wakeUp()
	}
	return inUse
}

// viewsInUse returns the views that have streams, with how many.
func (s *store) viewsInUse() map[string]int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.viewsInUseLocked()
}

func (s *store) viewsInUseLocked() map[string]int {
	inUse := map[string]int{}
	for k, v := range s.views {
		if v.streams > 0 {
			inUse[k] = v.streams
		}
	}
	return inUse
}
