// Command xdsclient is a proxyless gRPC client for end-to-end tests: it
// dials an xds:/// target with grpc-go's xDS resolver (bootstrap from
// GRPC_XDS_BOOTSTRAP) and calls grpc.health.v1.Health/Check in a bounded
// loop, printing one JSON line per call with the backend that answered (its
// "x-backend" response header) or the error. -header adds request
// metadata to every call (for header routes and hash policies).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	_ "google.golang.org/grpc/xds" // registers the xds resolver and balancers
)

type line struct {
	Seq     int    `json:"seq"`
	Backend string `json:"backend,omitempty"`
	Err     string `json:"err,omitempty"`
	Code    string `json:"code,omitempty"` // gRPC status code name of Err
}

func main() {
	target := flag.String("target", "", "xds:///host:port")
	interval := flag.Duration("interval", 100*time.Millisecond, "pause between calls")
	duration := flag.Duration("duration", 2*time.Minute, "stop after this long")
	rpcTimeout := flag.Duration("rpc-timeout", 2*time.Second, "deadline of each call")
	serve := flag.String("serve", "", "addr=name,...: also serve gRPC health on these addresses, naming themselves name "+
		"(backends in the client's own network namespace, for endpoints that live only there)")
	headers := flag.String("header", "", "k=v,...: metadata sent with every call")
	flag.Parse()
	var md []string
	if *headers != "" {
		for _, kv := range strings.Split(*headers, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				fmt.Fprintf(os.Stderr, "-header: %q is not k=v\n", kv)
				os.Exit(2)
			}
			md = append(md, k, v)
		}
	}
	if *serve != "" {
		if err := startBackends(*serve); err != nil {
			fmt.Fprintln(os.Stderr, "serve:", err)
			os.Exit(1)
		}
	}
	if *target == "" || os.Getenv("GRPC_XDS_BOOTSTRAP") == "" {
		fmt.Fprintln(os.Stderr, "usage: GRPC_XDS_BOOTSTRAP=FILE xdsclient -target xds:///host:port")
		os.Exit(2)
	}
	conn, err := grpc.NewClient(*target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial:", err)
		os.Exit(1)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	enc := json.NewEncoder(os.Stdout)
	deadline := time.Now().Add(*duration)
	for seq := 0; time.Now().Before(deadline); seq++ {
		ctx, cancel := context.WithTimeout(context.Background(), *rpcTimeout)
		if len(md) > 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, md...)
		}
		var hdr metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr), grpc.WaitForReady(true))
		cancel()
		l := line{Seq: seq}
		if err != nil {
			l.Err = err.Error()
			l.Code = status.Code(err).String()
		} else if v := hdr.Get("x-backend"); len(v) > 0 {
			l.Backend = v[0]
		}
		if err := enc.Encode(l); err != nil {
			os.Exit(0) // reader went away
		}
		time.Sleep(*interval)
	}
}

// startBackends serves grpc.health.v1 on each addr of "addr=name,...",
// setting the "x-backend: name" response header, until the process exits.
func startBackends(spec string) error {
	for _, item := range strings.Split(spec, ",") {
		addr, name, ok := strings.Cut(item, "=")
		if !ok {
			return fmt.Errorf("%q is not addr=name", item)
		}
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		s := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			_ = grpc.SetHeader(ctx, metadata.Pairs("x-backend", name))
			return h(ctx, req)
		}))
		healthpb.RegisterHealthServer(s, health.NewServer())
		go func() { _ = s.Serve(lis) }()
	}
	return nil
}
