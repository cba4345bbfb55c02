package translate

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/model"
)

// bigService is a service of n endpoints over three zones, shaped like the
// benchmark fixture (bench.BigService): labels app and version, a source.
func bigService(n int) *model.Service {
	s := &model.Service{
		Hostname: "big.bench.local",
		Ports:    []model.Port{{Name: "http", Number: 8080, Protocol: model.ProtocolHTTP}},
	}
	labels := map[string]string{"app": "big", "version": "v1"}
	for j := range n {
		s.Endpoints = append(s.Endpoints, model.Endpoint{
			Address:  fmt.Sprintf("10.%d.%d.%d", 100+j>>16, (j>>8)&255, j&255),
			Labels:   labels,
			Locality: model.Locality{Region: "bench", Zone: fmt.Sprintf("z%d", j%3)},
			Weight:   1,
			Source:   model.Source{Registry: "bench", Cluster: "bench"},
		})
	}
	return s
}

// BenchmarkEDSBuild10k is the S3a figure: one endpoint of a 10,000-endpoint
// service flips its health, the translator rebuilds the service and its
// ClusterLoadAssignment is marshalled as go-control-plane does.
func BenchmarkEDSBuild10k(b *testing.B) { benchEDSBuild10k(b, false) }

// BenchmarkEDSBuild10kMCP is BenchmarkEDSBuild10k with an MCP client
// (istiod) subscribed: the service's ServiceEntry is rebuilt too.
func BenchmarkEDSBuild10kMCP(b *testing.B) { benchEDSBuild10k(b, true) }

func benchEDSBuild10k(b *testing.B, mcp bool) {
	const n = 10000
	big := bigService(n)
	name := ClusterName(big.Hostname, 8080)
	tr := NewTranslator()
	if mcp {
		tr.EnableMCP()
	}
	tr.Translate(model.NewSnapshot(1, []*model.Service{big}))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		svc := *big // a new pointer: the translator rebuilds it
		svc.Endpoints = slices.Clone(big.Endpoints)
		svc.Endpoints[i%n].Health = model.Health((i + 1) % 2)
		b.StartTimer()
		tr.Translate(model.NewSnapshot(uint64(i+2), []*model.Service{&svc}))
		cla := tr.Resources(KindOf("", EndpointType))[name]
		if _, err := cache.MarshalResource(cla); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTranslateFlip is S1's translation work: one endpoint flips in
// one of 1,000 services of 10 endpoints; the other 999 are the same
// pointers.
func BenchmarkTranslateFlip(b *testing.B) {
	svcs := make([]*model.Service, 1000)
	for i := range svcs {
		s := bigService(10)
		s.Hostname = fmt.Sprintf("s%04d.bench.local", i)
		svcs[i] = s
	}
	tr := NewTranslator()
	tr.Translate(model.NewSnapshot(1, slices.Clone(svcs)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		k := i % 10
		next := *svcs[k]
		next.Endpoints = slices.Clone(next.Endpoints)
		next.Endpoints[i%10].Health = model.Health(1 - int(next.Endpoints[i%10].Health))
		svcs[k] = &next
		snap := model.NewSnapshot(uint64(i+2), slices.Clone(svcs))
		b.StartTimer()
		if ch := tr.Translate(snap); len(ch) != 1 {
			b.Fatalf("%d kinds changed, want EDS only", len(ch))
		}
	}
}

// BenchmarkWildcardRulesFlip: one endpoint flips in one of 20,000
// services while 500 wildcard DestinationRules (matching none of them)
// are in force: the cost of finding each unchanged service's config
// (sub-benchmark rules=0: the same without config, for comparison).
func BenchmarkWildcardRulesFlip(b *testing.B) {
	for _, n := range []int{0, 500} {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) { benchWildcardRulesFlip(b, n) })
	}
}

func benchWildcardRulesFlip(b *testing.B, rules int) {
	var y strings.Builder
	for i := range rules {
		fmt.Fprintf(&y, "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: w%d, namespace: shop}\nspec:\n  host: \"*.zone%d.internal\"\n  trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}\n", i, i)
	}
	objs, rej := istioconfig.ParseObjects("bench.yaml", []byte(y.String()))
	if len(rej) > 0 {
		b.Fatal(rej)
	}
	cfg := model.NewConfigSnapshot(1, objs)
	svcs := make([]*model.Service, 20000)
	for i := range svcs {
		s := bigService(1)
		s.Hostname = fmt.Sprintf("s%05d.vm.internal", i)
		svcs[i] = s
	}
	tr := NewTranslator()
	first := model.NewSnapshot(1, slices.Clone(svcs))
	first.Config = cfg
	tr.Translate(first)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		next := *svcs[7]
		next.Endpoints = slices.Clone(next.Endpoints)
		next.Endpoints[0].Health = model.Health(1 - int(next.Endpoints[0].Health))
		svcs[7] = &next
		snap := model.NewSnapshot(uint64(i+2), slices.Clone(svcs))
		snap.Config = cfg
		b.StartTimer()
		if ch := tr.Translate(snap); len(ch) != 1 {
			b.Fatalf("%d kinds changed, want EDS only", len(ch))
		}
	}
}
