package ads

import (
	"strconv"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
)

// BenchmarkFlipPush is meshfed's own share of one endpoint flip at 1,000
// delta streams × 100 names (bench rows S1 and F, without gRPC): the
// update, then on every stream the wake-up, the push of the one changed
// CLA and the client's ACK. ns/op and allocs/op are per flip.
func BenchmarkFlipPush(b *testing.B) {
	const streams, per = 1000, 100
	s := newTestStore()
	upd := map[string]types.Resource{}
	for i := range per {
		n := "c" + strconv.Itoa(i)
		upd[n] = cla(n, 0)
	}
	applyTo(s, edsKind, upd)
	names := make([]string, 0, per)
	for n := range upd {
		names = append(names, n)
	}
	xs := make([]*testADS, streams)
	for i := range xs {
		x := newTestADS(&testing.T{}, s, true)
		x.deltaReq(&discovery.DeltaDiscoveryRequest{Node: grpcNode("n" + strconv.Itoa(i)), ResourceNamesSubscribe: names})
		x.ack(x.delta[0].GetNonce())
		x.delta = x.delta[:0]
		xs[i] = x
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		applyTo(s, edsKind, map[string]types.Resource{"c0": cla("c0", i+1)})
		for _, x := range xs {
			x.woken()
			r := x.delta[0]
			x.delta = x.delta[:0]
			x.ack(r.GetNonce())
		}
	}
	b.StopTimer()
	for _, x := range xs {
		x.a.close(x.st)
	}
}
