package bench

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshfed/meshfed/xds/translate"
)

// LoadOptions configure a load generator.
type LoadOptions struct {
	Addr   string // ADS server
	N      int    // streams
	Offset int    // first stream index (node ids are unique across processes)
	Delta  bool   // delta xDS; SotW otherwise
	// Wildcard streams act like an Envoy sidecar (node sidecar~…): wildcard
	// CDS, then EDS for every cluster CDS returned. Otherwise streams act
	// like a proxyless gRPC client (node metadata GENERATOR=grpc) that names
	// the Per clusters it uses (Watched) in CDS and EDS.
	Wildcard bool
	Services int // services the server has (wildcard: clusters expected)
	Per      int // scoped: clusters per stream
	Common   int // scoped: clusters every stream watches
	// AddrMarker finds an event's seq in the changed endpoint's address
	// (SeqAddr; the file scenario) instead of the SeqLabel label.
	AddrMarker bool
	// Istio names named-mode nodes as istiod wants a proxyless gRPC
	// client's (sidecar~IP~pod.namespace~namespace.svc.cluster.local).
	Istio bool
	// Namespaces, when set, puts wildcard streams in namespaces
	// ScopeNamespace(idx, Namespaces) (Istio-style node ids); Scoped is
	// then the clusters each expects (its Sidecar's), 0: Services.
	Namespaces, Scoped int
	// FixedWindows sets fixed HTTP/2 flow-control windows as Envoy does,
	// which turns off grpc-go's BDP estimation: otherwise each stream
	// pings the server on every response it receives, and the server
	// writes a PING ACK per stream and push.
	FixedWindows bool
}

// Record says that a stream ACKed a ClusterLoadAssignment of service Svc
// whose highest seq marker is Seq, at Ack (Unix ns).
type Record struct {
	Stream int32
	Svc    int32
	Seq    int64
	Ack    int64
}

// LoadStats are a load generator's counters.
type LoadStats struct {
	Streams   int   `json:"streams"`
	Synced    int   `json:"synced"`    // streams holding everything they subscribe to
	Sessions  int64 `json:"sessions"`  // ADS streams opened, over all reconnects
	Bytes     int64 `json:"bytes"`     // serialized size of every response received
	Responses int64 `json:"responses"` // responses received (each ACKed)
	LastSync  int64 `json:"lastSync"`  // latest sync time (Unix ns) over streams
}

// StreamSync is one stream's latest session and when it synced (0: not).
type StreamSync struct {
	Session int   `json:"session"`
	Synced  int64 `json:"synced"`
}

// Loadgen runs N ADS streams, each on its own connection with its own node
// id, ACKing every response at once.
type Loadgen struct {
	o       LoadOptions
	svcOf   map[string]int32
	streams []*lgStream

	bytes, responses, sessions atomic.Int64

	mu      sync.Mutex
	records []Record
	cursor  int // next stream Reconnect ends
}

type lgStream struct {
	lg      *Loadgen
	idx     int
	node    *core.Node
	names   []string // scoped: clusters
	session atomic.Int64
	synced  atomic.Int64 // ack time that completed this session's sync
	lastSeq map[string]int64
	// cancel ends the current session; reconnecting asks Run for a new
	// connection after it.
	cancel       atomic.Pointer[context.CancelFunc]
	reconnecting atomic.Bool
}

// NewLoadgen prepares the streams; Run connects them.
func NewLoadgen(o LoadOptions) *Loadgen {
	lg := &Loadgen{o: o, svcOf: map[string]int32{}}
	for i := range o.Services {
		lg.svcOf[ClusterName(i)] = int32(i)
	}
	for k := range o.N {
		idx := o.Offset + k
		s := &lgStream{lg: lg, idx: idx, lastSeq: map[string]int64{}}
		if o.Wildcard {
			s.node = &core.Node{Id: fmt.Sprintf("sidecar~127.0.0.1~bench-%d~%s", idx, Domain), Cluster: "bench"}
			if o.Namespaces > 0 {
				ns := ScopeNamespace(idx, o.Namespaces)
				s.node.Id = fmt.Sprintf("sidecar~127.0.0.1~bench-%d.%s~%s.svc.cluster.local", idx, ns, ns)
			}
		} else {
			md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc"})
			s.node = &core.Node{Id: fmt.Sprintf("bench-%d", idx), Metadata: md}
			if o.Istio {
				s.node.Id = fmt.Sprintf("sidecar~127.0.0.1~bench-%d.default~default.svc.cluster.local", idx)
			}
			for _, i := range Watched(idx, o.Services, o.Per, o.Common) {
				s.names = append(s.names, ClusterName(i))
			}
		}
		lg.streams = append(lg.streams, s)
	}
	return lg
}

// Run connects every stream and keeps them open (reconnecting after
// errors, and on Reconnect with a new connection) until ctx ends.
func (lg *Loadgen) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(512 << 20)),
	}
	if lg.o.FixedWindows {
		opts = append(opts, grpc.WithInitialWindowSize(1<<20), grpc.WithInitialConnWindowSize(1<<20))
	}
	dial := func() (*grpc.ClientConn, error) { return grpc.NewClient(lg.o.Addr, opts...) }
	for _, s := range lg.streams {
		conn, err := dial()
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { conn.Close() }()
			for ctx.Err() == nil {
				_ = s.run(ctx, discovery.NewAggregatedDiscoveryServiceClient(conn))
				if s.reconnecting.Swap(false) {
					// A proxy that restarts comes back on a new connection.
					conn.Close()
					if conn, err = dial(); err != nil {
						return
					}
					continue
				}
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
	}
	wg.Wait()
	return nil
}

// Reconnect ends the sessions of n streams, taken in turn (the next call
// continues after the last one), which reconnect at once on a new
// connection. It returns the indexes of the streams it reconnected.
func (lg *Loadgen) Reconnect(n int) []int {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	var out []int
	for range min(n, len(lg.streams)) {
		s := lg.streams[lg.cursor%len(lg.streams)]
		lg.cursor++
		s.reconnecting.Store(true)
		if c := s.cancel.Load(); c != nil {
			(*c)()
		}
		out = append(out, s.idx)
	}
	return out
}

// Stats returns the counters.
func (lg *Loadgen) Stats() LoadStats {
	st := LoadStats{Streams: len(lg.streams), Sessions: lg.sessions.Load(), Bytes: lg.bytes.Load(), Responses: lg.responses.Load()}
	for _, s := range lg.streams {
		if t := s.synced.Load(); t > 0 {
			st.Synced++
			st.LastSync = max(st.LastSync, t)
		}
	}
	return st
}

// Syncs returns every stream's latest session and sync time.
func (lg *Loadgen) Syncs() []StreamSync {
	out := make([]StreamSync, len(lg.streams))
	for i, s := range lg.streams {
		out[i] = StreamSync{Session: int(s.session.Load()), Synced: s.synced.Load()}
	}
	return out
}

// Drain returns and forgets the records so far.
func (lg *Loadgen) Drain() []Record {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	r := lg.records
	lg.records = nil
	return r
}

func (lg *Loadgen) record(rs []Record) {
	if len(rs) == 0 {
		return
	}
	lg.mu.Lock()
	lg.records = append(lg.records, rs...)
	lg.mu.Unlock()
}

// Handler serves GET /stats, /syncs and /records (drains; JSON arrays of
// [stream, svc, seq, ack]), and POST /reconnect?n=N (Reconnect; the
// indexes of the streams it reconnected).
func (lg *Loadgen) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, lg.Stats()) })
	mux.HandleFunc("POST /reconnect", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil || n < 0 {
			http.Error(w, "bad n", http.StatusBadRequest)
			return
		}
		writeJSON(w, lg.Reconnect(n))
	})
	mux.HandleFunc("GET /syncs", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, lg.Syncs()) })
	mux.HandleFunc("GET /records", func(w http.ResponseWriter, _ *http.Request) {
		rs := lg.Drain()
		w.Header().Set("Content-Type", "application/json")
		buf := make([]byte, 0, 32*len(rs)+2)
		buf = append(buf, '[')
		for i, r := range rs {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = append(buf, '[')
			buf = strconv.AppendInt(buf, int64(r.Stream), 10)
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, int64(r.Svc), 10)
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, r.Seq, 10)
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, r.Ack, 10)
			buf = append(buf, ']')
		}
		buf = append(buf, ']')
		_, _ = w.Write(buf)
	})
	return mux
}

// firstName returns field 1 (a string) of a serialized resource: the name
// of a Cluster, ClusterLoadAssignment, Listener or RouteConfiguration.
func firstName(b []byte) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b)
			return string(v)
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return ""
		}
		b = b[n:]
	}
	return ""
}

// session state of one ADS stream.
type session struct {
	s       *lgStream
	have    map[string]map[string]bool // type → names held
	edsSubs []string                   // sotw: EDS names requested
	edsSet  map[string]bool
	acked   map[string]string // sotw: type → version
	nonce   map[string]string // sotw: type → last nonce
	synced  bool
}

func (s *lgStream) run(ctx context.Context, cl discovery.AggregatedDiscoveryServiceClient) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.cancel.Store(&cancel)
	if s.reconnecting.Load() { // asked before this session started
		return nil
	}
	s.session.Add(1)
	s.synced.Store(0)
	s.lg.sessions.Add(1)
	se := &session{s: s, have: map[string]map[string]bool{translate.ClusterType: {}, translate.EndpointType: {}},
		edsSet: map[string]bool{}, acked: map[string]string{}, nonce: map[string]string{}}
	if s.lg.o.Delta {
		st, err := cl.DeltaAggregatedResources(ctx, grpc.WaitForReady(true))
		if err != nil {
			return err
		}
		return se.delta(st)
	}
	st, err := cl.StreamAggregatedResources(ctx, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	return se.sotw(st)
}

func (se *session) wantEDS() int {
	if se.s.lg.o.Wildcard {
		return len(se.have[translate.ClusterType])
	}
	return len(se.s.names)
}

func (se *session) wantCDS() int {
	if se.s.lg.o.Wildcard {
		if se.s.lg.o.Scoped > 0 {
			return se.s.lg.o.Scoped
		}
		return se.s.lg.o.Services
	}
	return len(se.s.names)
}

// received counts a response's bytes and returns its type URL.
func (se *session) received(resp interface {
	proto.Message
	GetTypeUrl() string
}) string {
	se.s.lg.bytes.Add(int64(proto.Size(resp)))
	se.s.lg.responses.Add(1)
	return resp.GetTypeUrl()
}

// recordAcked notes the CLAs (names and raws) of a response just acked, records
// those that carry a newer marker, and returns the ack time.
func (se *session) recordAcked(names []string, raws [][]byte) int64 {
	ack := time.Now().UnixNano()
	var recs []Record
	for i := range raws {
		recs = se.eds(names[i], raws[i], ack, recs)
	}
	se.s.lg.record(recs)
	return ack
}

// eds notes one received CLA and returns a record if it carries a newer
// marker.
func (se *session) eds(name string, raw []byte, ack int64, out []Record) []Record {
	se.have[translate.EndpointType][name] = true
	seq, ok := MaxSeq(raw)
	if se.s.lg.o.AddrMarker {
		seq, ok = MaxSeqAddr(raw)
	}
	if !ok || seq <= se.s.lastSeq[name] {
		return out
	}
	se.s.lastSeq[name] = seq
	svc, known := se.s.lg.svcOf[name]
	if !known {
		return out
	}
	return append(out, Record{Stream: int32(se.s.idx), Svc: svc, Seq: seq, Ack: ack})
}

func (se *session) checkSync(ack int64) {
	if se.synced {
		return
	}
	if len(se.have[translate.ClusterType]) >= se.wantCDS() && se.wantEDS() > 0 && len(se.have[translate.EndpointType]) >= se.wantEDS() {
		se.synced = true
		se.s.synced.Store(ack)
	}
}

func (se *session) delta(st discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient) error {
	s := se.s
	send := func(r *discovery.DeltaDiscoveryRequest) error { return st.Send(r) }
	if err := send(&discovery.DeltaDiscoveryRequest{Node: s.node, TypeUrl: translate.ClusterType, ResourceNamesSubscribe: s.names}); err != nil {
		return err
	}
	if !s.lg.o.Wildcard {
		if err := send(&discovery.DeltaDiscoveryRequest{Node: s.node, TypeUrl: translate.EndpointType, ResourceNamesSubscribe: s.names}); err != nil {
			return err
		}
	}
	firstEDS := true
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		url := se.received(resp)
		var newEDS []string
		var raws [][]byte
		var names []string
		for _, r := range resp.GetResources() {
			if se.have[url] == nil {
				se.have[url] = map[string]bool{}
			}
			switch url {
			case translate.EndpointType:
				names = append(names, r.GetName())
				raws = append(raws, r.GetResource().GetValue())
			case translate.ClusterType:
				se.have[url][r.GetName()] = true
				if s.lg.o.Wildcard && !se.edsSet[r.GetName()] {
					se.edsSet[r.GetName()] = true
					newEDS = append(newEDS, r.GetName())
				}
			default:
				se.have[url][r.GetName()] = true
			}
		}
		for _, n := range resp.GetRemovedResources() {
			delete(se.have[url], n)
		}
		if err := send(&discovery.DeltaDiscoveryRequest{TypeUrl: url, ResponseNonce: resp.GetNonce()}); err != nil {
			return err
		}
		ack := se.recordAcked(names, raws)
		if len(newEDS) > 0 {
			req := &discovery.DeltaDiscoveryRequest{TypeUrl: translate.EndpointType, ResourceNamesSubscribe: newEDS}
			if firstEDS {
				req.Node = s.node
				firstEDS = false
			}
			if err := send(req); err != nil {
				return err
			}
		}
		se.checkSync(ack)
	}
}

func (se *session) sotw(st discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient) error {
	s := se.s
	if err := st.Send(&discovery.DiscoveryRequest{Node: s.node, TypeUrl: translate.ClusterType, ResourceNames: s.names}); err != nil {
		return err
	}
	if !s.lg.o.Wildcard {
		se.edsSubs = s.names
		if err := st.Send(&discovery.DiscoveryRequest{Node: s.node, TypeUrl: translate.EndpointType, ResourceNames: s.names}); err != nil {
			return err
		}
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		url := se.received(resp)
		var names []string
		var raws [][]byte
		cur := map[string]bool{}
		for _, a := range resp.GetResources() {
			n := firstName(a.GetValue())
			cur[n] = true
			if url == translate.EndpointType {
				names = append(names, n)
				raws = append(raws, a.GetValue())
			}
		}
		// CDS and LDS responses are the full state; EDS/RDS may carry only
		// changed resources (Envoy keeps the others).
		if url == translate.ClusterType || url == translate.ListenerType {
			se.have[url] = cur
		} else {
			if se.have[url] == nil {
				se.have[url] = map[string]bool{}
			}
			for n := range cur {
				se.have[url][n] = true
			}
		}
		var subs []string
		switch url {
		case translate.ClusterType:
			subs = s.names
		case translate.EndpointType:
			subs = se.edsSubs
		}
		se.acked[url], se.nonce[url] = resp.GetVersionInfo(), resp.GetNonce()
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: url, VersionInfo: resp.GetVersionInfo(),
			ResponseNonce: resp.GetNonce(), ResourceNames: subs}); err != nil {
			return err
		}
		ack := se.recordAcked(names, raws)
		if url == translate.ClusterType && s.lg.o.Wildcard {
			changed := false
			for n := range cur {
				if !se.edsSet[n] {
					se.edsSet[n] = true
					se.edsSubs = append(se.edsSubs, n)
					changed = true
				}
			}
			if changed {
				req := &discovery.DiscoveryRequest{TypeUrl: translate.EndpointType, ResourceNames: se.edsSubs,
					VersionInfo: se.acked[translate.EndpointType], ResponseNonce: se.nonce[translate.EndpointType]}
				if se.nonce[translate.EndpointType] == "" {
					req.Node = s.node
				}
				if err := st.Send(req); err != nil {
					return err
				}
			}
		}
		se.checkSync(ack)
	}
}
