package ads

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshfed/meshfed/test/servers"
)

// TestStreamsShareOneEncoding: SotW and delta streams sent the same
// resource get the same bytes, encoded once. The codec frames every
// stream's response around that one encoding (referenced, not copied),
// and what the streams' clients decode is identical and valid.
func TestStreamsShareOneEncoding(t *testing.T) {
	t.Parallel()
	s := newTestStore()
	applyTo(s, edsKind, map[string]types.Resource{"a": cla("a", 1)})
	var xs []*testADS
	for _, delta := range []bool{true, true, false, false} {
		x := newTestADS(t, s, delta)
		if delta {
			x.deltaReq(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"a"}})
		} else {
			x.sotwReq(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a"}})
		}
		xs = append(xs, x)
	}
	cd := codec{std: encoding.GetCodecV2(protoenc.Name)}
	var first []byte // the resource's encoding in the first response
	for i, x := range xs {
		var msg proto.Message
		var a *anypb.Any
		if x.st.delta {
			if len(x.delta) != 1 || len(x.delta[0].GetResources()) != 1 {
				t.Fatalf("stream %d: %d delta responses, want one with one resource", i, len(x.delta))
			}
			msg, a = x.delta[0], x.delta[0].GetResources()[0].GetResource()
		} else {
			if len(x.sotw) != 1 || len(x.sotw[0].GetResources()) != 1 {
				t.Fatalf("stream %d: %d SotW responses, want one with one resource", i, len(x.sotw))
			}
			msg, a = x.sotw[0], x.sotw[0].GetResources()[0]
		}
		if first == nil {
			first = a.GetValue()
		}
		if &a.GetValue()[0] != &first[0] {
			t.Errorf("stream %d: the resource was encoded again, want the first stream's bytes", i)
		}
		out, err := cd.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		referenced := false
		for _, b := range out {
			if d := b.ReadOnlyData(); len(d) == len(first) && &d[0] == &first[0] {
				referenced = true
			}
		}
		if !referenced {
			t.Errorf("stream %d: the framed response copied the resource, want it referenced", i)
		}
		back := msg.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(out.Materialize(), back); err != nil {
			t.Fatal(err)
		}
		out.Free()
		var got *anypb.Any
		if x.st.delta {
			got = back.(*discovery.DeltaDiscoveryResponse).GetResources()[0].GetResource()
		} else {
			got = back.(*discovery.DiscoveryResponse).GetResources()[0]
		}
		if !bytes.Equal(got.GetValue(), first) {
			t.Errorf("stream %d: the client decodes other bytes than the first stream's", i)
		}
		c := &endpoint.ClusterLoadAssignment{}
		if err := got.UnmarshalTo(c); err != nil || c.ValidateAll() != nil || c.GetClusterName() != "a" {
			t.Errorf("stream %d: decoded %v (%v), validate %v", i, c, err, c.ValidateAll())
		}
	}
}

// TestServerOptionsServeSotwAndDelta: a server built with ServerOptions
// (the framing codec, fixed windows, gRPC's pooled buffers) serves
// grpc-go SotW and delta clients on one connection each, several
// responses in a row, each decoding to valid resources. The flip goes to
// both streams from one encoding: their resource bytes are equal.
func TestServerOptionsServeSotwAndDelta(t *testing.T) {
	t.Parallel()
	srv := NewServer(Config{Collections: testCollections})
	big := &endpoint.ClusterLoadAssignment{ClusterName: "a"}
	for i := range 2000 { // a response over the 32 KiB write buffer
		big.Endpoints = append(big.Endpoints, &endpoint.LocalityLbEndpoints{Priority: uint32(i % 7),
			Locality: &core.Locality{Region: "region-of-a-long-name", Zone: strconv.Itoa(i)}})
	}
	srv.Apply(Changes{edsKind: {Updated: map[string]types.Resource{"a": big, "b": cla("b", 1)}}})
	g := grpc.NewServer(ServerOptions()...)
	srv.Register(g)
	lis := servers.LowListener(t)
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(lis) }()
	defer func() { srv.Close(); g.Stop(); <-served }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dial := func() discovery.AggregatedDiscoveryServiceClient {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return discovery.NewAggregatedDiscoveryServiceClient(conn)
	}
	ds, err := dial().DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := dial().StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ds.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	if err := ss.Send(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	// check decodes and validates every CLA of a response; it returns
	// their encodings by name.
	check := func(who string, as []*anypb.Any) map[string][]byte {
		t.Helper()
		out := map[string][]byte{}
		for _, a := range as {
			c := &endpoint.ClusterLoadAssignment{}
			if err := a.UnmarshalTo(c); err != nil {
				t.Fatalf("%s: %v", who, err)
			}
			if err := c.ValidateAll(); err != nil {
				t.Errorf("%s: %s: %v", who, c.GetClusterName(), err)
			}
			out[c.GetClusterName()] = a.GetValue()
		}
		return out
	}
	for v := 2; v <= 4; v++ {
		dr, err := ds.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var das []*anypb.Any
		for _, r := range dr.GetResources() {
			das = append(das, r.GetResource())
		}
		sr, err := ss.Recv()
		if err != nil {
			t.Fatal(err)
		}
		dg, sg := check("delta", das), check("sotw", sr.GetResources())
		if len(dg) == 0 || len(dg) != len(sg) {
			t.Fatalf("response %d: delta sent %d CLAs, SotW %d", v, len(dg), len(sg))
		}
		for name, b := range dg {
			if !bytes.Equal(b, sg[name]) {
				t.Errorf("response %d: %s differs between the streams", v, name)
			}
		}
		if v == 2 && (len(dg["a"]) < 32<<10 || len(dg) != 2) {
			t.Errorf("first response: %d CLAs, a is %d bytes, want both and a over 32 KiB", len(dg), len(dg["a"]))
		}
		if err := ds.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: dr.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		if err := ss.Send(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a", "b"},
			VersionInfo: sr.GetVersionInfo(), ResponseNonce: sr.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		srv.Apply(Changes{edsKind: {Updated: map[string]types.Resource{"b": cla("b", v)}}})
	}
}
