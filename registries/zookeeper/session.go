package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/meshfed/meshfed/registries"
)

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

// watcher is the state of one Run. Only the loop goroutine touches it.
type watcher struct {
	ctx  context.Context // Run's: once it ends, failures are expected
	r    *Registry
	conn *zk.Conn
	q    *eventQueue
	auth []byte
	// pub holds each service's conversion under its svcKey and publishes
	// the state they assemble to (docs/architecture.md §3.1.1).
	pub *registries.Publisher[svcKey]
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
	// dirty are the services (root children) whose node in tree changed,
	// came or went since they were last converted: publish converts
	// those, and only those, again.
	dirty map[string]bool
	// claims holds the last conversion of each service and hands pub what
	// each one holds under the hostname rule.
	claims *claims
	// armed are the watches set and not yet fired.
	armed map[watchKey]bool
	// refresh are paths whose watch fired and that must be re-read.
	refresh map[watchKey]bool

	addrCache map[string]addrResult
	// labels shares the instances' equal label maps.
	labels registries.LabelSets
	// readMu guards armed and addrCache while resync's readers run; the
	// loop goroutine alone touches them otherwise.
	readMu sync.Mutex
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
			w.report("reading ZooKeeper: " + errText(err))
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
			if !w.hasSession && !w.pub.Condition().Failing() {
				w.report("cannot reach ZooKeeper: " + ev.dialErr.Error())
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
	w.report(why)
}

func (w *watcher) report(msg string) {
	w.pub.Report(registries.Condition{Err: msg})
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
