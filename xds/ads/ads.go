package ads

import (
	"context"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

// ads serves the AggregatedDiscoveryService (SotW and Delta) from a store.
//
// Each stream runs two goroutines: gRPC's handler, which sends what
// updates changed when the store wakes it, and a receiver, which applies
// each request and sends what it calls for at once (no hand-off between
// goroutines on the ACK path). They take turns under stream.serve. Per
// type URL a stream has one persistent subscription in the store's
// index. Like go-control-plane's one-shot watches, a type gets a new
// response only after the client answered the previous one (ACK,
// NACK or a new subscription); changes in between accumulate as dirty
// names and go out together. Unlike them, answering costs nothing per
// subscribed name: only dirty names are compared with the versions the
// client holds.
type ads struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer

	ctx       context.Context
	store     *store
	tracker   *tracker
	sotwIDs   atomic.Int64
	deltaID   atomic.Int64
	errorf    func(msg string, args ...any)
	limits    Limits // with defaults applied
	classify  func(*core.Node) Class
	viewOf    func(*core.Node, Class) string
	callbacks Callbacks
	gate      restoreGate // the restore hold (hold.go)
}

// stream is one ADS stream.
type stream struct {
	delta  bool
	status *streamState
	w      *watcher // where the store leaves what updates changed

	// serve guards the fields below, the state of the stream's types, and
	// sending. Lock order: serve, then the store's locks.
	serve   sync.Mutex
	closed  bool
	class   Class
	named   bool       // class known (first request seen)
	learned bool       // node (or a generated id) handed to the tracker
	anon    bool       // learned without a node
	node    *core.Node // the first node seen: Variants resources read it
	types   map[string]*typeSub
	nonce   int64

	sizeLimited bool // the client refuses responses over Limits.MaxResponseBytes (respsize.go)
	holdLogged  bool // the restore hold held a type of it (hold.go)
}

// typeSub is a stream's side of its subscription to one type URL: what
// the client holds and where the protocol stands. Guarded by the
// stream's serve lock.
type typeSub struct {
	sub     *Subscription // the store's side
	typeURL string
	status  *typeState

	known     map[string]string // name → version the client holds
	namesHash uint64            // SotW: hash of the last resource_names applied
	inflight  bool              // a response awaits the client's next request
	held      bool              // the restore hold holds it (hold.go)
	nonce     string            // of the last response
	// Response size protection (respsize.go): logged a whole response
	// above the limit; name → version logged as too large.
	warnedSent     bool
	rejectedLogged map[string]string
}

func (a *ads) open(delta bool) *stream {
	k := streamKey{delta: delta}
	if delta {
		k.id = a.deltaID.Add(1)
	} else {
		k.id = a.sotwIDs.Add(1)
	}
	return &stream{delta: delta, status: a.tracker.open(k), w: newWatcher(), types: map[string]*typeSub{}}
}

func (a *ads) close(st *stream) {
	st.serve.Lock()
	defer st.serve.Unlock()
	st.closed = true
	subs := make([]*Subscription, 0, len(st.types))
	for _, ts := range st.types {
		subs = append(subs, ts.sub)
		if ts.held {
			a.gate.forget(ts.sub)
		}
	}
	a.store.drop(st.w, subs)
	a.tracker.close(st.status)
}

// sub returns the stream's subscription to typeURL and whether it is new.
// The stream's first request fixes its class; the first node seen is its
// node (later requests may omit it). A stream whose first request has no
// node is counted and listed under a generated id until one comes.
//
// A type URL is served when the store holds a collection for it
// (Config.Collections); a subscription to any other has no collection and
// is answered empty (answerUnknown), so a client waiting for every type it
// asked for does not hang. A new type URL beyond Limits.MaxTypeURLs ends
// the stream.
func (a *ads) sub(st *stream, node *core.Node, typeURL string) (*typeSub, bool, error) {
	if typeURL == "" {
		return nil, false, status.Errorf(codes.InvalidArgument, "type URL is required for ADS")
	}
	if !st.named {
		st.named = true
		st.class = a.classify(node)
		st.sizeLimited = sizeLimited(node)
		key := ""
		if a.viewOf != nil {
			key = a.viewOf(node, st.class)
		}
		a.store.setView(st.w, node, st.class, key)
	}
	if st.node == nil && node != nil {
		st.node = node // a stream whose first request had no node
	}
	if !st.learned || (st.anon && node != nil) {
		st.learned, st.anon = true, node == nil
		a.tracker.learn(st.status, node, st.class)
	}
	if ts := st.types[typeURL]; ts != nil {
		return ts, false, nil
	}
	if len(st.types) >= a.limits.MaxTypeURLs {
		return nil, false, limitErr("typeURLs", "the stream already subscribes to %d type URLs", len(st.types))
	}
	if f := a.callbacks.OnFirstRequest; f != nil {
		f(typeURL)
	}
	coll := a.store.lookup(st.class, typeURL)
	ts := &typeSub{sub: a.store.subscription(st.w, coll, typeURL), typeURL: typeURL}
	if coll == nil {
		unknownTypes.Inc()
	}
	ts.status = a.tracker.typ(st.status, typeURL, ts.sub)
	st.types[typeURL] = ts
	return ts, true, nil
}

// checkNames returns an error if a name a request subscribes to is over
// MaxNameBytes, or if the stream would subscribe to more than
// Limits.MaxNames names, holding now others plus names (an upper bound:
// names already subscribed count again); replace discounts the names ts
// holds now (a SotW request replaces them).
func (a *ads) checkNames(st *stream, ts *typeSub, names []string, replace bool) error {
	if err := checkNameBytes(names); err != nil {
		return err
	}
	add := len(names)
	a.store.mu.RLock()
	n := st.w.names
	if replace {
		n -= len(ts.sub.names)
	}
	a.store.mu.RUnlock()
	if n+add > a.limits.MaxNames {
		return limitErr("names", "%d resource names requested, over %d per stream", n+add, a.limits.MaxNames)
	}
	return nil
}

// StreamAggregatedResources serves a SotW ADS stream.
func (a *ads) StreamAggregatedResources(str discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	st := a.open(false)
	return serveStream(a, st, str.Recv, func(st *stream, req *discovery.DiscoveryRequest) error {
		return a.sotwRequest(st, req, str.Send)
	}, func(st *stream) error { return a.pushAll(st, str.Send, nil) })
}

// DeltaAggregatedResources serves a delta (incremental) ADS stream.
func (a *ads) DeltaAggregatedResources(str discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	st := a.open(true)
	return serveStream(a, st, str.Recv, func(st *stream, req *discovery.DeltaDiscoveryRequest) error {
		return a.deltaRequest(st, req, str.Send)
	}, func(st *stream) error { return a.pushAll(st, nil, str.Send) })
}

// serveStream runs a stream until the client ends it, a send fails or the
// server closes: requests are applied on a receiving goroutine, wake-ups
// on the handler's. The receiving goroutine is the last to use the
// stream (its Recv fails once the handler returned), so it cleans up.
// While the receiving goroutine is blocked sending to a client that
// stopped reading, the handler still returns when the server closes. A
// send of the handler's own that blocks the same way ends only when the
// gRPC server stops the connection (the gateway does after its drain
// timeout), as with go-control-plane's server.
func serveStream[R any](a *ads, st *stream, recv func() (R, error), request func(*stream, R) error, push func(*stream) error) error {
	errc := make(chan error, 1)
	go func() {
		defer a.close(st)
		for {
			req, err := recv()
			if err != nil {
				errc <- nil // the client ended the stream, or the handler returned
				return
			}
			st.serve.Lock()
			err = request(st, req)
			st.serve.Unlock()
			if err != nil {
				errc <- err
				return
			}
		}
	}()
	for {
		select {
		case <-a.ctx.Done():
			return nil
		case err := <-errc:
			return err
		case <-st.w.wake:
			if !lockOrDone(&st.serve, a.ctx) {
				return nil
			}
			var err error
			if !st.closed {
				err = push(st)
			}
			st.serve.Unlock()
			if err != nil {
				return err
			}
		}
	}
}

// sotwRequest applies a SotW request and sends what it calls for.
func (a *ads) sotwRequest(st *stream, req *discovery.DiscoveryRequest, send sotwSend) error {
	ts, first, err := a.sub(st, req.GetNode(), req.GetTypeUrl())
	if err != nil {
		return err
	}
	a.tracker.sotwRequest(st.status, ts.status, req)
	if !first && ts.nonce != "" && req.GetResponseNonce() != ts.nonce {
		return nil // stale: an answer to an older response
	}
	names := req.GetResourceNames()
	if err := a.checkNames(st, ts, names, true); err != nil {
		return err
	}
	// Clients repeat their list on every ACK: applying the same list
	// again changes nothing, so a hash of the last one spares the work.
	changed := first
	if h := hashNames(names); first || h != ts.namesHash {
		ts.namesHash, changed = h, true
		if first {
			ts.known = map[string]string{}
		}
		a.store.subscribeSotw(ts.sub, ts.known, first, names)
	}
	if first {
		a.holdIfRestored(st, ts, req.GetVersionInfo() != "")
	}
	ts.inflight = false
	if ts.sub.coll == nil {
		if !changed {
			return nil
		}
		return a.answerUnknown(st, ts, nil, send, nil)
	}
	// A request without a version asks for the current state even if
	// empty. A NACK of the first response carries no version either;
	// answering it at once would resend what the client just rejected, so
	// it waits for the next change.
	reply := req.GetVersionInfo() == "" && req.GetErrorDetail() == nil
	return a.push(st, ts, reply, send, nil)
}

// deltaRequest applies a delta request and sends what it calls for.
func (a *ads) deltaRequest(st *stream, req *discovery.DeltaDiscoveryRequest, send deltaSend) error {
	ts, first, err := a.sub(st, req.GetNode(), req.GetTypeUrl())
	if err != nil {
		return err
	}
	a.tracker.deltaRequest(st.status, ts.status, req)
	sub, unsub := req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe()
	if err := a.checkNames(st, ts, sub, false); err != nil {
		return err
	}
	if n := len(req.GetInitialResourceVersions()); n > a.limits.MaxNames {
		return limitErr("names", "%d initial resource versions, over %d per stream", n, a.limits.MaxNames)
	}
	if first {
		ts.known = maps.Clone(req.GetInitialResourceVersions()) // the request's map is not ours to write
		if ts.known == nil {
			ts.known = map[string]string{}
		}
	}
	a.store.subscribeDelta(ts.sub, ts.known, first, sub, unsub)
	if first {
		a.holdIfRestored(st, ts, len(ts.known) > 0)
	}
	ts.inflight = false
	if ts.sub.coll == nil {
		if !first && len(sub) == 0 && len(unsub) == 0 {
			return nil // an ACK or NACK
		}
		return a.answerUnknown(st, ts, sub, nil, send)
	}
	// A wildcard subscription's first request is answered even when
	// empty: Envoy waits for it to finish initialization.
	reply := false
	if req.GetResponseNonce() == "" {
		a.store.mu.RLock()
		reply = ts.sub.wildcard
		a.store.mu.RUnlock()
	}
	return a.push(st, ts, reply, nil, send)
}

type (
	sotwSend  func(*discovery.DiscoveryResponse) error
	deltaSend func(*discovery.DeltaDiscoveryResponse) error
)

// pushAll sends what changed on the types of a woken stream, in the order
// updates changed them.
func (a *ads) pushAll(st *stream, sotw sotwSend, delta deltaSend) error {
	for _, sub := range st.w.take() {
		if err := a.push(st, st.types[sub.typeURL], false, sotw, delta); err != nil {
			return err
		}
	}
	return nil
}

// push compares ts's dirty names with what the client holds and sends a
// response if the protocol calls for one: delta, when a resource changed
// or went away; SotW, the full matching state for LDS/CDS when anything
// changed, only the changed resources for EDS/RDS. reply sends a response
// even if nothing changed. Nothing is sent while a response is unanswered.
func (a *ads) push(st *stream, ts *typeSub, reply bool, sotw sotwSend, delta deltaSend) error {
	if ts.sub.coll == nil || ts.inflight {
		return nil
	}
	if ts.held {
		if a.holding(st, ts) {
			return nil // its dirty names wait for the release (hold.go)
		}
		reply = true // answer the request it was held on
	}
	dirty, all := ts.sub.takeDirty()
	if len(dirty) == 0 && !all && !reply {
		return nil
	}
	full := !st.delta && ts.sub.coll.FullState
	cands, matching, version := a.store.snapshot(ts.sub, ts.known, dirty, all, full)
	var changed []*cachedRes
	var changedWire []*wire
	var removed []string
	for _, c := range cands {
		if c.r == nil {
			if _, ok := ts.known[c.name]; ok {
				removed = append(removed, c.name)
			}
			continue
		}
		w, err := c.r.wireFor(st.node)
		if err != nil {
			a.errorf("xds cachedRes not sent: marshal failed", "type", ts.typeURL, "name", c.name, "error", err)
			continue
		}
		if v, ok := ts.known[c.name]; !ok || v != w.version {
			changed = append(changed, c.r)
			changedWire = append(changedWire, w)
		}
	}
	for _, n := range removed {
		delete(ts.known, n)
	}
	if len(changed) == 0 && len(removed) == 0 && !reply {
		return nil
	}
	if st.delta {
		// Response size protection (respsize.go), when over the limit.
		overhead := responseOverhead(ts.typeURL, version, removed)
		total := overhead
		for i, w := range changedWire {
			total += deltaResourceSize(changed[i].name, w.version, w.any)
		}
		if total > a.limits.MaxResponseBytes {
			names, versions, sizes := make([]string, len(changed)), make([]string, len(changed)), make([]int, len(changed))
			for i, w := range changedWire {
				names[i], versions[i], sizes[i] = changed[i].name, w.version, deltaResourceSize(changed[i].name, w.version, w.any)
			}
			if keep := a.limitResponse(st, ts, names, versions, sizes, overhead, true); keep != nil {
				changed, changedWire = pick(changed, keep), pick(changedWire, keep)
				if len(changed) == 0 && len(removed) == 0 && !reply {
					return nil
				}
			}
		}
		st.nonce++
		nonce := strconv.FormatInt(st.nonce, 10)
		if len(ts.known) == 0 && len(changed) > 8 {
			ts.known = make(map[string]string, len(changed)) // grow once on a first sync
		}
		rs := make([]*discovery.Resource, len(changedWire))
		for i, w := range changedWire {
			rs[i] = w.delta
			ts.known[changed[i].name] = w.version
		}
		a.sent(st, ts, version, nonce, !reply)
		return delta(&discovery.DeltaDiscoveryResponse{SystemVersionInfo: version, TypeUrl: ts.typeURL,
			Nonce: nonce, Resources: rs, RemovedResources: removed})
	}
	if !full {
		if len(changed) == 0 && !reply {
			return nil // SotW cannot carry removals of EDS/RDS: nothing to send
		}
		matching = changed
	}
	anys := make([]*anypb.Any, 0, len(matching))
	wires := make([]*wire, 0, len(matching))
	names := make([]string, 0, len(matching))
	overhead := responseOverhead(ts.typeURL, version, nil)
	total := overhead
	for _, r := range matching {
		w, err := r.wireFor(st.node)
		if err != nil {
			a.errorf("xds cachedRes not sent: marshal failed", "type", ts.typeURL, "name", r.name, "error", err)
			continue
		}
		anys, wires, names = append(anys, w.any), append(wires, w), append(names, r.name)
		total += sotwResourceSize(w.any)
	}
	if total > a.limits.MaxResponseBytes {
		// Response size protection (respsize.go).
		versions, sizes := make([]string, len(wires)), make([]int, len(wires))
		for i, w := range wires {
			versions[i], sizes[i] = w.version, sotwResourceSize(w.any)
		}
		if keep := a.limitResponse(st, ts, names, versions, sizes, overhead, !full); keep != nil {
			anys, wires, names = pick(anys, keep), pick(wires, keep), pick(names, keep)
			if !full && len(anys) == 0 && !reply {
				return nil
			}
		}
	}
	st.nonce++
	nonce := strconv.FormatInt(st.nonce, 10)
	if len(ts.known) == 0 && len(names) > 8 {
		ts.known = make(map[string]string, len(names)) // grow once on a first sync
	}
	for i, n := range names {
		ts.known[n] = wires[i].version
	}
	a.sent(st, ts, version, nonce, !reply)
	return sotw(&discovery.DiscoveryResponse{VersionInfo: version, TypeUrl: ts.typeURL, Nonce: nonce, Resources: anys})
}

// answerUnknown answers a subscription to a type URL meshfed does not
// serve with an empty response: no resources, and for delta every name
// just subscribed listed as removed (it does not exist).
func (a *ads) answerUnknown(st *stream, ts *typeSub, sub []string, sotw sotwSend, delta deltaSend) error {
	st.nonce++
	nonce := strconv.FormatInt(st.nonce, 10)
	const version = "0"
	a.sent(st, ts, version, nonce, false)
	if st.delta {
		var removed []string
		for _, n := range sub {
			if n != wildcardName {
				removed = append(removed, n)
			}
		}
		return delta(&discovery.DeltaDiscoveryResponse{SystemVersionInfo: version, TypeUrl: ts.typeURL, Nonce: nonce, RemovedResources: removed})
	}
	return sotw(&discovery.DiscoveryResponse{VersionInfo: version, TypeUrl: ts.typeURL, Nonce: nonce})
}

func (a *ads) sent(st *stream, ts *typeSub, version, nonce string, update bool) {
	ts.inflight = true
	ts.nonce = nonce
	a.tracker.response(st.status, ts.status, version, nonce, update)
}

// lockOrDone locks mu, or gives up when ctx ends first and reports false;
// a lock taken after giving up is released at once.
func lockOrDone(mu *sync.Mutex, ctx context.Context) bool {
	if mu.TryLock() {
		return true
	}
	got := make(chan struct{})
	go func() { mu.Lock(); close(got) }()
	select {
	case <-got:
		return true
	case <-ctx.Done():
		go func() { <-got; mu.Unlock() }()
		return false
	}
}
