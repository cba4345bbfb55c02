// Command benchserver is the control plane under test in meshfed's
// benchmarks: meshfed's real aggregate + xds packages (-impl meshfed) or a
// go-control-plane SnapshotCache baseline (-impl baseline) or the bare
// grpc-go floor of S1 (-impl floor), fed by an
// in-process bench registry whose churn driver stamps every write. It
// prints "READY <unix ns>" on stdout once xDS serves, and serves the
// control API (bench.Controller.Handler) on -ctl.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/xds/ads"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchserver:", err)
		os.Exit(1)
	}
}

func run() error {
	impl := flag.String("impl", "meshfed", "meshfed, baseline or floor (bare grpc-go: bench.Floor)")
	xdsAddr := flag.String("xds", "127.0.0.1:0", "ADS listen address")
	ctlAddr := flag.String("ctl", "127.0.0.1:0", "control API listen address")
	services := flag.Int("services", 1000, "services in the registry")
	eps := flag.Int("endpoints", 10, "endpoints per service")
	quiet := flag.Duration("quiet", 20*time.Millisecond, "debounce quiet (meshfed)")
	maxWait := flag.Duration("max", 500*time.Millisecond, "debounce max (meshfed)")
	empty := flag.Bool("empty", false, "start with no services; POST /load publishes them")
	countMarshals := flag.Bool("count-marshals", false, "record every allocation to account marshalled bytes (slow)")
	namespaces := flag.Int("namespaces", 0, "meshfed: a Sidecar in each of this many namespaces (bench.ScopeConfig)")
	sidecarHosts := flag.Int("sidecar-hosts", 50, "with -namespaces: services each Sidecar imports")
	flag.Parse()
	if *countMarshals {
		runtime.MemProfileRate = 1
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	var srv bench.Impl
	var grpcOpts []grpc.ServerOption
	switch *impl {
	case "meshfed":
		srv = bench.NewMeshfed(*quiet, *maxWait, log)
		grpcOpts = ads.ServerOptions() // as gateway.Gateway passes them
	case "baseline":
		srv = bench.NewBaseline(log)
	case "floor":
		srv = bench.NewFloor()
		grpcOpts = bench.FloorServerOptions()
	default:
		return fmt.Errorf("unknown -impl %q", *impl)
	}
	defer srv.Close()
	if m, ok := srv.(*bench.Meshfed); ok && *namespaces > 0 {
		m.SetConfig(bench.ScopeConfig(*namespaces, *sidecarHosts))
	}
	st := bench.NewState(*services, *eps)
	ctl := bench.NewController(srv, st, !*empty)
	var marshal func() any
	if *countMarshals {
		distinct := bench.DistinctResources(st.Services())
		marshal = func() any {
			n, b := bench.MarshalAllocs()
			return bench.MarshalStats{Calls: n, Bytes: b, Distinct: distinct}
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := ctl.WaitReady(ctx); err != nil {
		return err
	}
	cl, err := bench.Listen(*ctlAddr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: ctl.Handler(marshal), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(cl) }()
	defer hs.Close()

	// Like the gateway, xDS serves only once the first state is built.
	xl, err := bench.Listen(*xdsAddr)
	if err != nil {
		return err
	}
	g := bench.GRPCServer(grpcOpts...)
	srv.Register(g)
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(xl) }()
	fmt.Printf("READY %d xds=%s ctl=%s\n", time.Now().UnixNano(), xl.Addr(), cl.Addr())
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	g.Stop()
	return err
}
