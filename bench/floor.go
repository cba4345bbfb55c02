package bench

import (
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/translate"
)

// Floor is the floor of S1 (issue #16): a bare grpc-go delta ADS server
// with no control-plane logic. It answers each stream's subscriptions with
// the resources meshfed's translator builds, and on a write translates only
// the services whose endpoint slice changed, serializes each changed
// ClusterLoadAssignment's DeltaDiscoveryResponse once and hands the same
// bytes to every stream that subscribed to it, where the stream's own
// goroutine sends them (a raw-bytes codec: no per-stream marshalling). ACKs
// are read and dropped. What it costs per event is what gRPC and the
// kernel cost to send one small message on each of N connections and read
// each ACK back: the part of S1 no control plane can avoid.
type Floor struct {
	mu      sync.Mutex
	res     map[string]map[string]*anypb.Any // type → name → resource
	subs    map[string]map[*floorStream]bool // CLA name → subscribed streams
	prev    []model.Service
	version int64
	ready   atomic.Bool
}

// NewFloor returns an empty floor server.
func NewFloor() *Floor {
	return &Floor{res: map[string]map[string]*anypb.Any{}, subs: map[string]map[*floorStream]bool{}}
}

// FloorServerOptions are the floor's gRPC server options: meshfed's
// transport settings (ads.ServerOptions' flow-control windows) with a codec
// that sends pre-serialized frames as they are.
func FloorServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(rawCodec{std: encoding.GetCodecV2(protoenc.Name)}),
		grpc.InitialWindowSize(1 << 20),
		grpc.InitialConnWindowSize(1 << 20),
	}
}

// rawFrame is a serialized message sent as is.
type rawFrame []byte

type rawCodec struct{ std encoding.CodecV2 }

func (c rawCodec) Name() string { return protoenc.Name }

func (c rawCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.std.Unmarshal(data, v) }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(rawFrame); ok {
		return mem.BufferSlice{mem.SliceBuffer(f)}, nil
	}
	return c.std.Marshal(v)
}

// Write implements Impl.
func (f *Floor) Write(services []model.Service) {
	var changed []*model.Service
	f.mu.Lock()
	for i := range services {
		if i >= len(f.prev) || unsafe.SliceData(f.prev[i].Endpoints) != unsafe.SliceData(services[i].Endpoints) {
			changed = append(changed, &services[i])
		}
	}
	f.prev = services
	f.version++
	ver := strconv.FormatInt(f.version, 10)
	f.mu.Unlock()
	if len(changed) == 0 {
		f.ready.Store(true)
		return
	}
	tr := translate.NewTranslator()
	tr.Translate(model.NewSnapshot(1, changed))
	type frame struct {
		name string
		b    rawFrame
	}
	var frames []frame
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, url := range []string{translate.ClusterType, translate.EndpointType} {
		if f.res[url] == nil {
			f.res[url] = map[string]*anypb.Any{}
		}
		for name, m := range tr.Resources(translate.KindOf(translate.ClassGRPC, url)) {
			a, err := anypb.New(m)
			if err != nil {
				continue
			}
			f.res[url][name] = a
			if url != translate.EndpointType || !f.ready.Load() {
				continue
			}
			b, err := proto.Marshal(&discovery.DeltaDiscoveryResponse{TypeUrl: url, Nonce: ver,
				Resources: []*discovery.Resource{{Name: name, Version: ver, Resource: a}}})
			if err == nil {
				frames = append(frames, frame{name, b})
			}
		}
	}
	for _, fr := range frames {
		for s := range f.subs[fr.name] {
			s.push(fr.b)
		}
	}
	f.ready.Store(true)
}

// Ready implements Impl.
func (f *Floor) Ready() bool { return f.ready.Load() }

// Register implements Impl.
func (f *Floor) Register(g *grpc.Server) {
	discovery.RegisterAggregatedDiscoveryServiceServer(g, floorADS{f: f})
}

// Close implements Impl.
func (f *Floor) Close() {}

type floorADS struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	f *Floor
}

// floorStream is one delta stream: frames queue until its goroutine sends.
type floorStream struct {
	mu    sync.Mutex
	queue []rawFrame
	wake  chan struct{}
}

func (s *floorStream) push(b rawFrame) {
	s.mu.Lock()
	s.queue = append(s.queue, b)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (a floorADS) DeltaAggregatedResources(st discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	f := a.f
	s := &floorStream{wake: make(chan struct{}, 1)}
	var subscribed []string
	defer func() {
		f.mu.Lock()
		for _, n := range subscribed {
			delete(f.subs[n], s)
		}
		f.mu.Unlock()
	}()
	reqs := make(chan *discovery.DeltaDiscoveryRequest, 16)
	errc := make(chan error, 1)
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case reqs <- r:
			case <-st.Context().Done():
				return
			}
		}
	}()
	for {
		select {
		case err := <-errc:
			return err
		case r := <-reqs:
			names := r.GetResourceNamesSubscribe()
			if len(names) == 0 {
				continue // an ACK
			}
			url := r.GetTypeUrl()
			resp := &discovery.DeltaDiscoveryResponse{TypeUrl: url, Nonce: "init"}
			f.mu.Lock()
			for _, n := range names {
				if url == translate.EndpointType {
					if f.subs[n] == nil {
						f.subs[n] = map[*floorStream]bool{}
					}
					f.subs[n][s] = true
					subscribed = append(subscribed, n)
				}
				if res := f.res[url][n]; res != nil {
					resp.Resources = append(resp.Resources, &discovery.Resource{Name: n, Version: "0", Resource: res})
				}
			}
			f.mu.Unlock()
			if err := st.Send(resp); err != nil {
				return err
			}
		case <-s.wake:
			s.mu.Lock()
			q := s.queue
			s.queue = nil
			s.mu.Unlock()
			for _, b := range q {
				if err := st.SendMsg(b); err != nil {
					return err
				}
			}
		case <-st.Context().Done():
			return st.Context().Err()
		}
	}
}
