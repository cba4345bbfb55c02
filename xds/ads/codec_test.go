package ads

import (
	"bytes"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestCodecMatchesProtoMarshal: the framed encoding is byte for byte
// proto.Marshal's, and the resources' bytes are referenced, not copied.
func TestCodecMatchesProtoMarshal(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte{0x0a, 0x01, 'x'}, 100) // a valid, non-trivial value
	a1 := &anypb.Any{TypeUrl: EndpointType, Value: big}
	a2 := &anypb.Any{TypeUrl: EndpointType, Value: []byte{0x0a, 0x01, 'y'}}
	cd := codec{std: encoding.GetCodecV2(protoenc.Name)}
	for _, tc := range []struct {
		name   string
		msg    proto.Message
		framed bool // takes the framed path
	}{
		{name: "delta", framed: true, msg: &discovery.DeltaDiscoveryResponse{SystemVersionInfo: "7", TypeUrl: EndpointType, Nonce: "12",
			Resources:        []*discovery.Resource{{Name: "a", Version: "v1", Resource: a1}, {Name: "b", Resource: a2}},
			RemovedResources: []string{"c", "d"}}},
		{name: "delta empty", framed: true, msg: &discovery.DeltaDiscoveryResponse{TypeUrl: ClusterType, Nonce: "1"}},
		{name: "delta with ttl", framed: false, msg: &discovery.DeltaDiscoveryResponse{Nonce: "1",
			Resources: []*discovery.Resource{{Name: "a", Resource: a1, Ttl: durationpb.New(1)}}}},
		{name: "sotw", framed: true, msg: &discovery.DiscoveryResponse{VersionInfo: "3", TypeUrl: EndpointType, Nonce: "4",
			Resources: []*anypb.Any{a1, a2}}},
		{name: "sotw empty", framed: true, msg: &discovery.DiscoveryResponse{VersionInfo: "3", TypeUrl: ListenerType, Nonce: "4"}},
		{name: "sotw canary", framed: false, msg: &discovery.DiscoveryResponse{Canary: true, Resources: []*anypb.Any{a1}}},
		{name: "request", framed: false, msg: &discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResourceNamesSubscribe: []string{"x"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := proto.Marshal(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := cd.Marshal(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			if b := got.Materialize(); !bytes.Equal(b, want) {
				t.Errorf("encoding differs from proto.Marshal:\n got %x\nwant %x", b, want)
			}
			shared := false
			for _, buf := range got {
				if d := buf.ReadOnlyData(); len(d) == len(big) && &d[0] == &big[0] {
					shared = true
				}
			}
			if tc.framed && bytes.Contains(want, big) && !shared {
				t.Error("the resource bytes were copied, want them referenced")
			}
			got.Free()
			// Round trip through the standard decoder.
			back := tc.msg.ProtoReflect().New().Interface()
			if err := cd.Unmarshal(mustEncode(t, cd, tc.msg), back); err != nil || !proto.Equal(back, tc.msg) {
				t.Errorf("round trip: %v, equal %v", err, proto.Equal(back, tc.msg))
			}
		})
	}
}

func mustEncode(t *testing.T, c codec, m proto.Message) mem.BufferSlice {
	t.Helper()
	b, err := c.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
