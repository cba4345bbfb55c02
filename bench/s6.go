package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/xds"
	"github.com/meshfed/meshfed/xds/translate"
)

// S6Row is one registry's row of S6 (registry ingest to client): a write in
// the real backend → the last ADS client ACKs an EDS response holding the
// new endpoint. The registry runs against meshfed's real aggregate and xds
// packages, wired as the gateway wires them. A row is registered from a
// _test.go file in bench/s6:
//
//	func init() { rows = append(rows, bench.S6Row{Name: "zookeeper", Goal: 20 * time.Millisecond, Setup: zkSetup}) }
type S6Row struct {
	Name string // registry kind, as in clusters.yaml
	// Goal is the p99 goal of write → last client ACK (0: report only).
	Goal time.Duration
	// Note is printed beside the figure (e.g. the poll interval used).
	Note string
	// Smoke rows need no external server and also run, with a few writes,
	// in `go test ./bench/...`.
	Smoke bool
	// Setup starts the real backend on 127.0.0.1 (stopped by t.Cleanup; it
	// calls servers.Missing when the backend is not installed) and returns
	// the registry under test, built by its kind's Config.New.
	Setup func(t testing.TB) S6Target
}

// S6Target is a running backend and the registry that watches it.
type S6Target struct {
	Registry registries.Registry
	Common   registries.Common // what Registry was built with
	// Host is the hostname every write adds an endpoint to. Setup makes it
	// exist (with at least one endpoint) before the first write, so that
	// the clients can subscribe to its clusters.
	Host string
	// Write makes change n (1, 2, …) in the backend: it adds one endpoint
	// to Host that nobody published before and says where meshfed must
	// see it.
	Write func(ctx context.Context, n int) (S6Change, error)
}

// S6Change is what a write adds.
type S6Change struct {
	Host    string // hostname as the registry publishes it
	Address string // the new endpoint's address
	// Stamp is when the write was made; zero means just before Write was
	// called.
	Stamp time.Time
}

// S6Options set how RunS6 runs a row.
type S6Options struct {
	Writes int           // changes, each awaited before the next
	Gap    time.Duration // pause after a change has reached every client
	// Quiet and MaxWait are the aggregator's debounce (clusters.yaml's
	// debounce.quiet and debounce.max).
	Quiet, MaxWait time.Duration
	// Clients is how many ADS clients (SotW, as proxyless gRPC) subscribe
	// to Host's clusters; the figure is the last of them to ACK.
	Clients int
}

// s6Timeout bounds the wait for one write, and for the start.
const s6Timeout = 30 * time.Second

// S6Result is one row's outcome.
type S6Result struct {
	Name string `json:"name"`
	Goal int64  `json:"goal"` // ns
	// Latency is write → last client ACK of an EDS response holding the
	// new endpoint.
	Latency Summary `json:"latency"`
	// Ingest is write → the registry's Sink.Publish holding it.
	Ingest  Summary `json:"ingest"`
	Clients int     `json:"clients"`
	Lost    int     `json:"lost"` // writes never seen within the timeout
	Note    string  `json:"note,omitempty"`
	Skipped string  `json:"skipped,omitempty"`
}

// s6Sink records the registry's Replace calls, notices the awaited change
// and passes everything on to the aggregator.
type s6Sink struct {
	next registries.Sink

	mu     sync.Mutex
	last   []model.Service
	lastAt time.Time
	want   *S6Change
	seen   chan time.Time
	host   string
	ports  []model.Port  // Host's ports, once a Replace holds it
	hostCh chan struct{} // closed then
}

func holds(services []model.Service, c *S6Change) bool {
	return ServicesState(services).Holds(ScaleChange{Host: c.Host, Value: c.Address})
}

// Publish implements registries.Sink: it notes every state, then passes
// the update on.
func (s *s6Sink) Publish(shard model.ShardKey, u registries.Update) {
	if u.HasState {
		s.observe(u.Services)
	}
	s.next.Publish(shard, u)
}

func (s *s6Sink) observe(services []model.Service) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last, s.lastAt = services, now
	if s.want != nil && holds(services, s.want) {
		s.want = nil
		s.seen <- now
	}
	if s.ports == nil {
		for _, svc := range services {
			if svc.Hostname == s.host && len(svc.Endpoints) > 0 && len(svc.Ports) > 0 {
				s.ports = svc.Ports
				close(s.hostCh)
			}
		}
	}
}

// awaitReplace returns when a Replace held ch: at once if the last one
// did, else when the next one that does arrives; false after s6Timeout.
func (s *s6Sink) awaitReplace(ch *S6Change) (time.Time, bool) {
	s.mu.Lock()
	if holds(s.last, ch) {
		at := s.lastAt
		s.mu.Unlock()
		return at, true
	}
	s.want = ch
	s.mu.Unlock()
	select {
	case at := <-s.seen:
		return at, true
	case <-time.After(s6Timeout):
		s.mu.Lock()
		s.want = nil
		s.mu.Unlock()
		select { // it may have arrived meanwhile
		case <-s.seen:
		default:
		}
		return time.Time{}, false
	}
}

// RunS6 runs row: o.Writes writes spaced by o.Gap, each awaited (up to
// 30 s) by the sink and by every client before the next.
func RunS6(t testing.TB, row S6Row, o S6Options) S6Result {
	res := S6Result{Name: row.Name, Goal: int64(row.Goal), Note: row.Note, Clients: o.Clients}
	tg := row.Setup(t)
	if tg.Host == "" {
		t.Fatalf("%s: S6Target.Host is not set", row.Name)
	}
	p, err := startS6Pipeline(tg.Common, o)
	if err != nil {
		t.Fatal(err)
	}
	sink := &s6Sink{next: p.agg, seen: make(chan time.Time, 1), host: tg.Host, hostCh: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	regDone := make(chan struct{})
	go func() {
		defer close(regDone)
		_ = tg.Registry.Run(ctx, sink)
	}()
	var clients *s6Clients
	t.Cleanup(func() {
		cancel()
		<-regDone
		if clients != nil {
			clients.close()
		}
		p.close()
	})
	select {
	case <-sink.hostCh:
	case <-time.After(time.Minute):
		t.Fatalf("%s: no Replace holding %s within a minute", row.Name, tg.Host)
	}
	sink.mu.Lock()
	var clusters []string
	for _, port := range sink.ports {
		clusters = append(clusters, translate.ClusterName(tg.Host, port.Number))
	}
	sink.mu.Unlock()
	clients, err = startS6Clients(p.addr, clusters, o.Clients)
	if err != nil {
		t.Fatal(err)
	}
	if err := clients.awaitSync(time.Minute); err != nil {
		t.Fatalf("%s: %v", row.Name, err)
	}

	var ingest, acked []float64
	for i := 1; i <= o.Writes; i++ {
		before := time.Now()
		ch, err := tg.Write(ctx, i)
		if err != nil {
			t.Fatalf("%s: write %d: %v", row.Name, i, err)
		}
		if ch.Stamp.IsZero() {
			ch.Stamp = before
		}
		at, ok := sink.awaitReplace(&ch)
		if !ok {
			res.Lost++
			continue
		}
		ingest = append(ingest, ms(at.Sub(ch.Stamp)))
		last, ok := clients.awaitAddress(ch.Address, s6Timeout)
		if !ok {
			res.Lost++
			continue
		}
		acked = append(acked, ms(last.Sub(ch.Stamp)))
		time.Sleep(o.Gap)
	}
	res.Latency, res.Ingest = Summarize(acked), Summarize(ingest)
	if res.Lost > 0 {
		res.Note += fmt.Sprintf(" (%d writes not seen within 30 s)", res.Lost)
	}
	return res
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// s6Pipeline is meshfed's aggregate and xds serving one registry, wired as
// gateway.Gateway wires them, on a loopback gRPC listener.
type s6Pipeline struct {
	agg    *aggregate.Aggregator
	xds    *xds.Server
	grpc   *grpc.Server
	addr   string
	cancel context.CancelFunc
	done   chan struct{}
}

func startS6Pipeline(c registries.Common, o S6Options) (*s6Pipeline, error) {
	log := slog.New(slog.DiscardHandler)
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	agg := aggregate.New(aggregate.Options{
		Registries: []aggregate.RegistryOptions{{Common: c}},
		Quiet:      o.Quiet,
		MaxWait:    o.MaxWait,
		Logger:     log,
	})
	x := xds.NewServer(xds.Options{Logger: log})
	agg.Subscribe(x.Update)
	g := GRPCServer()
	x.Register(g)
	ctx, cancel := context.WithCancel(context.Background())
	p := &s6Pipeline{agg: agg, xds: x, grpc: g, addr: l.Addr().String(), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		_ = agg.Serve(ctx)
	}()
	go func() { _ = g.Serve(l) }()
	return p, nil
}

func (p *s6Pipeline) close() {
	p.grpc.Stop()
	p.xds.Close()
	p.cancel()
	<-p.done
}

// s6Clients are ADS clients that subscribe to a host's clusters (CDS and
// EDS by name, node metadata GENERATOR=grpc, as grpc-go's xDS resolver
// does) and ACK every response at once. Each notes, per endpoint address,
// when it first ACKed an EDS response holding it.
type s6Clients struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	conns   []*grpc.ClientConn
	changed chan struct{} // a client saw something new

	mu   sync.Mutex
	seen []map[string]time.Time // per client: address → ACK time
	errs []error                // per client: why its stream ended
}

func startS6Clients(addr string, clusters []string, n int) (*s6Clients, error) {
	ctx, cancel := context.WithCancel(context.Background())
	cs := &s6Clients{cancel: cancel, changed: make(chan struct{}, 1),
		seen: make([]map[string]time.Time, n), errs: make([]error, n)}
	for i := range n {
		cs.seen[i] = map[string]time.Time{}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			cs.close()
			return nil, err
		}
		cs.conns = append(cs.conns, conn)
		md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc"})
		node := &core.Node{Id: fmt.Sprintf("s6-client-%d", i), Metadata: md}
		cs.wg.Go(func() {
			err := cs.stream(ctx, i, discovery.NewAggregatedDiscoveryServiceClient(conn), node, clusters)
			cs.mu.Lock()
			cs.errs[i] = err
			cs.mu.Unlock()
			cs.notify()
		})
	}
	return cs, nil
}

func (cs *s6Clients) notify() {
	select {
	case cs.changed <- struct{}{}:
	default:
	}
}

func (cs *s6Clients) stream(ctx context.Context, i int, cl discovery.AggregatedDiscoveryServiceClient, node *core.Node, clusters []string) error {
	st, err := cl.StreamAggregatedResources(ctx, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	for _, typ := range []string{translate.ClusterType, translate.EndpointType} {
		if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: typ, ResourceNames: clusters}); err != nil {
			return err
		}
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		var addrs []string
		if resp.GetTypeUrl() == translate.EndpointType {
			for _, a := range resp.GetResources() {
				var cla endpointv3.ClusterLoadAssignment
				if err := proto.Unmarshal(a.GetValue(), &cla); err != nil {
					return fmt.Errorf("EDS response: %w", err)
				}
				for _, le := range cla.GetEndpoints() {
					for _, e := range le.GetLbEndpoints() {
						addrs = append(addrs, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
					}
				}
			}
		}
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(),
			ResponseNonce: resp.GetNonce(), ResourceNames: clusters}); err != nil {
			return err
		}
		ack := time.Now()
		if len(addrs) == 0 {
			continue
		}
		cs.mu.Lock()
		for _, a := range addrs {
			if _, ok := cs.seen[i][a]; !ok {
				cs.seen[i][a] = ack
			}
		}
		cs.mu.Unlock()
		cs.notify()
	}
}

// await waits until done (called under mu) reports true, a client's
// stream fails, or timeout passes.
func (cs *s6Clients) await(timeout time.Duration, done func() bool) error {
	deadline := time.After(timeout)
	for {
		cs.mu.Lock()
		ok := done()
		err := errors.Join(cs.errs...)
		cs.mu.Unlock()
		switch {
		case ok:
			return nil
		case err != nil:
			return fmt.Errorf("ADS client: %w", err)
		}
		select {
		case <-cs.changed:
		case <-deadline:
			return errors.New("timed out")
		}
	}
}

// awaitSync waits until every client holds endpoints.
func (cs *s6Clients) awaitSync(timeout time.Duration) error {
	err := cs.await(timeout, func() bool {
		for _, m := range cs.seen {
			if len(m) == 0 {
				return false
			}
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("clients did not receive the host's endpoints: %w", err)
	}
	return nil
}

// awaitAddress returns when the last client ACKed a response holding addr.
func (cs *s6Clients) awaitAddress(addr string, timeout time.Duration) (time.Time, bool) {
	var last time.Time
	err := cs.await(timeout, func() bool {
		last = time.Time{}
		for _, m := range cs.seen {
			at, ok := m[addr]
			if !ok {
				return false
			}
			if at.After(last) {
				last = at
			}
		}
		return true
	})
	return last, err == nil
}

func (cs *s6Clients) close() {
	cs.cancel()
	cs.wg.Wait()
	for _, c := range cs.conns {
		c.Close()
	}
}
