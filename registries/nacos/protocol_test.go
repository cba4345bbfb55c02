package nacos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	nacospb "github.com/nacos-group/nacos-sdk-go/v2/api/grpc"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshfed/meshfed/registries/registrytest"
)

// scriptedNacos is a Nacos 2.x gRPC server for what Polaris never does:
// it pushes what a test tells it to (stale pushes, ConnectResetRequest,
// ClientDetectionRequest) and records the client's acknowledgements. Its
// one service "echo" has the instances in hosts.
type scriptedNacos struct {
	nacospb.UnimplementedRequestServer
	nacospb.UnimplementedBiRequestStreamServer

	mu      sync.Mutex
	hosts   []instance
	refTime int64
	streams []grpc.BidiStreamingServer[nacospb.Payload, nacospb.Payload]
	acks    []string // "<type> <requestId>"
	setups  int
	changed chan struct{}
}

func (f *scriptedNacos) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func payload(typ string, body any) *nacospb.Payload {
	b, _ := json.Marshal(body)
	return &nacospb.Payload{Metadata: &nacospb.Metadata{Type: typ}, Body: &anypb.Any{Value: b}}
}

func (f *scriptedNacos) Request(_ context.Context, p *nacospb.Payload) (*nacospb.Payload, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ok := response{ResultCode: 200}
	switch p.GetMetadata().GetType() {
	case typeServerCheck:
		return payload("ServerCheckResponse", struct {
			response
			ConnectionID string `json:"connectionId"`
		}{ok, "c1"}), nil
	case typeHealthCheck:
		return payload("HealthCheckResponse", ok), nil
	case typeServiceList:
		return payload("ServiceListResponse", struct {
			response
			Count        int      `json:"count"`
			ServiceNames []string `json:"serviceNames"`
		}{ok, 1, []string{"echo"}}), nil
	case typeSubscribe:
		return payload("SubscribeServiceResponse", struct {
			response
			ServiceInfo serviceInfo `json:"serviceInfo"`
		}{ok, serviceInfo{Name: "echo", GroupName: DefaultGroup, Hosts: f.hosts, LastRefTime: f.refTime}}), nil
	}
	return payload(typeErrorResponse, response{ResultCode: 500, ErrorCode: 501, Message: "unknown request"}), nil
}

func (f *scriptedNacos) RequestBiStream(s grpc.BidiStreamingServer[nacospb.Payload, nacospb.Payload]) error {
	for {
		p, err := s.Recv()
		if err != nil {
			return err
		}
		f.mu.Lock()
		switch typ := p.GetMetadata().GetType(); typ {
		case typeConnectionSetup:
			f.setups++
			f.streams = append(f.streams, s)
		default:
			var r response
			_ = json.Unmarshal(p.GetBody().GetValue(), &r)
			f.acks = append(f.acks, typ+" "+r.RequestID)
		}
		f.notify()
		f.mu.Unlock()
	}
}

// send sends a server request on the newest stream.
func (f *scriptedNacos) send(t *testing.T, typ string, body any) {
	t.Helper()
	f.mu.Lock()
	s := f.streams[len(f.streams)-1]
	f.mu.Unlock()
	if err := s.Send(payload(typ, body)); err != nil {
		t.Fatal(err)
	}
}

// waitFor waits until cond holds on the server's records.
func (f *scriptedNacos) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(visible)
	for {
		f.mu.Lock()
		ok, ch := cond(), f.changed
		f.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func startScripted(t *testing.T, hosts []instance) (*scriptedNacos, string) {
	t.Helper()
	f := &scriptedNacos{hosts: hosts, refTime: 100, changed: make(chan struct{})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	nacospb.RegisterRequestServer(srv, f)
	nacospb.RegisterBiRequestStreamServer(srv, f)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return f, "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// TestProtocolPushesResetAndDetection: pushes are acknowledged with their
// request id and applied, a push older than the state applied (by
// lastRefTime) is ignored, the server's liveness check is answered, and a
// ConnectResetRequest makes the registry connect again and read the state
// anew.
func TestProtocolPushesResetAndDetection(t *testing.T) {
	t.Parallel()
	host := func(ip string) instance {
		return instance{InstanceID: ip, IP: ip, Port: 8080, Weight: 1, Healthy: yes, Enabled: yes}
	}
	f, addr := startScripted(t, []instance{host("10.1.0.1")})
	reg := newRegistry(t, "scripted", Config{Servers: []string{addr}})
	reg.cfg.GRPCPortOffset = 0 // addr is the gRPC port itself
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	sink.WaitFor(t, visible, hasEndpoints("echo.nacos", "http", "10.1.0.1:8080/HEALTHY/100"))
	f.waitFor(t, "connection setup", func() bool { return f.setups == 1 })

	push := func(id string, ref int64, ips ...string) {
		var hosts []instance
		for _, ip := range ips {
			hosts = append(hosts, host(ip))
		}
		f.send(t, typeNotifySubscriber, notifyRequest{
			namingRequest: namingRequest{RequestID: id, Module: "naming", Namespace: "public", ServiceName: "echo", GroupName: DefaultGroup},
			ServiceInfo:   serviceInfo{Name: "echo", GroupName: DefaultGroup, Hosts: hosts, LastRefTime: ref},
		})
	}
	push("p1", 200, "10.1.0.1", "10.1.0.2")
	sink.WaitFor(t, visible, hasEndpoints("echo.nacos", "http", "10.1.0.1:8080/HEALTHY/100", "10.1.0.2:8080/HEALTHY/100"))
	// Older than p1: ignored; p3 then shows it was read and skipped.
	push("p2", 150, "10.1.0.9")
	push("p3", 300, "10.1.0.3")
	sink.WaitFor(t, visible, hasEndpoints("echo.nacos", "http", "10.1.0.3:8080/HEALTHY/100"))
	for _, s := range sink.State(reg.common.Shard()).Services {
		for _, e := range s.Endpoints {
			if e.Address == "10.1.0.9" {
				t.Errorf("stale push applied: %v", e)
			}
		}
	}
	f.send(t, typeClientDetection, internalRequest{RequestID: "d1", Module: "internal"})
	f.waitFor(t, "acks", func() bool {
		want := map[string]bool{typeNotifySubscriberAck + " p1": true, typeNotifySubscriberAck + " p2": true,
			typeNotifySubscriberAck + " p3": true, typeClientDetectionAck + " d1": true}
		for _, a := range f.acks {
			delete(want, a)
		}
		return len(want) == 0
	})

	// Reset: the registry connects again and subscribes anew, so the
	// server's current list (changed meanwhile, no push) is published.
	f.mu.Lock()
	f.hosts, f.refTime = []instance{host("10.1.0.4")}, 50 // the new connection's clock may be behind
	f.mu.Unlock()
	f.send(t, typeConnectReset, internalRequest{RequestID: "r1", Module: "internal"})
	f.waitFor(t, "second connection", func() bool { return f.setups == 2 })
	sink.WaitFor(t, visible, hasEndpoints("echo.nacos", "http", "10.1.0.4:8080/HEALTHY/100"))
	if n := sink.Replaces(reg.common.Shard()); n != 4 {
		t.Errorf("%d Replaces, want 4 (start, p1, p3, after the reset)", n)
	}
}

// TestListAllUnstablePages: a server that orders its services differently
// on every call (Polaris 1.18: its cache's map order) makes pages overlap;
// listAll still returns every wanted service once.
func TestListAllUnstablePages(t *testing.T) {
	t.Parallel()
	var all []string
	for i := range 1200 {
		all = append(all, fmt.Sprintf("svc-%d", i))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	calls := 0
	fetch := func(pageNo, pageSize int) ([]string, int, error) {
		calls++
		order := slices.Clone(all)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		from := min((pageNo-1)*pageSize, len(order))
		return order[from:min(from+pageSize, len(order))], len(order), nil
	}
	got, err := listAll(func(n string) bool { return n != "svc-7" }, fetch)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	want := slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == "svc-7" })
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("got %d names, want the %d wanted ones", len(got), len(want))
	}
	if calls != 4 { // three pages, then one page of all
		t.Errorf("%d list calls, want 4", calls)
	}
}
