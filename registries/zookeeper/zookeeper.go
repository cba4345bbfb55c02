package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/validate"
)

// Registry watches one ZooKeeper ensemble. Run may be called again after
// it returned, never twice at once.
type Registry struct {
	cfg    Config
	common registries.Common
	log    *slog.Logger
	m      *metrics

	// Coalescing of watch events (registries.Debouncer): a state is
	// published once no change came for quiet, or maxWait after the first
	// unpublished change.
	quiet, maxWait time.Duration
	// lookup resolves instance hostnames (net.DefaultResolver.LookupHost).
	lookup        func(ctx context.Context, host string) ([]string, error)
	lookupTimeout time.Duration
	// reconnect paces dials after failed ones, on top of the client's own
	// one-second pause after each round over the servers.
	reconnect registries.Backoff
}

var _ registries.Registry = (*Registry)(nil)

func newRegistry(c registries.Common, cfg Config, log *slog.Logger) *Registry {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Registry{
		cfg:           cfg,
		common:        c,
		log:           log,
		m:             newMetrics(c.Name),
		quiet:         time.Millisecond,
		maxWait:       100 * time.Millisecond,
		lookup:        net.DefaultResolver.LookupHost,
		lookupTimeout: 2 * time.Second,
		reconnect:     registries.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second},
	}
}

// Run implements registries.Registry. It connects, reads the whole tree
// with watches, publishes it, and then follows watch events. When the
// connection drops it reports Degraded at once and publishes nothing until
// it has a session again and has re-read the whole tree. It returns only
// when ctx ends, or with a Permanent error for a bad auth file or a root
// it is not allowed to read.
func (r *Registry) Run(ctx context.Context, sink registries.Sink) error {
	auth, err := r.readAuth()
	if err != nil {
		return registries.Permanent(err)
	}
	q := &eventQueue{signal: make(chan struct{}, 1)}
	d := &dialer{q: q, backoff: r.reconnect, done: make(chan struct{})}
	conn, events, err := zk.Connect(r.cfg.Servers, r.cfg.SessionTimeout.Std(),
		zk.WithLogger(zkLogger{r.log}), zk.WithLogInfo(false),
		zk.WithEventCallback(q.push), zk.WithDialer(d.dial))
	if err != nil {
		return fmt.Errorf("zookeeper %s: %w", strings.Join(r.cfg.Servers, ","), err)
	}
	// Closing the connection fails pending requests, so a loop blocked in
	// one returns promptly when ctx ends.
	stop := context.AfterFunc(ctx, func() { close(d.done); conn.Close() })
	defer func() {
		if stop() {
			close(d.done)
			conn.Close()
		}
		for range events { // closed once the client's goroutines are done
		}
		r.m.connected.Set(0)
	}()
	w := &watcher{
		ctx: ctx, r: r, conn: conn, q: q, auth: auth,
		pub:           registries.NewPublisher(r.common, sink, r.log, registries.PublisherOptions[string]{Compare: strings.Compare}),
		deb:           registries.Debouncer{Quiet: r.quiet, MaxWait: r.maxWait},
		armed:         map[watchKey]bool{},
		resyncBackoff: registries.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second},
		addrCache:     map[string]addrResult{},
	}
	return w.loop(ctx)
}

// readAuth reads the digest credentials; nil without an auth file.
func (r *Registry) readAuth() ([]byte, error) {
	if r.cfg.AuthFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(r.cfg.AuthFile)
	if err != nil {
		return nil, fmt.Errorf("zookeeper auth file: %w", err)
	}
	b = []byte(strings.TrimSpace(string(b)))
	user, _, ok := strings.Cut(string(b), ":")
	if !ok || user == "" {
		return nil, fmt.Errorf("zookeeper auth file %s: want one line user:password", r.cfg.AuthFile)
	}
	return b, nil
}

// timedEvent is a client event with the time it arrived; dialErr is set
// for failed dials (reported by our dialer, not by the client).
type timedEvent struct {
	zk.Event
	at      time.Time
	dialErr error
}

// eventQueue receives every client event (session changes, watch events,
// watches lost) in order, through the client's event callback, which must
// not block. The client's own event channel drops events when full; this
// queue does not.
type eventQueue struct {
	mu     sync.Mutex
	events []timedEvent
	signal chan struct{} // capacity 1: "events are waiting"
}

func (q *eventQueue) push(ev zk.Event) { q.add(timedEvent{Event: ev, at: time.Now()}) }

func (q *eventQueue) add(ev timedEvent) {
	q.mu.Lock()
	q.events = append(q.events, ev)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *eventQueue) take() []timedEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	evs := q.events
	q.events = nil
	return evs
}

// dialer dials ZooKeeper servers for the client, waiting with backoff
// after failed dials. The client calls it from one goroutine.
type dialer struct {
	q        *eventQueue
	backoff  registries.Backoff
	failures int
	done     chan struct{} // closed when Run ends
}

func (d *dialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	if d.failures > 0 {
		t := time.NewTimer(d.backoff.Next())
		select {
		case <-d.done:
			t.Stop()
			return nil, net.ErrClosed
		case <-t.C:
		}
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		d.failures++
		d.q.add(timedEvent{at: time.Now(), dialErr: err})
		return nil, err
	}
	d.failures = 0
	d.backoff.Reset()
	return c, nil
}

// zkLogger sends the client's log lines to slog at debug level.
type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, args ...any) {
	l.log.Debug("zookeeper client: " + fmt.Sprintf(format, args...))
}

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

type addrResult struct {
	ip      string
	err     error
	expires time.Time
}

// watcher is the state of one Run. Only the loop goroutine touches it.
type watcher struct {
	ctx  context.Context // Run's: once it ends, failures are expected
	r    *Registry
	conn *zk.Conn
	q    *eventQueue
	auth []byte
	// pub publishes the state built from the tree (one key: the whole
	// state), deduplicated against the last one published.
	pub *registries.Publisher[string]
	// deb coalesces tree changes into one publish.
	deb registries.Debouncer

	hasSession  bool
	authSent    bool
	needResync  bool
	resyncAfter time.Time // earliest next resync attempt after a failed one
	// resyncBackoff paces resyncs that fail while the client thinks it is
	// connected.
	resyncBackoff registries.Backoff

	// tree is the last complete state read; nil before the first resync.
	tree map[string]*serviceNode
	// armed are the watches set and not yet fired.
	armed map[watchKey]bool
	// refresh are paths whose watch fired and that must be re-read.
	refresh map[watchKey]bool

	addrCache map[string]addrResult
}

func (w *watcher) loop(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if err := w.work(); err != nil {
			return err
		}
		var due time.Time
		switch {
		case !w.hasSession:
		case w.needResync:
			due = w.resyncAfter
		case w.deb.Pending():
			_, wait := w.deb.Next(time.Now())
			due = time.Now().Add(wait)
		}
		var timerC <-chan time.Time
		if !due.IsZero() {
			timer.Reset(time.Until(due))
			timerC = timer.C
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.q.signal:
			w.handle(w.q.take())
		case <-timerC:
		}
		timer.Stop()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// work does what is due while there is a session: authenticate, resync,
// re-read what watches said changed, publish. Only a Permanent error is
// returned; others leave a resync to do.
func (w *watcher) work() error {
	if !w.hasSession {
		return nil
	}
	if err := w.sendAuth(); err != nil {
		return err
	}
	if w.needResync {
		if time.Now().Before(w.resyncAfter) {
			return nil
		}
		if err := w.resync(); err != nil {
			var denied rootDeniedError
			if errors.As(err, &denied) {
				return registries.Permanent(err)
			}
			if w.ctx.Err() != nil {
				return nil
			}
			w.resyncAfter = time.Now().Add(w.resyncBackoff.Next())
			w.report(registries.Degraded, "reading ZooKeeper: "+errText(err))
			w.r.log.Warn("zookeeper resync failed", "error", err)
		}
		return nil
	}
	if len(w.refresh) > 0 {
		if err := w.applyRefresh(); err != nil {
			if w.ctx.Err() != nil {
				return nil
			}
			w.r.log.Info("zookeeper read failed; resyncing", "error", err)
			w.needResync = true
			w.resyncAfter = time.Now().Add(w.resyncBackoff.Next())
			return nil
		}
		if !w.deb.Pending() {
			w.pub.Forget() // events that changed nothing
		}
	}
	if due, _ := w.deb.Next(time.Now()); due {
		w.publish()
	}
	return nil
}

// rootDeniedError: the root's ACL does not let us read it.
type rootDeniedError struct{ err error }

func (e rootDeniedError) Error() string {
	return "zookeeper: not allowed to read the root (check the ACL and authFile): " + e.err.Error()
}
func (e rootDeniedError) Unwrap() error { return e.err }

// handle applies client events in order.
func (w *watcher) handle(evs []timedEvent) {
	for _, ev := range evs {
		if ev.dialErr != nil {
			if !w.hasSession && w.pub.Status().State != registries.Degraded {
				w.report(registries.Degraded, "cannot reach ZooKeeper: "+ev.dialErr.Error())
			}
			continue
		}
		switch ev.Type {
		case zk.EventSession:
			w.session(ev.Event)
			continue
		case zk.EventNotWatching:
			w.r.m.events["not_watching"].Inc()
			for _, k := range []watchKind{watchChild, watchData, watchExist} {
				delete(w.armed, watchKey{ev.Path, k})
			}
			// The session is gone; the resync that follows re-arms.
			continue
		}
		var fired []watchKind
		switch ev.Type {
		case zk.EventNodeCreated:
			w.r.m.events["created"].Inc()
			fired = []watchKind{watchExist}
		case zk.EventNodeDataChanged:
			w.r.m.events["data_changed"].Inc()
			fired = []watchKind{watchData, watchExist}
		case zk.EventNodeChildrenChanged:
			w.r.m.events["children_changed"].Inc()
			fired = []watchKind{watchChild}
		case zk.EventNodeDeleted:
			w.r.m.events["deleted"].Inc()
			fired = []watchKind{watchChild, watchData, watchExist}
		default:
			continue
		}
		if w.refresh == nil {
			w.refresh = map[watchKey]bool{}
		}
		for _, k := range fired {
			key := watchKey{ev.Path, k}
			if w.armed[key] {
				delete(w.armed, key)
				w.refresh[key] = true
			}
		}
		w.pub.Changed(ev.at)
	}
}

func (w *watcher) session(ev zk.Event) {
	switch ev.State {
	case zk.StateHasSession:
		if !w.hasSession {
			w.r.log.Info("zookeeper session established", "server", ev.Server, "session", fmt.Sprintf("%#x", w.conn.SessionID()))
		}
		w.hasSession = true
		w.r.m.connected.Set(1)
		// Whether or not the session survived, re-read everything: the
		// result is the same as the watches would tell, and it is the one
		// path that is sure to be current.
		w.needResync = true
		w.resyncAfter = time.Time{}
		w.resyncBackoff.Reset()
	case zk.StateExpired:
		w.r.m.expirations.Inc()
		w.armed = map[watchKey]bool{}
		w.refresh = nil
		w.lost("ZooKeeper session expired; reconnecting")
	case zk.StateDisconnected:
		w.lost("connection to ZooKeeper lost; reconnecting")
	case zk.StateAuthFailed:
		w.lost("ZooKeeper authentication failed")
	}
}

// lost marks the session as down: Degraded at once, last state kept.
func (w *watcher) lost(why string) {
	if w.hasSession {
		w.r.log.Warn("zookeeper: " + why)
	}
	w.hasSession = false
	w.authSent = false
	w.r.m.connected.Set(0)
	w.report(registries.Degraded, why)
}

func (w *watcher) report(state registries.State, msg string) {
	w.pub.Report(registries.Status{State: state, Err: msg})
}

// sendAuth adds the digest credentials once per connection; the client
// re-sends them after reconnects by itself.
func (w *watcher) sendAuth() error {
	if w.auth == nil || w.authSent {
		return nil
	}
	err := w.conn.AddAuth("digest", w.auth)
	switch {
	case err == nil:
		w.authSent = true
		return nil
	case errors.Is(err, zk.ErrAuthFailed):
		return registries.Permanent(errors.New("zookeeper rejected the credentials of the auth file"))
	}
	// A connection error: the next session event retries.
	return nil
}

func errText(err error) string {
	if errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrClosing) || errors.Is(err, zk.ErrSessionExpired) {
		return "connection lost"
	}
	return err.Error()
}

// children lists path's children and makes sure a child watch is armed.
func (w *watcher) children(path string) ([]string, error) {
	k := watchKey{path, watchChild}
	if w.armed[k] {
		c, _, err := w.conn.Children(path)
		return c, err
	}
	c, _, _, err := w.conn.ChildrenW(path)
	if err == nil {
		w.armed[k] = true
	}
	return c, err
}

// data reads path and makes sure a data watch is armed.
func (w *watcher) data(path string) ([]byte, error) {
	k := watchKey{path, watchData}
	if w.armed[k] {
		b, _, err := w.conn.Get(path)
		return b, err
	}
	b, _, _, err := w.conn.GetW(path)
	if err == nil {
		w.armed[k] = true
	}
	return b, err
}

// exists checks path and makes sure an exist watch is armed (it fires when
// the node is created).
func (w *watcher) exists(path string) (bool, error) {
	k := watchKey{path, watchExist}
	if w.armed[k] {
		ok, _, err := w.conn.Exists(path)
		return ok, err
	}
	ok, _, _, err := w.conn.ExistsW(path)
	if err == nil {
		w.armed[k] = true
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
			sn.instances[id] = in
		}
	}
	return sn, nil
}

// readInstance reads one instance (with a data watch for curator; a Dubbo
// provider is all in its name); nil, nil if it is gone.
func (w *watcher) readInstance(path, name string) (*instance, error) {
	if w.r.cfg.Layout == LayoutDubbo {
		in := parseDubbo(path, name, w.address)
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
	return &in, nil
}

// resync reads the whole tree, re-arming missing watches, and publishes
// it. On error the previous tree stays.
func (w *watcher) resync() error {
	start := time.Now()
	clear(w.addrCache)
	kids, err := w.readRoot()
	if err != nil {
		return err
	}
	tree := make(map[string]*serviceNode, len(kids))
	for _, k := range kids {
		sn, err := w.readService(k)
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

func (w *watcher) changed() { w.deb.Add(time.Now()) }

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
			w.changed()
		}
	}
	for k := range w.tree {
		if !present[k] {
			delete(w.tree, k)
			w.changed()
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
				w.changed()
			}
			return nil
		}
		instDir = w.join(path, "providers")
	}
	ids, err := w.children(instDir)
	if errors.Is(err, zk.ErrNoNode) {
		if len(old.instances) > 0 {
			w.tree[child] = &serviceNode{key: old.key, path: path, instances: map[string]*instance{}}
			w.changed()
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
			sn.instances[id] = in
			continue
		}
		in, err := w.readInstance(w.join(instDir, id), id)
		if err != nil {
			return err
		}
		if in != nil {
			sn.instances[id] = in
			changed = true
		}
	}
	if changed {
		w.tree[child] = sn
		w.changed()
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
	w.changed()
	return nil
}

// publish builds the full state from the tree and publishes it unless it
// equals the last one published and the registry is Synced already (after
// a reconnection it is published again, which says Synced).
func (w *watcher) publish() {
	w.deb.Done()
	services, rejected, quarantined := build(w.r.common, w.r.cfg.Layout, w.tree)
	w.pub.Set("", registries.Converted{Services: services, Rejected: rejected})
	w.pub.Flush(registries.Status{State: registries.Synced})
	w.r.m.quarantined.Set(float64(quarantined))
}

// address checks an instance address: IP literals are served as they
// are, hostnames are resolved (cached for the duration of a resync, and
// for 30s otherwise) and their first IPv4 address (else IPv6) served. A
// lookup is bounded by lookupTimeout and ends with the Run.
func (w *watcher) address(host string) (string, error) {
	if ip, ok := parseIP(host); ok {
		return ip, nil
	}
	if !validate.Resolvable(host) {
		return "", fmt.Errorf("address %q is neither an IP address nor a hostname", host)
	}
	key := strings.ToLower(host)
	if r, ok := w.addrCache[key]; ok && time.Now().Before(r.expires) {
		return r.ip, r.err
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.r.lookupTimeout)
	defer cancel()
	addrs, err := w.r.lookup(ctx, host)
	var res addrResult
	if err != nil {
		res.err = fmt.Errorf("address %q does not resolve: %v", host, lookupErr(err))
	} else {
		var ips []string
		for _, a := range addrs {
			if ip, ok := parseIP(a); ok {
				ips = append(ips, ip)
			}
		}
		slices.SortStableFunc(ips, func(a, b string) int {
			return boolInt(strings.Contains(a, ":")) - boolInt(strings.Contains(b, ":"))
		})
		if len(ips) == 0 {
			res.err = fmt.Errorf("address %q resolves to no IP address", host)
		} else {
			res.ip = ips[0]
		}
	}
	res.expires = time.Now().Add(30 * time.Second)
	w.addrCache[key] = res
	return res.ip, res.err
}

func lookupErr(err error) string {
	var de *net.DNSError
	if errors.As(err, &de) {
		if de.IsNotFound {
			return "no such host"
		}
		if de.IsTimeout {
			return "lookup timed out"
		}
		return de.Err
	}
	return err.Error()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
