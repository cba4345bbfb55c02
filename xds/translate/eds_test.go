package translate

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/model"
)

// checkCLA asserts that a served CLA is a valid ClusterLoadAssignment that
// marshals, through go-control-plane, to exactly the deterministic encoding
// of the message it holds, and renders like it in protojson.
func checkCLA(t *testing.T, r any) {
	t.Helper()
	c, ok := r.(*claResource)
	if !ok {
		t.Fatalf("EDS resource is a %T, want *claResource", r)
	}
	if err := validate(c); err != nil {
		t.Errorf("%s: ValidateAll: %v", c.GetClusterName(), err)
	}
	plain := c.message()
	want, err := deterministic.Marshal(plain)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cache.MarshalResource(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: assembled encoding differs from proto's (%d vs %d bytes)", c.GetClusterName(), len(got), len(want))
	}
	if n := proto.Size(c); n != len(want) {
		t.Errorf("%s: proto.Size = %d, want %d", c.GetClusterName(), n, len(want))
	}
	var back endpoint.ClusterLoadAssignment
	if err := proto.Unmarshal(got, &back); err != nil || !proto.Equal(&back, plain) || !proto.Equal(c, plain) {
		t.Errorf("%s: does not round-trip (err %v)", c.GetClusterName(), err)
	}
	jw, _ := protojson.Marshal(plain)
	jg, err := protojson.Marshal(c)
	if err != nil || !bytes.Equal(jg, jw) {
		t.Errorf("%s: protojson differs (err %v)", c.GetClusterName(), err)
	}
	if n := cache.GetResourceName(c); n != c.GetClusterName() {
		t.Errorf("GetResourceName = %q, want %q", n, c.GetClusterName())
	}
}

// mutableService is a service of two ports and 60 endpoints over three
// zones, for mutate.
func mutableService(host string) *model.Service {
	svc := &model.Service{
		Hostname: host,
		Sources:  []string{"r"},
		Ports: []model.Port{
			{Name: "http", Number: 80, Protocol: model.ProtocolHTTP},
			{Name: "grpc", Number: 81, Protocol: model.ProtocolGRPC},
		},
	}
	for j := range 60 {
		svc.Endpoints = append(svc.Endpoints, model.Endpoint{
			Address:  fmt.Sprintf("10.9.%d.%d", j%4, j+1),
			Labels:   map[string]string{"app": "x"},
			Locality: model.Locality{Region: "r", Zone: fmt.Sprintf("z%d", j%3)},
			Source:   model.Source{Registry: "r", Cluster: "c"},
		})
	}
	return svc
}

// mutate applies one random change of the kinds registries make.
func mutate(r *rand.Rand, eps []model.Endpoint) []model.Endpoint {
	eps = slices.Clone(eps)
	addr := func() string { return fmt.Sprintf("10.9.%d.%d", r.IntN(4), r.IntN(250)+1) }
	i := r.IntN(len(eps))
	e := &eps[i]
	switch r.IntN(10) {
	case 0:
		e.Health = model.Health(r.IntN(4))
	case 1:
		e.Weight = uint32(r.IntN(3))
	case 2:
		e.Labels = map[string]string{"app": "x", "seq": fmt.Sprint(r.IntN(5))}
	case 3:
		e.Labels = nil
	case 4:
		e.Locality = model.Locality{Region: "r", Zone: fmt.Sprintf("z%d", r.IntN(4))}
	case 5:
		e.Address = addr() // may duplicate another endpoint
	case 6:
		e.Ports = map[string]uint32{"http": uint32(9000 + r.IntN(2))}
	case 7:
		e.Ports = map[string]uint32{"grpc": model.NotServed}
	case 8:
		eps = slices.Delete(eps, i, i+1)
	case 9:
		eps = slices.Insert(eps, i, model.Endpoint{Address: addr(), Source: model.Source{Registry: "r", Network: "n"}})
	}
	if len(eps) == 0 {
		eps = append(eps, model.Endpoint{Address: addr()})
	}
	return eps
}

// referenceCLA builds the CLA of cluster name the straightforward way (as
// meshfed did before incremental EDS): every endpoint of the port, first
// of each address:port, grouped by sorted locality, sorted by address and
// port, with its metadata; localities weighted by the sum of weights.
func referenceCLA(t *testing.T, name string, svc *model.Service) *endpoint.ClusterLoadAssignment {
	t.Helper()
	var p model.Port
	for _, q := range svc.Ports {
		if ClusterName(svc.Hostname, q.Number) == name {
			p = q
			break
		}
	}
	type ep struct {
		e    *model.Endpoint
		port uint32
	}
	seen := map[string]bool{}
	byLoc := map[model.Locality][]ep{}
	for i := range svc.Endpoints {
		e := &svc.Endpoints[i]
		port, ok := e.PortFor(p)
		key := fmt.Sprintf("%s:%d", e.Address, port)
		if !ok || seen[key] {
			continue
		}
		seen[key] = true
		byLoc[e.Locality] = append(byLoc[e.Locality], ep{e, port})
	}
	locs := slices.SortedFunc(maps.Keys(byLoc), compareLocality)
	cla := &endpoint.ClusterLoadAssignment{ClusterName: name}
	for _, l := range locs {
		eps := byLoc[l]
		slices.SortFunc(eps, func(a, b ep) int {
			if c := strings.Compare(a.e.Address, b.e.Address); c != 0 {
				return c
			}
			return int(a.port) - int(b.port)
		})
		lle := &endpoint.LocalityLbEndpoints{Locality: &core.Locality{Region: l.Region, Zone: l.Zone, SubZone: l.SubZone}}
		var sum uint64
		for _, x := range eps {
			md, err := endpointMetadata(x.e)
			if err != nil {
				t.Fatal(err)
			}
			w := max(x.e.Weight, 1)
			sum += uint64(w)
			lle.LbEndpoints = append(lle.LbEndpoints, &endpoint.LbEndpoint{
				HostIdentifier:      &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{Address: SocketAddress(x.e.Address, x.port)}},
				HealthStatus:        healthStatuses[x.e.Health],
				LoadBalancingWeight: wrapperspb.UInt32(w),
				Metadata:            md,
			})
		}
		lle.LoadBalancingWeight = wrapperspb.UInt32(uint32(max(1, sum)))
		cla.Endpoints = append(cla.Endpoints, lle)
	}
	return cla
}

// TestCLAIncrementalEqualsFullBuild drives one translator through random
// endpoint changes and compares every CLA with what a fresh translator
// builds from the same snapshot, byte for byte; unchanged endpoints keep
// their LbEndpoint objects.
func TestCLAIncrementalEqualsFullBuild(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	svc := mutableService("svc.test")
	tr := NewTranslator()
	tr.Translate(model.NewSnapshot(1, []*model.Service{svc}))
	for step := range 250 {
		prev := map[string]lbEntry{} // by encoding
		for _, res := range tr.Resources(KindOf("", EndpointType)) {
			for _, l := range res.(*claResource).locs {
				for _, e := range l.entries {
					prev[string(e.field)] = e
				}
			}
		}
		next := *svc
		next.Endpoints = mutate(r, svc.Endpoints)
		if step%50 == 49 {
			next.Ports = slices.Clone(next.Ports)
			next.Ports[0].Name = "web" // overrides of "http" no longer apply
		}
		svc = &next
		snap := model.NewSnapshot(uint64(step+2), []*model.Service{svc})
		tr.Translate(snap)
		fresh := NewTranslator()
		fresh.Translate(snap)
		if d := cmp.Diff(fresh.Invalid(), tr.Invalid()); d != "" {
			t.Fatalf("step %d: Invalid() (-fresh +incremental):\n%s", step, d)
		}
		got, want := tr.Resources(KindOf("", EndpointType)), fresh.Resources(KindOf("", EndpointType))
		if len(got) != len(want) {
			t.Fatalf("step %d: %d CLAs, want %d", step, len(got), len(want))
		}
		for name, w := range want {
			g := got[name]
			checkCLA(t, g)
			if wp, gp := w.(*claResource).message(), g.(*claResource).message(); !proto.Equal(wp, gp) {
				t.Fatalf("step %d: %s (-fresh +incremental):\n%s", step, name, cmp.Diff(wp, gp, protocmp.Transform()))
			}
			ref := referenceCLA(t, name, svc)
			if !proto.Equal(ref, g) {
				t.Fatalf("step %d: %s differs from the reference build:\n%s", step, name, cmp.Diff(ref, g.(*claResource).message(), protocmp.Transform()))
			}
			for _, l := range g.(*claResource).locs {
				for _, e := range l.entries {
					if p, ok := prev[string(e.field)]; ok && !p.same(e) && step%50 != 49 {
						t.Errorf("step %d: %s: an unchanged endpoint was rebuilt", step, name)
					}
				}
			}
		}
	}
}

// TestCLAFlipReusesAndValidates: one endpoint's health flips in a large
// service; only its LbEndpoint is new, the other localities are the same
// objects, the CLA is reported changed, and an equal copy is not.
func TestCLAFlipReusesAndValidates(t *testing.T) {
	t.Parallel()
	big := bigService(3000)
	name := ClusterName(big.Hostname, 8080)
	tr := NewTranslator()
	tr.EnableMCP()
	tr.Translate(model.NewSnapshot(1, []*model.Service{big}))
	before := tr.Resources(KindOf("", EndpointType))[name].(*claResource)
	checkCLA(t, before)

	flip := *big
	flip.Endpoints = slices.Clone(big.Endpoints)
	flip.Endpoints[4].Health = model.Draining // zone z1
	ch := tr.Translate(model.NewSnapshot(2, []*model.Service{&flip}))
	// A draining endpoint leaves the ServiceEntry too.
	if got := changed(ch); !slices.Equal(got, append([]string{" EDS +" + name}, seChange("+", "big.bench.local")...)) {
		t.Errorf("changes = %v, want only the CLA and the ServiceEntry", got)
	}
	after := tr.Resources(KindOf("", EndpointType))[name].(*claResource)
	checkCLA(t, after)
	if !proto.Equal(referenceCLA(t, name, &flip), after) {
		t.Errorf("CLA differs from the reference build")
	}
	for i, l := range after.locs {
		if same := l == before.locs[i]; same != (l.loc.Zone != "z1") {
			t.Errorf("locality %s reused = %v", l.loc.Zone, same)
		}
	}
	newEPs := 0
	for i, e := range after.locs[1].entries {
		if !e.same(before.locs[1].entries[i]) {
			newEPs++
		}
	}
	if newEPs != 1 {
		t.Errorf("%d LbEndpoints rebuilt, want 1", newEPs)
	}

	same := flip
	same.Endpoints = slices.Clone(flip.Endpoints)
	if ch := tr.Translate(model.NewSnapshot(3, []*model.Service{&same})); len(ch) != 0 {
		t.Errorf("equal copy: changes %v, want none", changed(ch))
	}
}

func TestCLAInvalidEndpointThenFixed(t *testing.T) {
	t.Parallel()
	svc := bigService(10)
	tr := NewTranslator()
	tr.Translate(model.NewSnapshot(1, []*model.Service{svc}))
	bad := *svc
	bad.Endpoints = slices.Clone(svc.Endpoints)
	bad.Endpoints[3].Labels = map[string]string{"v": "\xff"} // not UTF-8: no structpb value
	tr.Translate(model.NewSnapshot(2, []*model.Service{&bad}))
	if in := tr.Invalid(); len(in) != 1 || !strings.Contains(in[0].Error, "UTF-8") {
		t.Fatalf("Invalid() = %v, want the service with a UTF-8 error", in)
	}
	if n := len(tr.Resources(KindOf("", EndpointType))); n != 0 {
		t.Errorf("%d CLAs served for an invalid service", n)
	}
	good := bad
	good.Endpoints = slices.Clone(bad.Endpoints)
	good.Endpoints[3].Labels = nil
	tr.Translate(model.NewSnapshot(3, []*model.Service{&good}))
	if in := tr.Invalid(); len(in) != 0 {
		t.Fatalf("Invalid() = %v after the fix", in)
	}
	for _, r := range tr.Resources(KindOf("", EndpointType)) {
		checkCLA(t, r)
	}
}

func TestMetaCacheBounded(t *testing.T) {
	t.Parallel()
	var mc metaCache
	for i := range 2*metaCacheSize + 10 {
		e := &model.Endpoint{Labels: map[string]string{"i": fmt.Sprint(i)}}
		m, err := mc.get(e)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.pb.GetFilterMetadata()[MetadataKey].GetFields()["labels"].GetStructValue().GetFields()["i"].GetStringValue(); got != fmt.Sprint(i) {
			t.Fatalf("metadata of %d holds %q", i, got)
		}
	}
	if n := len(mc.cur) + len(mc.old); n > 2*metaCacheSize {
		t.Errorf("cache holds %d entries, want at most %d", n, 2*metaCacheSize)
	}
	a, _ := mc.get(&model.Endpoint{Labels: map[string]string{"x": "1"}, Source: model.Source{Registry: "r"}})
	b, _ := mc.get(&model.Endpoint{Labels: map[string]string{"x": "1"}, Source: model.Source{Registry: "r"}})
	if a != b {
		t.Errorf("equal labels and source: two metadata entries, want one shared")
	}
}
