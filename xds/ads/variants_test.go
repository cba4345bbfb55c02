package ads

import (
	"sync/atomic"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
)

// regionCLA is a Variants resource whose variant is the CLA with every
// locality at priority 1 for clients of region "b".
type regionCLA struct {
	*endpoint.ClusterLoadAssignment
	built atomic.Int32
}

func (r *regionCLA) VariantKey(n *core.Node) string {
	if n.GetLocality().GetRegion() == "b" {
		return "b"
	}
	return ""
}

func (r *regionCLA) Variant(string) types.Resource {
	r.built.Add(1)
	return &endpoint.ClusterLoadAssignment{ClusterName: r.ClusterName, Endpoints: []*endpoint.LocalityLbEndpoints{{Priority: 1}}}
}

// TestVariantWire: a Variants resource is sent as the variant of the
// stream's node, each variant marshalled once; other nodes read the
// resource itself.
func TestVariantWire(t *testing.T) {
	t.Parallel()
	msg := &regionCLA{ClusterLoadAssignment: &endpoint.ClusterLoadAssignment{ClusterName: "c", Endpoints: []*endpoint.LocalityLbEndpoints{{}}}}
	r := newResource(EndpointType, "c", msg)
	nodeB := &core.Node{Locality: &core.Locality{Region: "b"}}
	wb, err := r.wireFor(nodeB)
	if err != nil {
		t.Fatal(err)
	}
	wa, _ := r.wireFor(&core.Node{Locality: &core.Locality{Region: "a"}})
	wn, _ := r.wireFor(nil)
	base, _ := r.wire()
	if wa != base || wn != base {
		t.Error("a node without a variant does not read the resource itself")
	}
	if wb == base || wb.version == base.version {
		t.Fatal("the region-b node reads the resource itself")
	}
	var got endpoint.ClusterLoadAssignment
	if err := wb.any.UnmarshalTo(&got); err != nil || got.GetEndpoints()[0].GetPriority() != 1 || wb.delta.GetName() != "c" {
		t.Errorf("variant sent = %v (%v)", &got, err)
	}
	if again, _ := r.wireFor(&core.Node{Id: "other", Locality: &core.Locality{Region: "b"}}); again != wb || msg.built.Load() != 1 {
		t.Errorf("a second region-b node: same wire %v, variants built %d, want the one variant built once", again == wb, msg.built.Load())
	}
}
