package bench

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/statestore"
	"github.com/meshfed/meshfed/xds"
)

// BenchmarkSharedPath is the shared path of one service change, wired as
// gateway.Gateway wires it: a registry's Publisher (a key per service)
// stores the changed service and flushes; the aggregator normalizes,
// merges and publishes the snapshot; the state store (state=on) saves
// what it accepted; the xDS server translates it and pushes it to the
// connected streams (streams=10: SotW clients holding the CDS and EDS of
// the 100 services that change). Each change is awaited to its end (the
// xDS server's version, the store's write, every stream's ACK) before the
// next. Issue #22: the cost per change follows the change, so the
// services=10000 rows should be within 2× the services=1000 ones.
// cpu-ns/op is the process's CPU time (GC and every goroutine included).
func BenchmarkSharedPath(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		for _, state := range []bool{false, true} {
			for _, streams := range []int{0, 10} {
				name := fmt.Sprintf("services=%d/state=%v/streams=%d", n, state, streams)
				b.Run(name, func(b *testing.B) { benchSharedPath(b, n, state, streams) })
			}
		}
	}
}

func benchSharedPath(b *testing.B, n int, state bool, streams int) {
	const eps, changing = 10, 100
	log := slog.New(slog.DiscardHandler)
	c := registries.Common{Name: Registry, Kind: Kind, Domain: Domain}
	var st *statestore.Store
	var onAccepted func(model.ShardKey, aggregate.Accepted)
	if state {
		var err error
		if st, err = statestore.Open(b.TempDir(), log); err != nil {
			b.Fatal(err)
		}
		onAccepted = st.Accept
	}
	agg := aggregate.New(aggregate.Options{Registries: []aggregate.RegistryOptions{{Common: c}}, OnAccepted: onAccepted, Logger: log})
	x := xds.NewServer(xds.Options{Logger: log})
	defer x.Close()
	applied := make(chan uint64, 1)
	agg.Subscribe(func(s *model.Snapshot) {
		x.Update(s)
		select {
		case <-applied:
		default:
		}
		applied <- s.Version
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{}, 2)
	go func() { _ = agg.Serve(ctx); done <- struct{}{} }()
	if st != nil {
		go func() { _ = st.Serve(ctx); done <- struct{}{} }()
	}
	defer func() {
		cancel()
		<-done
		if st != nil {
			<-done
		}
	}()
	p := registries.NewPublisher(c, agg, log, registries.PublisherOptions[string]{Compare: strings.Compare})
	services := make([]model.Service, n)
	for i := range services {
		services[i] = Service(i, eps)
		p.Put(services[i].Hostname, registries.One(services[i], true, nil))
	}
	p.Flush(registries.Condition{})
	wait := func(v uint64, written uint64) {
		b.Helper()
		timeout := time.After(time.Minute)
		for {
			select {
			case got := <-applied:
				if got < v {
					continue
				}
			case <-timeout:
				b.Fatalf("snapshot %d not applied within a minute", v)
			}
			break
		}
		for st != nil && st.Written() < written {
			select {
			case <-timeout:
				b.Fatalf("state %d not written within a minute", written)
			default:
				time.Sleep(20 * time.Microsecond)
			}
		}
	}
	wait(1, 1)

	var cs *s6Clients
	if streams > 0 {
		g := GRPCServer()
		x.Register(g)
		l, err := Listen("127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go func() { _ = g.Serve(l) }()
		defer g.Stop()
		clusters := make([]string, changing)
		for i := range clusters {
			clusters[i] = ClusterName(i)
		}
		if cs, err = startS6Clients(l.Addr().String(), clusters, streams); err != nil {
			b.Fatal(err)
		}
		defer cs.close()
		if err := cs.awaitSync(time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := ProcessCPU()
	for i := range b.N {
		k := i % changing
		s := services[k]
		s.Endpoints = append([]model.Endpoint(nil), s.Endpoints...)
		addr := fmt.Sprintf("10.%d.%d.%d", 200+i>>16&31, i>>8&255, i&255)
		s.Endpoints[0].Address = addr
		services[k] = s
		p.Put(s.Hostname, registries.One(s, true, nil))
		p.Flush(registries.Condition{})
		wait(uint64(i+2), uint64(i+2))
		if cs != nil {
			if _, ok := cs.awaitAddress(addr, time.Minute); !ok {
				b.Fatalf("change %d not ACKed by every stream within a minute", i)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	if v := agg.Snapshot().Version; v != uint64(b.N+1) {
		b.Fatalf("version %d after %d changes, want %d", v, b.N, b.N+1)
	}
}
