// Command loadgen opens N ADS streams (delta or SotW) against an xDS
// server, each on its own connection with its own node id, ACKs every
// response at once and records when each churn write's marker arrives. It
// runs on one core (GOMAXPROCS=1 unless -procs says otherwise) so that the
// server's CPU share is measured apart. It prints "READY ctl=<addr>" and
// serves bench.Loadgen.Handler there until SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/meshfed/meshfed/bench"
)

func main() {
	var o bench.LoadOptions
	flag.StringVar(&o.Addr, "xds", "", "ADS server address")
	flag.IntVar(&o.N, "n", 10, "streams")
	flag.IntVar(&o.Offset, "offset", 0, "index of the first stream")
	flag.BoolVar(&o.Delta, "delta", true, "delta xDS (false: SotW)")
	flag.BoolVar(&o.Wildcard, "wildcard", false, "Envoy-like wildcard CDS + EDS of every cluster (else gRPC-like named clusters)")
	flag.IntVar(&o.Services, "services", 1000, "services on the server")
	flag.IntVar(&o.Per, "per", 100, "clusters per stream (named mode)")
	flag.IntVar(&o.Common, "common", 10, "clusters every stream watches (named mode)")
	flag.BoolVar(&o.AddrMarker, "addr-marker", false, "find event markers in endpoint addresses (bench.SeqAddr), not labels")
	flag.BoolVar(&o.Istio, "istio", false, "istiod-style node ids for named-mode streams")
	flag.IntVar(&o.Namespaces, "namespaces", 0, "wildcard streams in this many namespaces (Istio-style node ids)")
	flag.IntVar(&o.Scoped, "scoped", 0, "clusters each wildcard stream expects (its Sidecar's); 0: every service")
	flag.BoolVar(&o.FixedWindows, "fixed-windows", false, "fixed HTTP/2 windows, as Envoy's: no BDP pings (grpc-go's default pings on every response)")
	ctl := flag.String("ctl", "127.0.0.1:0", "control API address")
	procs := flag.Int("procs", 1, "GOMAXPROCS")
	flag.Parse()
	runtime.GOMAXPROCS(*procs)
	if o.Addr == "" {
		fmt.Fprintln(os.Stderr, "loadgen: -xds is required")
		os.Exit(2)
	}
	lg := bench.NewLoadgen(o)
	l, err := bench.Listen(*ctl)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
	hs := &http.Server{Handler: lg.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(l) }()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Printf("READY ctl=%s\n", l.Addr())
	_ = lg.Run(ctx)
	_ = hs.Close()
}
