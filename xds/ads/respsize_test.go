package ads

import (
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestFitResponse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                    string
		sizes                   []int
		splittable              bool
		send, deferred, rejects []int
		bytes                   int
	}{
		{"fits", []int{10, 20, 30}, true, []int{0, 1, 2}, nil, nil, 70},
		{"split keeps order", []int{40, 40, 10, 5}, true, []int{0, 1, 2}, []int{3}, nil, 100},
		{"too large alone", []int{10, 200, 20}, true, []int{0, 2}, nil, []int{1}, 40},
		{"first too large, rest split", []int{200, 60, 60}, true, []int{1}, []int{2}, []int{0}, 70},
		{"full state is sent whole", []int{60, 60, 20}, false, []int{0, 1, 2}, nil, nil, 150},
		{"full state keeps a resource too large alone", []int{60, 200, 20}, false, []int{0, 1, 2}, nil, nil, 290},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fitResponse(tc.sizes, 10, 100, tc.splittable)
			if !slices.Equal(f.send, tc.send) || !slices.Equal(f.deferred, tc.deferred) || !slices.Equal(f.rejected, tc.rejects) || f.bytes != tc.bytes {
				t.Errorf("fitResponse = %+v, want send %v deferred %v rejected %v bytes %d", f, tc.send, tc.deferred, tc.rejects, tc.bytes)
			}
		})
	}
}

func TestSizeLimitedClients(t *testing.T) {
	t.Parallel()
	grpcMD, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc"})
	for _, tc := range []struct {
		node *core.Node
		want bool
	}{
		{&core.Node{UserAgentName: "gRPC Go"}, true},
		{&core.Node{UserAgentName: "gRPC Java"}, true},
		{&core.Node{Metadata: grpcMD}, true},
		{&core.Node{UserAgentName: "envoy"}, false},
		{&core.Node{}, false},
		{nil, false},
	} {
		if got := sizeLimited(tc.node); got != tc.want {
			t.Errorf("sizeLimited(%v) = %v, want %v", tc.node, got, tc.want)
		}
	}
}
