package zookeeper

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/meshfed/meshfed/registries"
)

type watchKind uint8

const (
	watchChild watchKind = iota
	watchData
	watchExist
)

type watchKey struct {
	path string
	kind watchKind
}

// isArmed and arm read and write armed; resync's readers call them at
// once.
func (w *watcher) isArmed(k watchKey) bool {
	w.readMu.Lock()
	defer w.readMu.Unlock()
	return w.armed[k]
}

func (w *watcher) arm(k watchKey) {
	w.readMu.Lock()
	w.armed[k] = true
	w.readMu.Unlock()
}

// children lists path's children and makes sure a child watch is armed.
func (w *watcher) children(path string) ([]string, error) {
	k := watchKey{path, watchChild}
	if w.isArmed(k) {
		c, _, err := w.conn.Children(path)
		return c, err
	}
	c, _, _, err := w.conn.ChildrenW(path)
	if err == nil {
		w.arm(k)
	}
	return c, err
}

// data reads path and makes sure a data watch is armed.
func (w *watcher) data(path string) ([]byte, error) {
	k := watchKey{path, watchData}
	if w.isArmed(k) {
		b, _, err := w.conn.Get(path)
		return b, err
	}
	b, _, _, err := w.conn.GetW(path)
	if err == nil {
		w.arm(k)
	}
	return b, err
}

// exists checks path and makes sure an exist watch is armed (it fires when
// the node is created).
func (w *watcher) exists(path string) (bool, error) {
	k := watchKey{path, watchExist}
	if w.isArmed(k) {
		ok, _, err := w.conn.Exists(path)
		return ok, err
	}
	ok, _, _, err := w.conn.ExistsW(path)
	if err == nil {
		w.arm(k)
	}
	return ok, err
}

func (w *watcher) join(parent, child string) string {
	if parent == "/" {
		return "/" + child
	}
	return parent + "/" + child
}

// readRoot lists the services under the root; a missing root has none (an
// exist watch then tells when it appears).
func (w *watcher) readRoot() ([]string, error) {
	root := w.r.cfg.Root
	for range 3 {
		kids, err := w.children(root)
		if errors.Is(err, zk.ErrNoAuth) {
			return nil, rootDeniedError{err}
		}
		if errors.Is(err, zk.ErrNoNode) {
			ok, err := w.exists(root)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, nil
			}
			continue // created in between
		}
		if err != nil {
			return nil, err
		}
		if root == "/" {
			kids = slices.DeleteFunc(kids, func(k string) bool { return k == "zookeeper" })
		}
		return kids, nil
	}
	return nil, fmt.Errorf("root %s keeps appearing and disappearing", root)
}

// serviceKey is the service a root child stands for: the name as is for
// curator, the URL-decoded interface for dubbo (Dubbo encodes it).
func (w *watcher) serviceKey(child string) string {
	if w.r.cfg.Layout == LayoutDubbo {
		if k, err := url.QueryUnescape(child); err == nil {
			return k
		}
	}
	return child
}

// readService reads one service with watches; nil, nil if it is gone.
func (w *watcher) readService(child string) (*serviceNode, error) {
	path := w.join(w.r.cfg.Root, child)
	sn := &serviceNode{key: w.serviceKey(child), path: path, instances: map[string]*instance{}}
	instDir := path
	if w.r.cfg.Layout == LayoutDubbo {
		kids, err := w.children(path)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if !slices.Contains(kids, "providers") {
			return sn, nil
		}
		instDir = w.join(path, "providers")
	}
	ids, err := w.children(instDir)
	if errors.Is(err, zk.ErrNoNode) {
		if w.r.cfg.Layout == LayoutDubbo {
			return sn, nil // providers went away; the interface's watch tells
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		in, err := w.readInstance(w.join(instDir, id), id)
		if err != nil {
			return nil, err
		}
		if in != nil {
			sn.instances[in.name()] = in
		}
	}
	return sn, nil
}

// readInstance reads one instance (with a data watch for curator; a Dubbo
// provider is all in its name); nil, nil if it is gone.
func (w *watcher) readInstance(path, name string) (*instance, error) {
	if w.r.cfg.Layout == LayoutDubbo {
		in := parseDubbo(path, name, w.address)
		in.ep.Labels = w.labels.Share(in.ep.Labels)
		return &in, nil
	}
	b, err := w.data(path)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return nil, nil
	case errors.Is(err, zk.ErrNoAuth):
		return &instance{path: path, bad: "not allowed to read the instance (ACL)"}, nil
	case err != nil:
		return nil, err
	}
	in := parseCurator(path, b, w.address)
	in.ep.Labels = w.labels.Share(in.ep.Labels)
	return &in, nil
}

// resyncReaders is how many services a resync reads at once.
const resyncReaders = 32

// resync reads the whole tree, re-arming missing watches, and publishes
// it. On error the previous tree stays.
func (w *watcher) resync() error {
	start := time.Now()
	clear(w.addrCache)
	kids, err := w.readRoot()
	if err != nil {
		return err
	}
	// Services are read resyncReaders at a time: the client pipelines
	// their requests on the one connection, so a large tree is read in
	// far fewer round trips than znodes.
	nodes := make([]*serviceNode, len(kids))
	errs := make([]error, len(kids))
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range min(resyncReaders, len(kids)) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(kids) && !failed.Load(); i = int(next.Add(1)) - 1 {
				nodes[i], errs[i] = w.readService(kids[i])
				if errs[i] != nil && !errors.Is(errs[i], zk.ErrNoAuth) {
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	tree := make(map[string]*serviceNode, len(kids))
	for i, k := range kids {
		sn, err := nodes[i], errs[i]
		if err != nil {
			if errors.Is(err, zk.ErrNoAuth) {
				tree[k] = &serviceNode{key: w.serviceKey(k), path: w.join(w.r.cfg.Root, k), bad: "not allowed to read the service (ACL)"}
				continue
			}
			return err
		}
		if sn != nil {
			tree[k] = sn
		}
	}
	// A service read as it was (same instances, same content) keeps its
	// node and its conversion; every other one, and every one gone, is
	// converted again.
	for k, sn := range tree {
		if old, ok := w.tree[k]; ok && sameNode(old, sn) {
			tree[k] = old
			continue
		}
		w.dirty[k] = true
	}
	for k := range w.tree {
		if _, ok := tree[k]; !ok {
			w.dirty[k] = true
		}
	}
	w.tree = tree
	w.needResync = false
	w.refresh = nil
	w.r.m.resyncs.Inc()
	w.publish()
	w.r.log.Debug("zookeeper resync done", "services", len(tree), "took", time.Since(start))
	return nil
}

// applyRefresh re-reads what fired, parents first, so that a new service
// is read once.
func (w *watcher) applyRefresh() error {
	keys := make([]watchKey, 0, len(w.refresh))
	for k := range w.refresh {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b watchKey) int {
		if d := strings.Count(a.path, "/") - strings.Count(b.path, "/"); d != 0 {
			return d
		}
		return strings.Compare(a.path, b.path)
	})
	root := w.r.cfg.Root
	done := map[string]bool{}
	for _, k := range keys {
		if done[k.path] {
			delete(w.refresh, k)
			continue
		}
		var err error
		switch rel := w.relative(k.path); {
		case k.path == root:
			err = w.refreshRoot()
		case len(rel) == 1:
			err = w.refreshService(rel[0])
		case len(rel) == 2 && w.r.cfg.Layout == LayoutCurator:
			err = w.refreshInstance(rel[0], rel[1])
		case len(rel) == 2 && w.r.cfg.Layout == LayoutDubbo && rel[1] == "providers":
			err = w.refreshService(rel[0])
		}
		if err != nil {
			return err
		}
		done[k.path] = true
		delete(w.refresh, k)
	}
	return nil
}

// relative splits path below the root into its segments; nil if path is
// not below the root.
func (w *watcher) relative(path string) []string {
	root := w.r.cfg.Root
	prefix := root + "/"
	if root == "/" {
		prefix = "/"
	}
	rest, ok := strings.CutPrefix(path, prefix)
	if !ok || rest == "" {
		return nil
	}
	return strings.Split(rest, "/")
}

// changed marks child's node in the tree as changed (or gone): it is
// converted again at the next publish, which the debouncer schedules.
func (w *watcher) changed(child string) {
	w.dirty[child] = true
	w.deb.Add(time.Now())
}

func (w *watcher) refreshRoot() error {
	kids, err := w.readRoot()
	if err != nil {
		return err
	}
	present := map[string]bool{}
	for _, k := range kids {
		present[k] = true
		if _, ok := w.tree[k]; ok {
			continue
		}
		sn, err := w.readService(k)
		if err != nil {
			return err
		}
		if sn != nil {
			w.tree[k] = sn
			w.changed(k)
		}
	}
	for k := range w.tree {
		if !present[k] {
			delete(w.tree, k)
			w.changed(k)
		}
	}
	// Fired events of removed services need no more reads.
	return nil
}

// refreshService re-lists one service's instances, reading new ones.
func (w *watcher) refreshService(child string) error {
	old, ok := w.tree[child]
	if !ok {
		return nil // not (yet) a known service: the root's watch tells
	}
	path := old.path
	instDir := path
	if w.r.cfg.Layout == LayoutDubbo {
		kids, err := w.children(path)
		if errors.Is(err, zk.ErrNoNode) {
			return nil // the root's watch removes it
		}
		if err != nil {
			return err
		}
		if !slices.Contains(kids, "providers") {
			if len(old.instances) > 0 {
				w.tree[child] = &serviceNode{key: old.key, path: path, instances: map[string]*instance{}}
				w.changed(child)
			}
			return nil
		}
		instDir = w.join(path, "providers")
	}
	ids, err := w.children(instDir)
	if errors.Is(err, zk.ErrNoNode) {
		if len(old.instances) > 0 {
			w.tree[child] = &serviceNode{key: old.key, path: path, instances: map[string]*instance{}}
			w.changed(child)
		}
		return nil
	}
	if err != nil {
		return err
	}
	sn := &serviceNode{key: old.key, path: path, instances: make(map[string]*instance, len(ids))}
	changed := len(ids) != len(old.instances)
	for _, id := range ids {
		if in, ok := old.instances[id]; ok {
			sn.instances[in.name()] = in
			continue
		}
		in, err := w.readInstance(w.join(instDir, id), id)
		if err != nil {
			return err
		}
		if in != nil {
			sn.instances[in.name()] = in
			changed = true
		}
	}
	if changed {
		w.tree[child] = sn
		w.changed(child)
	}
	return nil
}

// refreshInstance re-reads one Curator instance after a data change or
// its deletion.
func (w *watcher) refreshInstance(child, id string) error {
	sn, ok := w.tree[child]
	if !ok {
		return nil
	}
	in, err := w.readInstance(w.join(sn.path, id), id)
	if err != nil {
		return err
	}
	next := &serviceNode{key: sn.key, path: sn.path, instances: make(map[string]*instance, len(sn.instances))}
	for k, v := range sn.instances {
		next.instances[k] = v
	}
	if in == nil {
		if _, had := sn.instances[id]; !had {
			return nil
		}
		delete(next.instances, id)
	} else {
		if _, had := sn.instances[id]; !had {
			// Not listed yet: the service's child watch adds it.
			return nil
		}
		next.instances[id] = in
	}
	w.tree[child] = next
	w.changed(child)
	return nil
}

// publish converts the services that changed since the last publish, one
// by one, and publishes the state they assemble to unless it equals the
// last one published and the registry is Synced already (after a
// reconnection it is published again, which says Synced).
func (w *watcher) publish() {
	w.deb.Done()
	for child := range w.dirty {
		w.convert(child)
	}
	clear(w.dirty)
	w.pub.Flush(registries.Condition{})
	w.r.m.quarantined.Set(float64(w.claims.quarantined + w.claims.collided))
}

// convert converts one service of the tree again and stores it in the
// claims, which hand the Publisher what it holds under the hostname rule
// (the Publisher compares it with the last); a service gone from the tree
// is removed.
func (w *watcher) convert(child string) {
	sn := w.tree[child]
	if sn == nil {
		w.claims.remove(child)
		return
	}
	w.r.conversions.Add(1)
	w.claims.put(child, convertNode(w.r.common, w.r.cfg.Layout, child, sn))
}

// sameNode reports whether two reads of a service found the same: same
// name, same condition, the same instance znodes with the same content.
func sameNode(a, b *serviceNode) bool {
	if a.key != b.key || a.path != b.path || a.bad != b.bad || len(a.instances) != len(b.instances) {
		return false
	}
	for id, ia := range a.instances {
		ib, ok := b.instances[id]
		if !ok || !reflect.DeepEqual(ia, ib) {
			return false
		}
	}
	return true
}
