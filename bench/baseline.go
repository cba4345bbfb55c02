package bench

import (
	"context"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/xds/translate"
)

func commonOf() registries.Common {
	return registries.Common{Name: Registry, Kind: Kind, Domain: Domain}
}

// Baseline is a plain go-control-plane control plane: on every change it
// translates the whole model again (a fresh translate.Translator, so every
// resource is a new object, as in a server without incremental
// translation), builds one full snapshot per client class and
// SetSnapshot()s it for every known node of a SnapshotCache. (Building a
// snapshot per node, as some servers do, makes go-control-plane hash every
// resource once per node for delta versions: at 1,000 nodes the first
// sync alone took minutes and 3 GB here, so the baseline shares one.) Writes that arrive while a rebuild runs are
// coalesced into the next rebuild (no debounce timer). Resource shapes are
// meshfed's own (same builders), so bytes compare like for like.
type Baseline struct {
	log   *slog.Logger
	cache cache.SnapshotCache
	srv   serverv3.Server
	ctx   context.Context
	stop  context.CancelFunc
	done  chan struct{}

	mu      sync.Mutex
	pending []model.Service
	dirty   bool
	wake    chan struct{}
	cur     map[translate.Class]*cache.Snapshot
	ver     uint64
	nodes   map[string]translate.Class
	version atomic.Uint64
}

// NewBaseline returns a baseline server with no state.
func NewBaseline(log *slog.Logger) *Baseline {
	ctx, cancel := context.WithCancel(context.Background())
	b := &Baseline{
		log:   log,
		cache: cache.NewSnapshotCache(true, cache.IDHash{}, nil),
		ctx:   ctx,
		stop:  cancel,
		done:  make(chan struct{}),
		wake:  make(chan struct{}, 1),
		nodes: map[string]translate.Class{},
	}
	cb := serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
			b.seen(r.GetNode())
			return nil
		},
		StreamDeltaRequestFunc: func(_ int64, r *discovery.DeltaDiscoveryRequest) error {
			b.seen(r.GetNode())
			return nil
		},
	}
	b.srv = serverv3.NewServer(ctx, b.cache, cb)
	go b.loop()
	return b
}

// seen gives a node that connects for the first time the current snapshot.
func (b *Baseline) seen(n *core.Node) {
	if n == nil {
		return
	}
	id := n.GetId()
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.nodes[id]; ok {
		return
	}
	cl := translate.ClassifyNode(n)
	b.nodes[id] = cl
	if b.cur != nil {
		b.set(id, b.cur[cl])
	}
}

// set gives node id a snapshot. Callers hold mu.
func (b *Baseline) set(id string, snap *cache.Snapshot) {
	if err := b.cache.SetSnapshot(b.ctx, id, snap); err != nil {
		b.log.Error("baseline snapshot", "node", id, "error", err)
	}
}

// Write implements Impl.
func (b *Baseline) Write(services []model.Service) {
	b.mu.Lock()
	b.pending, b.dirty = services, true
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

func (b *Baseline) loop() {
	defer close(b.done)
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-b.wake:
		}
		b.mu.Lock()
		if !b.dirty {
			b.mu.Unlock()
			continue
		}
		services := b.pending
		b.dirty = false
		b.mu.Unlock()
		b.rebuild(services)
	}
}

// rebuild translates everything and sets every node's snapshot.
func (b *Baseline) rebuild(services []model.Service) {
	ptrs := make([]*model.Service, len(services))
	for i := range services {
		s := services[i]
		ptrs[i] = &s
	}
	tr := translate.NewTranslator()
	tr.Translate(model.NewSnapshot(1, ptrs))
	b.mu.Lock()
	b.ver++
	ver := b.ver
	b.mu.Unlock()
	snaps := map[translate.Class]*cache.Snapshot{}
	for _, cl := range []translate.Class{translate.ClassEnvoy, translate.ClassGRPC} {
		res := map[string][]types.Resource{}
		for _, url := range translate.TypeURLs {
			for _, r := range tr.Resources(translate.KindOf(cl, url)) {
				res[url] = append(res[url], r)
			}
		}
		snap, err := cache.NewSnapshot(strconv.FormatUint(ver, 10), res)
		if err != nil {
			b.log.Error("baseline snapshot", "error", err)
			return
		}
		snaps[cl] = snap
	}
	b.mu.Lock()
	b.cur = snaps
	nodes := make(map[string]translate.Class, len(b.nodes))
	for id, cl := range b.nodes {
		nodes[id] = cl
	}
	b.mu.Unlock()
	// Per node, as a plain control plane does; a node connecting meanwhile
	// gets the current snapshot from seen.
	for id, cl := range nodes {
		b.mu.Lock()
		b.set(id, snaps[cl])
		b.mu.Unlock()
		runtime.Gosched()
	}
	b.version.Store(ver)
}

// Ready implements Impl.
func (b *Baseline) Ready() bool { return b.version.Load() > 0 }

// Register implements Impl.
func (b *Baseline) Register(g *grpc.Server) {
	discovery.RegisterAggregatedDiscoveryServiceServer(g, b.srv)
}

// Close implements Impl.
func (b *Baseline) Close() {
	b.stop()
	<-b.done
}

// MarshalStats is the marshal accounting of a server run with
// runtime.MemProfileRate = 1: Calls counts serializations of a resource
// by go-control-plane's cache.MarshalResource (one output-buffer
// allocation each), Bytes their size; Distinct is how many different
// resources the streams subscribe to (named gRPC-class CDS + EDS of every
// service).
type MarshalStats struct {
	Calls    int64 `json:"calls"`
	Bytes    int64 `json:"bytes"`
	Distinct int64 `json:"distinct"`
}

// MarshalAllocs counts the output buffers allocated by proto marshalling
// called from cache.MarshalResource, from the allocation profile (exact
// when runtime.MemProfileRate is 1): one per serialized resource, since
// nested messages are written into their parent's buffer.
func MarshalAllocs() (calls, bytes int64) {
	runtime.GC()
	runtime.GC()
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+100)
		var ok bool
		n, ok = runtime.MemProfile(recs, true)
		if ok {
			recs = recs[:n]
			break
		}
	}
	for _, r := range recs {
		frames := runtime.CallersFrames(r.Stack())
		site := ""
		for {
			f, more := frames.Next()
			if site == "" && !strings.HasPrefix(f.Function, "runtime.") {
				site = f.Function
				if site != "google.golang.org/protobuf/proto.MarshalOptions.marshal" {
					break
				}
			}
			if strings.HasSuffix(f.Function, "pkg/cache/v3.MarshalResource") {
				calls += r.AllocObjects
				bytes += r.AllocBytes
				break
			}
			if !more {
				break
			}
		}
	}
	return calls, bytes
}
