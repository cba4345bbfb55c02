package translate

import (
	"math"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/model"
)

// Locality weights are the sums of their endpoints' weights, uncapped, so
// large localities keep their proportions (they were capped at 2^24).
func TestLocalityWeightsKeepProportions(t *testing.T) {
	t.Parallel()
	tr := NewTranslator()
	tr.Translate(model.NewSnapshot(1, []*model.Service{{
		Hostname: "a.test", Ports: []model.Port{{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}},
		Endpoints: []model.Endpoint{
			{Address: "10.0.0.1", Weight: 1 << 30, Locality: model.Locality{Region: "r1"}},
			{Address: "10.0.0.2", Weight: 1 << 29, Locality: model.Locality{Region: "r2"}},
			{Address: "10.0.0.3", Weight: 1 << 29, Locality: model.Locality{Region: "r2"}},
			{Address: "10.0.0.4", Weight: 3, Locality: model.Locality{Region: "r3"}},
		},
	}}))
	cla := tr.Resources(Kind{TypeURL: EndpointType})[ClusterName("a.test", 8080)].(*claResource)
	got := map[string]uint32{}
	for _, l := range cla.GetEndpoints() {
		got[l.GetLocality().GetRegion()] = l.GetLoadBalancingWeight().GetValue()
	}
	if got["r1"] != 1<<30 || got["r2"] != 1<<30 || got["r3"] != 3 {
		t.Errorf("locality weights = %v, want r1=r2=2^30, r3=3", got)
	}
}

// Defence in depth: fed weights the gate would have scaled, translation
// leaves the service out rather than serve a CLA clients reject.
func TestTranslationRefusesWeightSumsClientsReject(t *testing.T) {
	t.Parallel()
	for name, eps := range map[string][]model.Endpoint{
		"one locality": {
			{Address: "10.0.0.1", Weight: math.MaxUint32}, {Address: "10.0.0.2", Weight: math.MaxUint32},
		},
		"across localities": {
			{Address: "10.0.0.1", Weight: math.MaxUint32, Locality: model.Locality{Region: "r1"}},
			{Address: "10.0.0.2", Weight: math.MaxUint32, Locality: model.Locality{Region: "r2"}},
		},
	} {
		tr := NewTranslator()
		tr.Translate(model.NewSnapshot(1, []*model.Service{{
			Hostname: "a.test", Ports: []model.Port{{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}}, Endpoints: eps,
		}}))
		inv := tr.Invalid()
		if len(inv) != 1 || inv[0].Host != "a.test" || !strings.Contains(inv[0].Error, "4294967295") {
			t.Errorf("%s: invalid = %v, want a.test left out naming the bound", name, inv)
		}
		if n := len(tr.Resources(Kind{TypeURL: EndpointType})); n != 0 {
			t.Errorf("%s: %d CLAs served", name, n)
		}
	}
}
