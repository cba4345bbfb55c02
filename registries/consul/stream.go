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
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
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
// servers' event stream can be used.
const probeTimeout = 5 * time.Second

// streamer holds the gRPC connection to the Consul leader's RPC port
// (docs/registries/consul.md, "Event stream") and the gate that keeps a
// subscription from starting on a server that has not applied its raft
// log (consistent).
type streamer struct {
	client *api.Client // the agent: leader address and consistent reads
	token  string
	dc     string

	mu     sync.Mutex
	conn   *grpc.ClientConn
	addr   string    // the server conn dials
	okAt   time.Time // the last consistent read that succeeded
	closed bool
}

// newStreamer dials the leader that the agent names (/v1/status/leader);
// the connection is made lazily by the first subscription.
func newStreamer(ctx context.Context, client *api.Client, token, dc string) (*streamer, error) {
	s := &streamer{client: client, token: token, dc: dc}
	if err := s.redial(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// redial points the connection at the current leader; s.mu held or s not
// shared yet.
func (s *streamer) redial(ctx context.Context) error {
	addr, err := s.client.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("consul leader: %w", err)
	}
	if addr == "" {
		return errors.New("consul: no cluster leader")
	}
	if addr == s.addr && s.conn != nil {
		return nil
	}
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dialRPCGRPC),
		// An event batch carries every instance one raft transaction
		// changed (a node's, for its node check): more than gRPC's 4 MB
		// default for services of thousands of instances per node.
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{}), grpc.MaxCallRecvMsgSize(256<<20)),
		// Consul's servers refuse pings more often than every 15s.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	)
	if err != nil {
		return fmt.Errorf("consul server %s: %w", addr, err)
	}
	if s.conn != nil {
		s.conn.Close()
	}
	s.conn, s.addr = conn, addr
	return nil
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
	defer s.mu.Unlock()
	s.closed = true
	if s.conn != nil {
		s.conn.Close()
	}
}

// consistent returns nil once a consistent read through the agent has
// succeeded since failedAt (the time a subscription failed): the leader
// has then applied its raft log, so a new subscription's snapshot is not
// older than what was served (a restarted server answers from its state
// store while it replays the log). It also points the connection at the
// current leader. Callers are serialized: after a server restart every
// subscription fails at once, and one read serves them all.
func (s *streamer) consistent(ctx context.Context, failedAt time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.okAt.After(failedAt) {
		return nil
	}
	if s.closed {
		return context.Canceled
	}
	q := &api.QueryOptions{Datacenter: s.dc, RequireConsistent: true}
	// A node that does not exist: the answer is empty, and the read still
	// goes to the leader and waits until it may serve consistent reads.
	if _, _, err := s.client.Catalog().Node("meshfed-consistency-probe", q.WithContext(ctx)); err != nil {
		return err
	}
	if err := s.redial(ctx); err != nil {
		return err
	}
	s.okAt = time.Now()
	return nil
}

// subscription is one open stream of a service's health events.
type subscription struct {
	stream grpc.ClientStream
	cancel context.CancelFunc
}

// subscribe opens the event stream of service name's health.
func (s *streamer) subscribe(ctx context.Context, name string) (*subscription, error) {
	s.mu.Lock()
	conn := s.conn
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, subscribeMethod)
	if err == nil {
		err = st.SendMsg(encodeSubscribe(name, s.token, s.dc))
	}
	if err == nil {
		err = st.CloseSend()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &subscription{stream: st, cancel: cancel}, nil
}

// next returns the stream's next event.
func (sub *subscription) next() (event, error) {
	var b []byte
	if err := sub.stream.RecvMsg(&b); err != nil {
		return event{}, err
	}
	return decodeEvent(b)
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

// rawCodec sends and receives serialized messages as they are ([]byte).
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("consul stream: cannot send %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("consul stream: cannot receive into %T", v)
	}
	*p = data.Materialize()
	return nil
}

// openStream decides whether services are served from the servers' event
// stream: it finds the leader and subscribes to service probe, which must
// answer within probeTimeout. nil when it cannot (the reason is logged):
// the services then take turns on blocking queries.
func (w *watch) openStream(probe string) *streamer {
	ctx, cancel := context.WithTimeout(w.ctx, probeTimeout)
	defer cancel()
	s, err := newStreamer(ctx, w.client, w.token, w.r.cfg.Datacenter)
	if err == nil {
		var sub *subscription
		if sub, err = s.subscribe(ctx, probe); err == nil {
			_, err = sub.next()
			sub.cancel()
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

// follow serves service e from its event stream until e ends. A stream
// that fails reports the service failing (its last state stays
// published) and is opened again after a backoff, once a consistent read
// says the leader has applied its log (streamer.consistent); one the
// server ends for a resubscription (aborted) is opened again at once.
func (w *watch) follow(e *entry) {
	b := w.backoff()
	var failedAt time.Time
	for {
		if !failedAt.IsZero() {
			if err := w.stream.consistent(e.ctx, failedAt); err != nil {
				if e.ctx.Err() != nil || b.Wait(e.ctx) != nil {
					return
				}
				continue
			}
		}
		w.r.m.subscriptions.Inc()
		err := w.followOnce(e, b)
		w.r.m.subscriptions.Dec()
		if e.ctx.Err() != nil {
			return
		}
		failedAt = time.Now()
		if aborted(err) {
			continue
		}
		w.r.m.healthErrors.Inc()
		if !send(e.ctx, w.service, serviceEvent{e: e, err: fmt.Errorf("event stream: %w", err), at: failedAt}) || b.Wait(e.ctx) != nil {
			return
		}
	}
}

// followOnce subscribes once and sends the service's instances to the
// loop at the end of the snapshot and after every event that changes
// them. It returns the error that ended the stream. At most
// maxConcurrentWatches snapshots are read at once (w.firsts), as for first
// queries.
func (w *watch) followOnce(e *entry, b interface{ Reset() }) error {
	select {
	case w.firsts <- struct{}{}:
	case <-e.ctx.Done():
		return e.ctx.Err()
	}
	held := true
	release := func() {
		if held {
			held = false
			<-w.firsts
		}
	}
	defer release()
	sub, err := w.stream.subscribe(e.ctx, e.name)
	if err != nil {
		return err
	}
	defer sub.cancel()
	v := view{instances: map[string][]byte{}}
	synced := false
	for {
		ev, err := sub.next()
		if err != nil {
			return err
		}
		w.r.m.streamEvents.Inc()
		changed := v.apply(ev)
		switch {
		case ev.newSnapshot:
			synced = false
		case ev.endOfSnapshot:
			synced, changed = true, true
			release()
			b.Reset()
		}
		if synced && changed {
			w.r.m.healthChanged.Inc()
			if !send(e.ctx, w.service, serviceEvent{e: e, entries: v.entries(w.r.cfg.Tags, w.r.cfg.PassingOnly), at: time.Now()}) {
				return e.ctx.Err()
			}
		}
	}
}
