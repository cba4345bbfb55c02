// Command xdsclient is a proxyless gRPC client for end-to-end tests: it
// dials an xds:/// target with grpc-go's xDS resolver (bootstrap from
// GRPC_XDS_BOOTSTRAP) and calls grpc.health.v1.Health/Check in a bounded
// loop, printing one JSON line per call with the backend that answered (its
// "x-backend" response header) or the error.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	_ "google.golang.org/grpc/xds" // registers the xds resolver and balancers
)

type line struct {
	Seq     int    `json:"seq"`
	Backend string `json:"backend,omitempty"`
	Err     string `json:"err,omitempty"`
}

func main() {
	target := flag.String("target", "", "xds:///host:port")
	interval := flag.Duration("interval", 100*time.Millisecond, "pause between calls")
	duration := flag.Duration("duration", 2*time.Minute, "stop after this long")
	rpcTimeout := flag.Duration("rpc-timeout", 2*time.Second, "deadline of each call")
	flag.Parse()
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
		var hdr metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr), grpc.WaitForReady(true))
		cancel()
		l := line{Seq: seq}
		if err != nil {
			l.Err = err.Error()
		} else if v := hdr.Get("x-backend"); len(v) > 0 {
			l.Backend = v[0]
		}
		if err := enc.Encode(l); err != nil {
			os.Exit(0) // reader went away
		}
		time.Sleep(*interval)
	}
}
