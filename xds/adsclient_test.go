package xds

import (
	"context"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	mcp "istio.io/api/mcp/v1alpha1"

	"github.com/meshfed/meshfed/test/servers"
	"github.com/meshfed/meshfed/xds/ads"
	"github.com/meshfed/meshfed/xds/translate"
)

const waitFor = 15 * time.Second

// startServer runs srv's ADS on 127.0.0.1:0 until the test ends.
func startServer(t *testing.T, srv *Server) string {
	t.Helper()
	lis := servers.LowListener(t)
	g := grpc.NewServer(ads.ServerOptions()...)
	srv.Register(g)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Close()
		g.Stop()
		<-done
	})
	return lis.Addr().String()
}

// message is one response a test client received, decoded.
type message struct {
	typeURL   string
	version   string
	nonce     string
	resources map[string]proto.Message
	removed   []string
}

func (m message) names() []string {
	var out []string
	for n := range m.resources {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// adsClient is a real ADS client over the generated discovery client, SotW
// or Delta, that records what it holds per type.
type adsClient struct {
	t     *testing.T
	delta bool
	node  *core.Node
	sotw  discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	dstr  discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	msgs  chan message
	subs  map[string][]string // sotw: current resource_names per type
	acked map[string]string   // sotw: last accepted version per type
	state map[string]map[string]proto.Message
}

func envoyNode(id string) *core.Node { return &core.Node{Id: id, Cluster: "test"} }

func grpcNode(id string) *core.Node {
	md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc"})
	return &core.Node{Id: id, Metadata: md}
}

func dialADS(t *testing.T, addr string, node *core.Node, delta bool, opts ...grpc.DialOption) *adsClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &adsClient{t: t, delta: delta, node: node, msgs: make(chan message, 100),
		subs: map[string][]string{}, acked: map[string]string{}, state: map[string]map[string]proto.Message{}}
	cl := discovery.NewAggregatedDiscoveryServiceClient(conn)
	if delta {
		c.dstr, err = cl.DeltaAggregatedResources(ctx)
	} else {
		c.sotw, err = cl.StreamAggregatedResources(ctx)
	}
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(c.msgs)
		for {
			m, err := c.recv()
			if err != nil {
				return
			}
			select {
			case c.msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		conn.Close()
	})
	return c
}

func decode(t *testing.T, a *anypb.Any) (string, proto.Message) {
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Errorf("decode %s: %v", a.GetTypeUrl(), err)
		return "", nil
	}
	if r, ok := m.(*mcp.Resource); ok {
		return r.GetMetadata().GetName(), m
	}
	return cache.GetResourceName(m), m
}

func (c *adsClient) recv() (message, error) {
	if c.delta {
		r, err := c.dstr.Recv()
		if err != nil {
			return message{}, err
		}
		m := message{typeURL: r.GetTypeUrl(), version: r.GetSystemVersionInfo(), nonce: r.GetNonce(),
			resources: map[string]proto.Message{}, removed: r.GetRemovedResources()}
		for _, res := range r.GetResources() {
			_, msg := decode(c.t, res.GetResource())
			m.resources[res.GetName()] = msg
		}
		return m, nil
	}
	r, err := c.sotw.Recv()
	if err != nil {
		return message{}, err
	}
	m := message{typeURL: r.GetTypeUrl(), version: r.GetVersionInfo(), nonce: r.GetNonce(), resources: map[string]proto.Message{}}
	for _, a := range r.GetResources() {
		n, msg := decode(c.t, a)
		m.resources[n] = msg
	}
	return m, nil
}

// subscribe asks for names of typeURL (none: wildcard).
func (c *adsClient) subscribe(typeURL string, names ...string) {
	c.t.Helper()
	var err error
	if c.delta {
		err = c.dstr.Send(&discovery.DeltaDiscoveryRequest{Node: c.node, TypeUrl: typeURL, ResourceNamesSubscribe: names})
	} else {
		c.subs[typeURL] = names
		err = c.sotw.Send(&discovery.DiscoveryRequest{Node: c.node, TypeUrl: typeURL, ResourceNames: names})
	}
	if err != nil {
		c.t.Fatalf("subscribe %s: %v", typeURL, err)
	}
}

// answer ACKs m, or NACKs it when nackMsg is not empty.
func (c *adsClient) answer(m message, nackMsg string) {
	c.t.Helper()
	var detail *status.Status
	if nackMsg != "" {
		detail = &status.Status{Code: 3, Message: nackMsg}
	}
	var err error
	if c.delta {
		err = c.dstr.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: m.typeURL, ResponseNonce: m.nonce, ErrorDetail: detail})
	} else {
		version := m.version
		if detail != nil {
			version = c.acked[m.typeURL]
		} else {
			c.acked[m.typeURL] = version
		}
		err = c.sotw.Send(&discovery.DiscoveryRequest{TypeUrl: m.typeURL, VersionInfo: version,
			ResponseNonce: m.nonce, ResourceNames: c.subs[m.typeURL], ErrorDetail: detail})
	}
	if err != nil {
		c.t.Fatalf("answer %s: %v", m.typeURL, err)
	}
}

// apply records what the client holds after an accepted response.
func (c *adsClient) apply(m message) {
	st := c.state[m.typeURL]
	if st == nil || (!c.delta && (cache.ResourceRequiresFullStateInSotw(m.typeURL) || translate.IsMCPType(m.typeURL))) {
		st = map[string]proto.Message{}
		c.state[m.typeURL] = st
	}
	for n, r := range m.resources {
		st[n] = r
	}
	for _, n := range m.removed {
		delete(st, n)
	}
}

// next returns the next response, failing the test after waitFor.
func (c *adsClient) next() message {
	c.t.Helper()
	select {
	case m, ok := <-c.msgs:
		if !ok {
			c.t.Fatal("stream ended")
		}
		return m
	case <-time.After(waitFor):
		c.t.Fatal("no response in time")
	}
	return message{}
}

// until answers responses (NACKing the types in nack) until cond holds on
// the accepted state; it returns the responses seen.
func (c *adsClient) until(cond func(state map[string]map[string]proto.Message) bool, nack map[string]string) []message {
	c.t.Helper()
	var seen []message
	for !cond(c.state) {
		seen = append(seen, c.step(nack))
	}
	return seen
}

// step reads the next response and answers it (NACKing the types in nack).
func (c *adsClient) step(nack map[string]string) message {
	c.t.Helper()
	m := c.next()
	if msg := nack[m.typeURL]; msg != "" {
		c.answer(m, msg)
		return m
	}
	c.apply(m)
	c.answer(m, "")
	return m
}

// holds is a condition: the client holds exactly names of typeURL.
func holds(typeURL string, names ...string) func(map[string]map[string]proto.Message) bool {
	want := slices.Sorted(slices.Values(names))
	return func(st map[string]map[string]proto.Message) bool {
		var got []string
		for n := range st[typeURL] {
			got = append(got, n)
		}
		slices.Sort(got)
		return slices.Equal(got, want)
	}
}

func all(conds ...func(map[string]map[string]proto.Message) bool) func(map[string]map[string]proto.Message) bool {
	return func(st map[string]map[string]proto.Message) bool {
		for _, c := range conds {
			if !c(st) {
				return false
			}
		}
		return true
	}
}

// eventually polls cond until it holds or waitFor passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
