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
	"syscall"
	"testing"
	"time"

	nacospb "github.com/nacos-group/nacos-sdk-go/v2/api/grpc"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
	"github.com/meshfed/meshfed/test/servers"
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
	// services, when set, are listed (in a new order on every call, as
	// Polaris 1.18 does) beside "echo", each with one instance.
	services []string
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
		if f.services != nil {
			var req serviceListRequest
			_ = json.Unmarshal(p.GetBody().GetValue(), &req)
			order := slices.Clone(f.services)
			rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			from := min(max(0, req.PageNo-1)*req.PageSize, len(order))
			return payload("ServiceListResponse", struct {
				response
				Count        int      `json:"count"`
				ServiceNames []string `json:"serviceNames"`
			}{ok, len(order), order[from:min(from+req.PageSize, len(order))]}), nil
		}
		return payload("ServiceListResponse", struct {
			response
			Count        int      `json:"count"`
			ServiceNames []string `json:"serviceNames"`
		}{ok, 1, []string{"echo"}}), nil
	case typeSubscribe:
		var req subscribeRequest
		_ = json.Unmarshal(p.GetBody().GetValue(), &req)
		if req.ServiceName != "echo" {
			return payload("SubscribeServiceResponse", struct {
				response
				ServiceInfo serviceInfo `json:"serviceInfo"`
			}{ok, serviceInfo{Name: req.ServiceName, GroupName: DefaultGroup, Hosts: []instance{{InstanceID: "i", IP: "10.2.0.1", Port: 8080, Weight: 1, Healthy: yes, Enabled: yes}}, LastRefTime: 100}}), nil
		}
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

func startScripted(t testing.TB, hosts []instance) (*scriptedNacos, string) {
	t.Helper()
	f := &scriptedNacos{hosts: hosts, refTime: 100, changed: make(chan struct{})}
	l := servers.LowListener(t)
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
	var whole int
	got, err := listAll(func(n string) bool { return n != "svc-7" }, &whole, fetch)
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
	// Remembered: the next list is one page, and one more when the
	// server holds more services than last time.
	for _, more := range []int{0, 30} {
		for i := range more {
			all = append(all, fmt.Sprintf("new-%d", i))
		}
		calls = 0
		got, err = listAll(func(string) bool { return true }, &whole, fetch)
		if want := 1 + min(1, more); err != nil || len(got) != len(all) || calls != want {
			t.Errorf("%d more: %d names in %d calls (%v), want %d in %d", more, len(got), calls, err, len(all), want)
		}
	}
}

// BenchmarkListAtSize: the registry's periodic read of the service list
// (every listInterval, 10s by default) against a server listing size
// services in pages whose order changes on every call (Polaris 1.18).
// One op is one list read and what the registry does with it; the fake
// server runs in this process, so its CPU is included.
func BenchmarkListAtSize(b *testing.B) {
	for _, size := range []int{1000, 10000} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			f, addr := startScripted(b, nil)
			for i := range size {
				f.services = append(f.services, fmt.Sprintf("svc-%d", i))
			}
			reg := registrytest.NewRegistry[*Registry](b, &Config{Servers: []string{addr}, ListInterval: registries.Duration(100 * time.Millisecond)},
				registries.Common{Name: "bench", Kind: "nacos", Domain: "nacos"}, registrytest.Logger())
			reg.cfg.GRPCPortOffset = 0
			sink := registrytest.NewSink()
			registrytest.Start(b, reg, sink)
			sink.WaitFor(b, time.Minute, func(st registrytest.State) bool { return len(st.Services) == size })
			lists := func() float64 { return counterValue(reg.m.list.OK) }
			n0, cpu0 := lists(), processCPU()
			b.ResetTimer()
			for deadline := time.Now().Add(5 * time.Minute); lists() < n0+float64(b.N) && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			b.ReportMetric(float64(processCPU()-cpu0)/1e6/(lists()-n0), "cpu-ms/list")
		})
	}
}

// processCPU is this process's user+system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// counterValue reads a prometheus counter.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}
