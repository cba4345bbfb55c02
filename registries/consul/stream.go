package consul

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/consul/grpcstreams"
)

// Streaming values of Config.Streaming.
const (
	StreamingAuto = "auto"
	StreamingOff  = "off"
)

// rpcGRPC is the first byte a client sends on a Consul server's RPC port
// to speak gRPC on the connection (pool.RPCGRPC in Consul's agent/pool).
const rpcGRPC = 8

// probeTimeout bounds the first subscription that decides whether the
// servers' event stream can be used, and each dial.
const probeTimeout = 5 * time.Second

// streamer holds the connection to the Consul leader's RPC port
// (docs/registries/consul.md, "Event stream") and the gate that keeps a
// subscription from starting on a server that has not applied its raft
// log (consistent). The subscriptions are calls of package grpcstreams
// on that one connection: a service costs its view and a few small
// structs, no goroutine (grpc-go's client held two per call, ≈ 1.35 KB
// per endpoint at 10,000 services; grpcstreams' doc).
type streamer struct {
	client *api.Client // the agent, of the watched datacenter: consistent reads
	local  *api.Client // the agent, of its own datacenter: its leader
	token  string
	dc     string

	mu     sync.Mutex
	conn   *grpcstreams.Conn // nil, or dialled to addr
	addr   string            // the leader's RPC address
	okAt   time.Time         // the last consistent read that succeeded
	closed bool
}

// newStreamer finds the leader the agent names (/v1/status/leader) and
// connects to it. The leader is that of the agent's own datacenter
// whatever datacenter dc is watched: a subscription names dc and the
// leader forwards it (Consul's servers forward between datacenters), so
// meshfed needs to reach only the servers its agent reaches.
func newStreamer(ctx context.Context, client, local *api.Client, token, dc string) (*streamer, error) {
	s := &streamer{client: client, local: local, token: token, dc: dc}
	if err := s.leader(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.connLocked(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// leader asks the agent for the leader's RPC address; when it moved, the
// connection to the old one is closed (its calls end and are opened
// again on the new one).
func (s *streamer) leader(ctx context.Context) error {
	addr, err := s.local.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("consul leader: %w", err)
	}
	if addr == "" {
		return errors.New("consul: no cluster leader")
	}
	s.mu.Lock()
	var old *grpcstreams.Conn
	if addr != s.addr {
		old, s.conn, s.addr = s.conn, nil, addr
	}
	s.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return nil
}

// connLocked returns a usable connection to the leader, dialling one if
// needed; s.mu held.
func (s *streamer) connLocked(ctx context.Context) (*grpcstreams.Conn, error) {
	if s.closed {
		return nil, grpcstreams.ErrClosed
	}
	if s.conn != nil && s.conn.Usable() {
		return s.conn, nil
	}
	if s.conn != nil {
		s.conn.Close() // after a GOAWAY: its open calls run on until their end
	}
	s.conn = nil
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	nc, err := dialRPCGRPC(ctx, s.addr)
	if err != nil {
		return nil, fmt.Errorf("consul server %s: %w", s.addr, err)
	}
	conn, err := grpcstreams.Dial(nc, s.addr, grpcstreams.Options{UserAgent: "meshfed"})
	if err != nil {
		return nil, fmt.Errorf("consul server %s: %w", s.addr, err)
	}
	s.conn = conn
	return conn, nil
}

// dialRPCGRPC opens a TCP connection to a Consul server's RPC port and
// says it speaks gRPC on it (plain text: a server that sets
// tls.internal_rpc.verify_incoming closes it, and the registry uses
// blocking queries instead).
func dialRPCGRPC(ctx context.Context, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write([]byte{rpcGRPC}); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

func (s *streamer) close() {
	s.mu.Lock()
	conn := s.conn
	s.closed, s.conn = true, nil
	s.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
}

// errClosed: the registry's Run ended.
var errClosed = errors.New("consul: registry stopped")

// consistent returns nil once a consistent read through the agent has
// succeeded since failedAt (the time a subscription failed): the leader
// has then applied its raft log, so a new subscription's snapshot is not
// older than what was served (a restarted server answers from its state
// store while it replays the log). It also points the connection at the
// current leader. After a server restart every subscription fails at
// once: the starters read concurrently (at most one read each), and the
// subscriptions that failed before a read succeeded pass without one.
func (s *streamer) consistent(ctx context.Context, failedAt time.Time) error {
	s.mu.Lock()
	ok, closed := s.okAt.After(failedAt), s.closed
	s.mu.Unlock()
	if ok {
		return nil
	}
	if closed {
		return errClosed
	}
	q := &api.QueryOptions{Datacenter: s.dc, RequireConsistent: true}
	// A node that does not exist: the answer is empty, and the read still
	// goes to the leader and waits until it may serve consistent reads.
	if _, _, err := s.client.Catalog().Node("meshfed-consistency-probe", q.WithContext(ctx)); err != nil {
		return err
	}
	if err := s.leader(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	s.okAt = time.Now()
	s.mu.Unlock()
	return nil
}

// subscribe opens the event stream of service name's health; onMsg and
// onEnd are grpcstreams' callbacks.
func (s *streamer) subscribe(ctx context.Context, name string, onMsg func([]byte) error, onEnd func(error)) (*grpcstreams.Stream, error) {
	s.mu.Lock()
	conn, err := s.connLocked(ctx)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return conn.Stream(subscribeMethod, encodeSubscribe(name, s.token, s.dc), onMsg, onEnd)
}

// view is a service's instances as its event stream has built them, by
// node and service ID. Each is kept as the CheckServiceNode received
// (≈ 250 bytes), not decoded: decoded with its node and checks, an
// instance took ≈ 1.2 KB, the most of the registry's memory at 100,000
// instances (bench/analysis.md); entries decodes the instances of one
// service when it changed.
type view struct {
	instances map[string][]byte
	index     uint64
}

// apply applies one event; it reports whether the view changed.
func (v *view) apply(ev event) bool {
	if ev.newSnapshot {
		clear(v.instances)
		return true
	}
	for _, u := range ev.updates {
		key := u.entry.Node.Node + "\x00" + u.entry.Service.ID
		if u.deregister {
			delete(v.instances, key)
		} else {
			v.instances[key] = bytes.Clone(u.raw) // not the whole event's buffer
		}
	}
	if ev.index > v.index {
		v.index = ev.index
	}
	return len(ev.updates) > 0
}

// entries returns the instances that carry every tag of tags and, with
// passingOnly, whose checks all pass: what /v1/health/service/<name> with
// the same ?tag and ?passing answers.
func (v *view) entries(tags []string, passingOnly bool) []*api.ServiceEntry {
	out := make([]*api.ServiceEntry, 0, len(v.instances))
	for _, raw := range v.instances {
		e, err := decodeCheckServiceNode(raw)
		if err != nil {
			continue // cannot happen: decodeEvent read the same bytes
		}
		if !hasAll(e.Service.Tags, tags) {
			continue
		}
		if passingOnly && !allPassing(e.Checks) {
			continue
		}
		out = append(out, e)
	}
	// In a stable order, as Consul lists them (rejections follow it).
	slices.SortFunc(out, func(a, b *api.ServiceEntry) int {
		return cmp.Or(cmp.Compare(a.Node.Node, b.Node.Node), cmp.Compare(a.Service.ID, b.Service.ID))
	})
	return out
}

func allPassing(checks api.HealthChecks) bool {
	for _, c := range checks {
		if c.Status != api.HealthPassing {
			return false
		}
	}
	return true
}

// aborted: the server ended the stream for the client to subscribe again
// (an ACL change, a restored snapshot); the view must be rebuilt.
func aborted(err error) bool { return status.Code(err) == codes.Aborted }

// openStream decides whether services are served from the servers' event
// stream: it finds the leader and subscribes to service probe, which must
// answer within probeTimeout. nil when it cannot (the reason is logged):
// the services then take turns on blocking queries.
func (w *watch) openStream(probe string) *streamer {
	ctx, cancel := context.WithTimeout(w.ctx, probeTimeout)
	defer cancel()
	s, err := newStreamer(ctx, w.client, w.local, w.token, w.r.cfg.Datacenter)
	if err == nil {
		answered := make(chan error, 1)
		var st *grpcstreams.Stream
		st, err = s.subscribe(ctx, probe, func(b []byte) error {
			_, err := decodeEvent(b)
			select {
			case answered <- err:
			default:
			}
			return errProbed
		}, func(err error) {
			select {
			case answered <- err:
			default:
			}
		})
		if err == nil {
			select {
			case err = <-answered:
			case <-ctx.Done():
				err = ctx.Err()
				st.Cancel()
			}
		}
		if err != nil {
			s.close()
			err = fmt.Errorf("server %s: %w", s.addr, err)
		}
	}
	if err != nil {
		w.r.log.Warn("Consul servers' event stream not usable: services take turns on blocking queries (tls.internal_rpc.verify_incoming on the servers, or their RPC port not reachable from meshfed)", "error", err)
		return nil
	}
	w.r.log.Info("more Consul services than blocking queries over HTTP/1.1: serving them from the servers' event stream", "server", s.addr)
	return s
}

// errProbed ends the probe's call once it has answered.
var errProbed = errors.New("consul: probed")

// follower is one service's subscription state. Its calls' callbacks run
// on the connection's reader goroutine (onMsg) and on whichever goroutine
// ends a call (onEnd); a call's state is reset by the starter that opens
// it, before the call exists, so no two goroutines touch it at once.
type follower struct {
	w *watch
	e *entry
	b *registries.Backoff

	v view
	// want is the service's index in a consistent read made before the
	// call: its instances are sent once the view has reached it.
	want     uint64
	ended    bool          // the snapshot has ended
	synced   bool          // ended and reached want: changes are sent
	snap     chan struct{} // closed once synced, or at the end of the call
	snapOnce sync.Once
	failedAt time.Time // the last call's failure (zero: none)

	// mu guards the call and the view: held by onMsg while it applies an
	// event, and by catchUpTimedOut.
	mu sync.Mutex
	st *grpcstreams.Stream // the open call; nil when none
}

// cancel ends the service's open call, if any (the loop, when the
// service went away, after cancelling e.ctx).
func (f *follower) cancel() {
	f.mu.Lock()
	st := f.st
	f.mu.Unlock()
	if st != nil {
		st.Cancel()
	}
}

// starter opens the event streams of the services queued on w.sq: at most
// as many snapshots are read at once as there are starters
// (maxConcurrentWatches, as for first queries); once a snapshot has been
// read the stream needs no goroutine.
func (w *watch) starter() {
	for {
		e, ok := w.sq.pop(w.ctx)
		if !ok {
			return
		}
		if e.ctx.Err() != nil {
			continue // the service went away
		}
		f := e.f
		if !f.failedAt.IsZero() {
			if err := w.stream.consistent(e.ctx, f.failedAt); err != nil {
				if e.ctx.Err() == nil {
					f.retryLater()
				}
				continue
			}
		}
		want, err := w.consistentIndex(e)
		if err != nil {
			if e.ctx.Err() == nil {
				f.fail(err)
			}
			continue
		}
		f.mu.Lock()
		f.v = view{instances: map[string][]byte{}}
		f.want, f.ended, f.synced = want, false, false
		f.mu.Unlock()
		f.snap, f.snapOnce = make(chan struct{}), sync.Once{}
		w.r.m.subscriptions.Inc()
		st, err := w.stream.subscribe(e.ctx, e.name, f.onMsg, f.onEnd)
		if err != nil {
			f.onEnd(err)
			continue
		}
		f.mu.Lock()
		f.st = st
		f.mu.Unlock()
		if e.ctx.Err() != nil {
			st.Cancel() // the loop's cancel may have come before st was set
		}
		t := time.NewTimer(catchUpTimeout)
		select {
		case <-f.snap:
		case <-e.ctx.Done():
		case <-t.C:
			f.catchUpTimedOut()
		}
		t.Stop()
	}
}

// catchUpTimeout bounds how long a new stream may take to reach the
// service's index of the consistent read made before it.
const catchUpTimeout = 10 * time.Second

// catchUpTimedOut: the stream did not reach the consistent read's index
// within catchUpTimeout. A snapshot that has ended is taken as it is,
// with a warning (an index the stream never carries would otherwise keep
// the service from being served: Consul's indexes are not documented to
// match); a snapshot that has not ended is reported and opened again.
func (f *follower) catchUpTimedOut() {
	f.mu.Lock()
	ended, synced, index := f.ended, f.synced, f.v.index
	if ended && !synced {
		f.sync()
	}
	f.mu.Unlock()
	switch {
	case synced:
	case ended:
		f.w.r.log.Warn("Consul event stream did not reach the index of a consistent read: serving it as it is", "service", f.e.name, "want", f.want, "index", index)
	default:
		f.w.r.log.Warn("Consul event stream sent no whole snapshot: subscribing again", "service", f.e.name, "timeout", catchUpTimeout)
		f.cancel()
	}
}

// sync marks the view complete and sends it; f.mu held.
func (f *follower) sync() {
	f.synced = true
	f.snapOnce.Do(func() { close(f.snap) })
	f.b.Reset()
	f.emit()
}

// emit sends the service's instances to the loop; f.mu held.
func (f *follower) emit() {
	w := f.w
	w.r.m.healthChanged.Inc()
	send(f.e.ctx, w.service, serviceEvent{e: f.e, entries: f.v.entries(w.r.cfg.Tags, w.r.cfg.PassingOnly), at: time.Now()})
}

// consistentIndex is service e's index in a consistent read (the leader
// has applied its log; the instances themselves are filtered out, so the
// answer is its headers). A server's event stream may answer a snapshot
// older than that — after a restart its snapshots were built while it
// replayed its raft log, then the missing instances follow as events —
// so a view is not sent before it reaches this index
// (TestRestartedServerNeverPublishesAnOlderCatalog saw 2,991 of 3,000
// instances otherwise).
func (w *watch) consistentIndex(e *entry) (uint64, error) {
	q := &api.QueryOptions{Datacenter: w.r.cfg.Datacenter, RequireConsistent: true, Filter: `Service.ID == ""`}
	w.r.m.inFlight.Inc()
	_, meta, err := w.svcClient.Health().Service(e.name, "", false, q.WithContext(e.ctx))
	w.r.m.inFlight.Dec()
	if err != nil {
		return 0, err
	}
	return meta.LastIndex, nil
}

// onMsg applies one event and sends the service's instances to the loop
// at the end of the snapshot and after every event that changes them.
func (f *follower) onMsg(b []byte) error {
	w := f.w
	ev, err := decodeEvent(b)
	if err != nil {
		return err
	}
	w.r.m.streamEvents.Inc()
	f.mu.Lock()
	defer f.mu.Unlock()
	changed := f.v.apply(ev)
	switch {
	case ev.newSnapshot:
		f.synced, f.ended = false, false
	case ev.endOfSnapshot:
		f.ended = true
	}
	switch {
	case f.ended && !f.synced && f.v.index >= f.want:
		f.sync()
	case f.synced && changed:
		f.emit()
	}
	return nil
}

// onEnd: a call ended. Unless the service went away, it is opened again:
// at once when the server asked for it (aborted), else after a backoff
// and a consistent read (starter), the service reported failing
// meanwhile (its last state stays published).
func (f *follower) onEnd(err error) {
	w := f.w
	f.mu.Lock()
	f.st = nil
	f.mu.Unlock()
	f.snapOnce.Do(func() { close(f.snap) })
	w.r.m.subscriptions.Dec()
	if f.e.ctx.Err() != nil {
		return
	}
	f.mu.Lock()
	f.v = view{}
	f.mu.Unlock()
	if aborted(err) {
		f.failedAt = time.Now()
		w.sq.push(f.e)
		return
	}
	f.fail(fmt.Errorf("event stream: %w", err))
}

// fail reports the service failing (its last state stays published) and
// queues it again after a backoff.
func (f *follower) fail(err error) {
	f.failedAt = time.Now()
	f.w.r.m.healthErrors.Inc()
	send(f.e.ctx, f.w.service, serviceEvent{e: f.e, err: err, at: f.failedAt})
	f.retryLater()
}

// retryLater queues the service for its starter after the next backoff.
func (f *follower) retryLater() {
	time.AfterFunc(f.b.Next(), func() { f.w.sq.push(f.e) })
}
