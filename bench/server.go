package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/xds"
	"github.com/meshfed/meshfed/xds/translate"
)

// Impl is a control plane under test: meshfed or the baseline.
type Impl interface {
	// Write publishes the registry's full state (the churn driver's write).
	Write(services []model.Service)
	// Ready reports whether the first write is fully served.
	Ready() bool
	Register(g *grpc.Server)
	Close()
}

// Meshfed wires the real aggregate and xds packages exactly as
// gateway.Gateway does (aggregate.New → Subscribe(xds.Server.Update)),
// with one registry shard that the bench churn driver writes through
// Sink.Publish.
type Meshfed struct {
	agg    *aggregate.Aggregator
	xds    *xds.Server
	cancel context.CancelFunc
	done   chan struct{}
}

// NewMeshfed starts the aggregator's Serve loop with the given debounce.
func NewMeshfed(quiet, maxWait time.Duration, log *slog.Logger) *Meshfed {
	agg := aggregate.New(aggregate.Options{
		Registries: []aggregate.RegistryOptions{{Common: commonOf()}},
		Quiet:      quiet,
		MaxWait:    maxWait,
		Logger:     log.With("component", "aggregate"),
	})
	x := xds.NewServer(xds.Options{Logger: log.With("component", "xds")})
	agg.Subscribe(x.Update)
	ctx, cancel := context.WithCancel(context.Background())
	m := &Meshfed{agg: agg, xds: x, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		_ = agg.Serve(ctx)
	}()
	return m
}

// Write implements Impl: a complete state of the bench shard, published.
func (m *Meshfed) Write(services []model.Service) {
	m.agg.Publish(Shard, registries.FullState(services, nil))
}

// Ready implements Impl: the aggregator has applied the first write (as
// the gateway waits for before it serves xDS).
func (m *Meshfed) Ready() bool {
	ok, _ := m.agg.Ready()
	return ok
}

// Register implements Impl.
func (m *Meshfed) Register(g *grpc.Server) { m.xds.Register(g) }

// Close implements Impl.
func (m *Meshfed) Close() {
	m.xds.Close()
	m.cancel()
	<-m.done
}

// GRPCServer returns a gRPC server with the options gateway.Gateway
// uses (no TLS), plus opts (the meshfed bench server passes
// ads.ServerOptions, as the gateway does).
func GRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	return grpc.NewServer(append([]grpc.ServerOption{
		grpc.MaxConcurrentStreams(100000),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}, opts...)...)
}

// Event is one churn write: its sequence number, the service it changed
// and when it was written (Unix ns, taken just before the write).
type Event struct {
	Seq   int64 `json:"seq"`
	Svc   int   `json:"svc"`
	Stamp int64 `json:"stamp"`
}

// Controller is the bench server's churn driver and control API: it owns
// the registry State, stamps and writes every change to the Impl, and
// answers the report's requests on a loopback HTTP listener.
type Controller struct {
	impl Impl

	mu     sync.Mutex
	state  *State
	events []Event
	loaded bool
}

// NewController serves st through impl. With load false, the registry
// first publishes no services (POST /load publishes st).
func NewController(impl Impl, st *State, load bool) *Controller {
	c := &Controller{impl: impl, state: st, loaded: load}
	if load {
		impl.Write(st.Services())
	} else {
		impl.Write(nil)
	}
	return c
}

// WaitReady blocks until the impl serves the first write.
func (c *Controller) WaitReady(ctx context.Context) error {
	for !c.impl.Ready() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// write stamps and publishes the current state. Callers hold mu.
func (c *Controller) write(svc int, seq int64) Event {
	services := c.state.Services()
	ev := Event{Seq: seq, Svc: svc, Stamp: time.Now().UnixNano()}
	c.impl.Write(services)
	c.events = append(c.events, ev)
	return ev
}

// Handler is the control API:
//
//	POST /event?svc=I   flip one endpoint of service I → Event
//	POST /load          publish the full state (servers started empty) → Event
//	POST /churn?rate=R&ramp=D&hold=D&from=I  rolling deploy, blocks until done
//	GET  /events        every Event so far
//	GET  /mem           Go heap after a GC (runtime/metrics)
//	GET  /marshal       marshal accounting (needs -count-marshals)
//	GET  /debug/pprof/… net/http/pprof
func (c *Controller) Handler(marshal func() any) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("POST /event", func(w http.ResponseWriter, r *http.Request) {
		svc, err := strconv.Atoi(r.URL.Query().Get("svc"))
		c.mu.Lock()
		if err != nil || svc < 0 || svc >= c.state.Len() {
			c.mu.Unlock()
			http.Error(w, "bad svc", http.StatusBadRequest)
			return
		}
		ev := c.write(svc, c.state.Flip(svc))
		c.mu.Unlock()
		writeJSON(w, ev)
	})
	mux.HandleFunc("POST /load", func(w http.ResponseWriter, _ *http.Request) {
		c.mu.Lock()
		c.loaded = true
		ev := c.write(-1, c.state.Seq())
		c.mu.Unlock()
		writeJSON(w, ev)
	})
	mux.HandleFunc("POST /churn", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		rate, _ := strconv.ParseFloat(q.Get("rate"), 64)
		ramp, _ := time.ParseDuration(q.Get("ramp"))
		hold, _ := time.ParseDuration(q.Get("hold"))
		from, _ := strconv.Atoi(q.Get("from"))
		if rate <= 0 || hold <= 0 {
			http.Error(w, "need rate and hold", http.StatusBadRequest)
			return
		}
		n := c.churn(r.Context(), rate, ramp, hold, from)
		writeJSON(w, map[string]int{"events": n})
	})
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, _ *http.Request) {
		c.mu.Lock()
		evs := append([]Event(nil), c.events...)
		c.mu.Unlock()
		writeJSON(w, evs)
	})
	mux.HandleFunc("GET /mem", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, ReadMem())
	})
	mux.HandleFunc("GET /marshal", func(w http.ResponseWriter, _ *http.Request) {
		if marshal == nil {
			http.Error(w, "start with -count-marshals", http.StatusNotFound)
			return
		}
		writeJSON(w, marshal())
	})
	return mux
}

// churn runs a rolling deploy: the event rate ramps linearly from 0 to
// rate over ramp, then holds for hold. Each event is one write.
func (c *Controller) churn(ctx context.Context, rate float64, ramp, hold time.Duration, from int) int {
	c.mu.Lock()
	c.state.SetRollFrom(from)
	c.mu.Unlock()
	start := time.Now()
	total := ramp + hold
	done := 0
	tk := time.NewTicker(time.Millisecond)
	defer tk.Stop()
	for {
		el := time.Since(start)
		if el >= total || ctx.Err() != nil {
			return done
		}
		var want float64
		if r := ramp.Seconds(); el < ramp {
			want = rate * el.Seconds() * el.Seconds() / (2 * r)
		} else {
			want = rate*r/2 + rate*(el-ramp).Seconds()
		}
		for float64(done) < want {
			c.mu.Lock()
			svc, seq := c.state.Roll()
			c.write(svc, seq)
			c.mu.Unlock()
			done++
		}
		select {
		case <-ctx.Done():
		case <-tk.C:
		}
	}
}

// MemStats is the Go heap of the bench server.
type MemStats struct {
	// HeapLive is the live heap after two forced GCs (/gc/heap/live:bytes).
	// One GC is not enough: sync.Pool keeps its contents (gRPC's pooled
	// message buffers, up to 1 MiB each) as a victim cache until the next
	// GC, and the mark counts them live.
	HeapLive uint64 `json:"heapLive"`
	// HeapObjects is heap memory occupied by objects, live or not yet
	// swept (/memory/classes/heap/objects:bytes), read after the GC.
	HeapObjects uint64 `json:"heapObjects"`
	// Total is all memory the Go runtime mapped (/memory/classes/total:bytes).
	Total      uint64 `json:"total"`
	Goroutines uint64 `json:"goroutines"`
	// Stacks is the memory of goroutine stacks
	// (/memory/classes/heap/stacks:bytes), not part of the heap figures.
	Stacks uint64 `json:"stacks"`
}

// ReadMem forces two GCs, returns the freed memory to the OS (so that
// the process's RSS, read next, is what it keeps resident rather than
// garbage of the last burst not yet scavenged) and reads runtime/metrics.
func ReadMem() MemStats {
	runtime.GC()
	debug.FreeOSMemory() // a second GC, then scavenge
	s := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/sched/goroutines:goroutines"},
		{Name: "/memory/classes/heap/stacks:bytes"},
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() == metrics.KindUint64 {
			return s[i].Value.Uint64()
		}
		return 0
	}
	return MemStats{HeapLive: v(0), HeapObjects: v(1), Total: v(2), Goroutines: v(3), Stacks: v(4)}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// DistinctResources is how many resources named gRPC-class streams can
// subscribe to for services: one cluster and one CLA per service port.
func DistinctResources(services []model.Service) int64 {
	ptrs := make([]*model.Service, len(services))
	for i := range services {
		ptrs[i] = &services[i]
	}
	tr := translate.NewTranslator()
	tr.Translate(model.NewSnapshot(1, ptrs))
	return int64(len(tr.Resources(translate.KindOf(translate.ClassGRPC, translate.ClusterType))) + len(tr.Resources(translate.KindOf(translate.ClassGRPC, translate.EndpointType))))
}

// Listen listens on a loopback address. Port 0 picks a free port below
// 32768: Linux hands out 32768–60999 to outgoing connections, so a port
// the kernel picks there can collide with a client's now and then.
func Listen(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && port == "0" {
		for range 100 {
			l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(20000+rand.IntN(12000))))
			if err == nil {
				return l, nil
			}
		}
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return l, nil
}

// XDSVersion is the snapshot version the xDS server has translated and
// applied (0 before the first): a write is built once it grows.
func (m *Meshfed) XDSVersion() uint64 { return m.xds.Version() }
