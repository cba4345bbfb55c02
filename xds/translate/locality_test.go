package translate

import (
	"slices"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/meshfed/meshfed/model"
)

// zonedService has one endpoint in each of zones a and b of region r.
func zonedService() *model.Service {
	s := testService("a.vm.internal", 80)
	src := s.Endpoints[0].Source
	s.Endpoints = []model.Endpoint{
		{Address: "10.0.0.1", Locality: model.Locality{Region: "r", Zone: "a"}, Source: src, Labels: map[string]string{"version": "v1"}},
		{Address: "10.0.0.2", Locality: model.Locality{Region: "r", Zone: "b"}, Source: src, Labels: map[string]string{"version": "v1"}},
	}
	return s
}

func distributeDR(to string) string {
	return `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: a, namespace: shop}
spec:
  host: a.vm.internal
  trafficPolicy: {loadBalancer: {localityLbSetting: {distribute: [{from: "*", to: ` + to + `}]}}}
  subsets: [{name: v1, labels: {version: v1}}]
`
}

func zones(t *testing.T, tr *Translator, name string) []string {
	t.Helper()
	cla, ok := tr.Resources(KindOf("", EndpointType))[name].(interface {
		message() *endpoint.ClusterLoadAssignment
	})
	var m *endpoint.ClusterLoadAssignment
	if ok {
		m = cla.message()
	} else if m, ok = tr.Resources(KindOf("", EndpointType))[name].(*endpoint.ClusterLoadAssignment); !ok {
		t.Fatalf("CLA %s missing", name)
	}
	var out []string
	for _, l := range m.GetEndpoints() {
		w := ""
		if l.GetLoadBalancingWeight() != nil {
			w = "=" + uitoa(l.GetLoadBalancingWeight().GetValue())
		}
		out = append(out, l.GetLocality().GetZone()+w)
	}
	slices.Sort(out)
	return out
}

// A distribute rule that would leave no endpoint (a typo in every `to`
// key) is not applied, on the port and the subset clusters, and is
// noted; one that leaves a locality out applies (Istio: a locality not
// present gets no traffic) and names the locality in a note.
func TestDistributeNeverEmptiesCluster(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, to  string
		wantZones []string
		weighted  bool
		note      string
	}{
		{"typo", `{"rr/*": 100}`, []string{"a=1", "b=1"}, false, "leaves no endpoint"},
		{"one zone left out", `{"r/a": 100}`, []string{"a=100"}, true, "sends no traffic to locality r/b/"},
		{"both", `{"r/a": 80, "r/b": 20}`, []string{"a=80", "b=20"}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := NewTranslator()
			s := model.NewSnapshot(1, []*model.Service{zonedService()})
			s.Config = configSnap(t, 1, distributeDR(tc.to))
			tr.Translate(s)
			for _, name := range []string{"outbound|80||a.vm.internal", "outbound|80|v1|a.vm.internal"} {
				if got := zones(t, tr, name); !slices.Equal(got, tc.wantZones) {
					t.Errorf("%s localities = %v, want %v", name, got, tc.wantZones)
				}
				c := tr.Resources(KindOf(ClassEnvoy, ClusterType))[name].(*cluster.Cluster)
				if got := c.GetCommonLbConfig().GetLocalityWeightedLbConfig() != nil; got != tc.weighted {
					t.Errorf("%s locality weighted = %v, want %v", name, got, tc.weighted)
				}
				var notes []string
				for _, n := range tr.TrafficNotes() {
					if strings.HasPrefix(n.Note, name+": localityLbSetting.distribute") {
						notes = append(notes, n.Client+": "+n.Note)
					}
				}
				if tc.note == "" {
					if len(notes) != 0 {
						t.Errorf("%s notes = %q, want none", name, notes)
					}
				} else if len(notes) != 2 || !strings.Contains(notes[0], tc.note) {
					t.Errorf("%s notes = %q, want one per client kind with %q", name, notes, tc.note)
				}
			}
			if len(tr.Invalid()) != 0 {
				t.Errorf("Invalid = %v", tr.Invalid())
			}
		})
	}
}
