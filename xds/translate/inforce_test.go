package translate

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"testing"

	"github.com/meshfed/meshfed/model"
)

// TestEDSMemberAgreesWithCLA: for random endpoint lists (ports served or
// not, overrides, duplicate address:ports), EDSMember says an endpoint is
// in exactly when the ClusterLoadAssignment built from the list holds its
// address:port, and on that port.
func TestEDSMemberAgreesWithCLA(t *testing.T) {
	t.Parallel()
	p := model.Port{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		eps := make([]model.Endpoint, 1+rng.IntN(8))
		for i := range eps {
			eps[i] = model.Endpoint{Address: fmt.Sprintf("10.0.0.%d", rng.IntN(4)), Locality: model.Locality{Region: []string{"a", "b"}[rng.IntN(2)]}}
			switch rng.IntN(3) {
			case 0:
				eps[i].Ports = map[string]uint32{"grpc": 9000 + uint32(rng.IntN(2))}
			case 1:
				eps[i].Ports = map[string]uint32{"grpc": 0} // does not serve it
			}
		}
		var mc metaCache
		st, err := mc.rebuildCLA("c", eps, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		served := map[string]bool{}
		for _, l := range st.res.message().GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				a := e.GetEndpoint().GetAddress().GetSocketAddress()
				served[net.JoinHostPort(a.GetAddress(), strconv.Itoa(int(a.GetPortValue())))] = true
			}
		}
		inCLA := 0
		for i := range eps {
			port, why := EDSMember(eps, i, p)
			key := net.JoinHostPort(eps[i].Address, strconv.Itoa(int(port)))
			if why == "" {
				inCLA++
				if !served[key] {
					t.Fatalf("round %d: EDSMember says endpoint %d (%s) is in, the CLA lacks it: %+v", round, i, key, eps)
				}
			} else if _, ok := eps[i].PortFor(p); ok && !served[key] {
				t.Fatalf("round %d: endpoint %d (%s) is a duplicate for EDSMember (%s) but its address:port is not served", round, i, key, why)
			}
		}
		if inCLA != len(served) {
			t.Fatalf("round %d: EDSMember counts %d endpoints in, the CLA has %d: %+v", round, inCLA, len(served), eps)
		}
	}
}
