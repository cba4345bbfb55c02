package aggregate

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// benchShard is a shard of n services of eps endpoints each, shaped like
// the bench fixture (bench.Service): labels app and version, three zones.
func benchShard(n, eps int) []model.Service {
	out := make([]model.Service, n)
	for i := range out {
		s := model.Service{
			Hostname: fmt.Sprintf("s%04d.bench.local", i),
			Ports:    []model.Port{{Name: "http", Number: 8080, Protocol: model.ProtocolHTTP}},
		}
		for j := range eps {
			s.Endpoints = append(s.Endpoints, model.Endpoint{
				Address:  fmt.Sprintf("10.%d.%d.%d", 16+i>>8, i&255, j+1),
				Labels:   map[string]string{"app": fmt.Sprintf("s%04d", i), "version": "v1"},
				Locality: model.Locality{Region: "bench", Zone: fmt.Sprintf("z%d", j%3)},
				Weight:   1,
				Source:   model.Source{Registry: "bench", Cluster: "bench"},
			})
		}
		out[i] = s
	}
	return out
}

// flip toggles the health of one endpoint of service i in a copy of state
// (new top-level and endpoint slices for that service only, as a registry
// that keeps its state does).
func flip(state []model.Service, i, j int) []model.Service {
	state = slices.Clone(state)
	s := state[i]
	s.Endpoints = slices.Clone(s.Endpoints)
	e := &s.Endpoints[j]
	e.Health = model.Health(1 - int(e.Health))
	state[i] = s
	return state
}

// deepCopy copies every service and endpoint slice, as a registry that
// rebuilds its full state on every change (file, Consul) publishes it.
func deepCopy(state []model.Service) []model.Service {
	out := slices.Clone(state)
	for i := range out {
		out[i].Ports = slices.Clone(out[i].Ports)
		out[i].Endpoints = slices.Clone(out[i].Endpoints)
		for j := range out[i].Endpoints {
			e := &out[i].Endpoints[j]
			labels := make(map[string]string, len(e.Labels))
			for k, v := range e.Labels {
				labels[k] = v
			}
			e.Labels = labels
		}
	}
	return out
}

// BenchmarkAggregateFlip is S1's aggregate work: one endpoint flips in a
// shard of 1,000 services × 10 endpoints; the registry publishes its full
// state (Replace) and the Serve loop normalizes, merges and publishes.
func BenchmarkAggregateFlip(b *testing.B) {
	for _, tc := range []struct {
		name  string
		fresh bool // every slice of the state is new on every Replace
	}{
		{name: "kept-slices"},
		{name: "fresh-slices", fresh: true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			o := reg("bench", "bench", "bench.local")
			a := New(Options{Registries: []RegistryOptions{o}})
			state := benchShard(1000, 10)
			replace(a, shard(o), state, nil)
			a.rebuild(a.now())
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				state = flip(state, i%10, i%10)
				in := state
				if tc.fresh {
					in = deepCopy(state)
				}
				b.StartTimer()
				replace(a, shard(o), in, nil)
				a.rebuild(a.now())
			}
			b.StopTimer()
			if v := a.Snapshot().Version; v != uint64(b.N+1) {
				b.Fatalf("version %d after %d flips, want %d", v, b.N, b.N+1)
			}
		})
	}
}

// BenchmarkPublishFlip is the shared path of one change at two registry
// sizes: a registry's Publisher (a key per service) stores the changed
// service and flushes, and the aggregate normalizes, merges and publishes
// the snapshot. Issue #22's goal is that the cost per change follows the
// change: the 10,000 row within 2× the 1,000 one.
func BenchmarkPublishFlip(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			o := reg("bench", "bench", "bench.local")
			a := New(Options{Registries: []RegistryOptions{o}})
			p := registries.NewPublisher(o.Common, a, nil, registries.PublisherOptions[string]{Compare: strings.Compare})
			state := benchShard(n, 10)
			for _, s := range state {
				p.Put(s.Hostname, registries.One(s, true, nil))
			}
			p.Flush(registries.Condition{})
			a.rebuild(a.now())
			runtime.GC()
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			for i := range b.N {
				k := (i * 7919) % n
				s := state[k]
				s.Endpoints = slices.Clone(s.Endpoints)
				s.Endpoints[0].Health = model.Health(1 - int(s.Endpoints[0].Health))
				state[k] = s
				p.Put(s.Hostname, registries.One(s, true, nil))
				p.Flush(registries.Condition{})
				a.rebuild(a.now())
			}
			b.StopTimer()
			// CPU time (GC included) rather than wall time: the bench
			// machine is shared.
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			if v := a.Snapshot().Version; v != uint64(b.N+1) {
				b.Fatalf("version %d after %d flips, want %d", v, b.N, b.N+1)
			}
		})
	}
}

// processCPU is this process's user+system CPU time (getrusage).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
