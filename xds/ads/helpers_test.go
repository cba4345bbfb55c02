package ads

import (
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The collections of these tests are meshfed's Envoy ones (xds/translate
// describes them for the real server): CDS, LDS and RDS per class, EDS
// shared, in the order Envoy applies them.
const (
	ClusterType  = resource.ClusterType
	EndpointType = resource.EndpointType
	ListenerType = resource.ListenerType
	RouteType    = resource.RouteType

	ClassEnvoy Class = "envoy"
	ClassGRPC  Class = "grpc"
)

// KindOf is the collection a class reads: EDS is shared.
func KindOf(c Class, typeURL string) Kind {
	if typeURL == EndpointType {
		return Kind{TypeURL: typeURL}
	}
	return Kind{Class: c, TypeURL: typeURL}
}

var testCollections = func() []Collection {
	var out []Collection
	for _, u := range []string{ClusterType, EndpointType, ListenerType, RouteType} {
		for _, c := range []Class{ClassEnvoy, ClassGRPC} {
			k := KindOf(c, u)
			if len(out) > 0 && out[len(out)-1].Kind == k {
				continue
			}
			out = append(out, Collection{Kind: k, FullState: cache.ResourceRequiresFullStateInSotw(u)})
		}
	}
	return out
}()

func newTestStore() *store { return newStore(testCollections) }

// testClassify is meshfed's rule: GENERATOR=grpc is a proxyless client.
func testClassify(n *core.Node) Class {
	if strings.EqualFold(n.GetMetadata().GetFields()["GENERATOR"].GetStringValue(), "grpc") {
		return ClassGRPC
	}
	return ClassEnvoy
}

func grpcNode(id string) *core.Node {
	return &core.Node{Id: id, Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{"GENERATOR": structpb.NewStringValue("grpc")}}}
}

// decode returns the name and message of a resource sent.
func decode(t *testing.T, a *anypb.Any) (string, proto.Message) {
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Errorf("decode %s: %v", a.GetTypeUrl(), err)
		return "", nil
	}
	return cache.GetResourceName(m), m
}
