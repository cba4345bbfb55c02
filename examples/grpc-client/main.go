// Command grpc-client is a small proxyless gRPC client for meshfed: it
// shows what a grpc-go application sees when it dials a meshfed service
// by name.
//
// It dials an xds:/// target with grpc-go's xDS resolver, which reads the
// bootstrap file named by GRPC_XDS_BOOTSTRAP (write one with
// `meshfed bootstrap --grpc`), asks meshfed for the listener, route,
// cluster and endpoints of the target, and connects to those endpoints.
// The program then prints:
//
//   - every endpoint address grpc-go connects to, and whether a server
//     accepted the connection there (it records them with a custom dialer,
//     so it needs no server of your own to show what meshfed serves);
//   - the channel's connectivity state;
//   - the result of -n calls to the standard health service
//     (grpc.health.v1.Health/Check) and which endpoint answered each one.
//
// Exit status: 0 once the target resolved through xDS (even if no server
// answered the health calls: the quickstart starts none); 1 when it did not
// resolve within -timeout, with the reason; 2 for a usage error.
//
// Usage:
//
//	GRPC_XDS_BOOTSTRAP=/tmp/bootstrap.json go run ./examples/grpc-client -target xds:///orders.vm.internal:8080
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	_ "google.golang.org/grpc/xds" // registers the xds:/// resolver and the xDS balancers
)

func main() {
	target := flag.String("target", "xds:///orders.vm.internal:8080", "xds:///host:port of a service meshfed serves")
	n := flag.Int("n", 3, "health checks to send once resolved (0: only resolve)")
	timeout := flag.Duration("timeout", 10*time.Second, "how long to wait for xDS to resolve the target, and the deadline of each call")
	flag.Parse()
	if flag.NArg() > 0 || *n < 0 || *timeout <= 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*target, *n, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "grpc-client:", err)
		var u usageError
		if errors.As(err, &u) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError struct{ error }

func run(target string, n int, timeout time.Duration) error {
	// grpc-go reads the bootstrap from GRPC_XDS_BOOTSTRAP (a file) or
	// GRPC_XDS_BOOTSTRAP_CONFIG (the JSON itself). Say so plainly instead
	// of letting the channel fail later with a less obvious message.
	if os.Getenv("GRPC_XDS_BOOTSTRAP") == "" && os.Getenv("GRPC_XDS_BOOTSTRAP_CONFIG") == "" {
		return usageError{errors.New("GRPC_XDS_BOOTSTRAP is not set: write a bootstrap with `meshfed bootstrap --grpc > /tmp/bootstrap.json` and set GRPC_XDS_BOOTSTRAP=/tmp/bootstrap.json")}
	}

	// The dialer sees every address the xDS balancers connect to: the
	// endpoints meshfed served for the target.
	d := &recordingDialer{dialed: make(chan struct{}, 1)}
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()), // meshfed's example endpoints speak plaintext
		grpc.WithContextDialer(d.dial),
	)
	if err != nil {
		return fmt.Errorf("dial %s: %w", target, err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)

	// Resolve: wait until the balancers connect to a first endpoint. A
	// health call that waits for a ready connection starts the channel
	// (and lazy balancers such as ring_hash) and, should the target not
	// resolve, carries the reason grpc-go gives.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	kick := make(chan error, 1)
	go func() {
		_, err := health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		kick <- err
	}()
	select {
	case <-d.dialed:
	case <-ctx.Done():
		err := fmt.Errorf("could not resolve %s via xDS within %s: no endpoints arrived (is meshfed running, does the bootstrap point at it, and does it serve this host and port? Its admin /debug/registryz lists the hosts it serves)",
			target, timeout)
		// grpc-go may know more, e.g. an xDS error or a resource meshfed
		// said does not exist.
		if why := innermost(status.Convert(<-kick).Message()); !strings.HasPrefix(why, "context deadline exceeded") {
			err = fmt.Errorf("%w: %s", err, why)
		}
		return err
	}

	// Give the other endpoints a moment: the channel leaves CONNECTING
	// once a connection is up or all failed, and round-robin style
	// balancers connect to every endpoint of the chosen priority.
	settle(ctx, conn, d)
	fmt.Printf("resolved %s via xDS\n", target)
	fmt.Println("endpoints:")
	for _, e := range d.snapshot() {
		fmt.Printf("  %-22s %s\n", e.addr, e.result)
	}
	fmt.Printf("connectivity state: %s\n", conn.GetState())

	// Health checks. Each goes to an endpoint the balancer picks; the
	// peer tells which one answered.
	answered := 0
	for i := 1; i <= n; i++ {
		cctx, ccancel := context.WithTimeout(context.Background(), timeout)
		var p peer.Peer
		resp, err := health.Check(cctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p))
		ccancel()
		switch {
		case err == nil:
			answered++
			fmt.Printf("health check %d: %s from %s\n", i, resp.GetStatus(), p.Addr)
		case status.Code(err) == codes.Unimplemented: // a server without the health service
			answered++
			fmt.Printf("health check %d: %s answers, but does not implement grpc.health.v1.Health\n", i, p.Addr)
		default:
			s := status.Convert(err)
			fmt.Printf("health check %d: %s: %s\n", i, s.Code(), innermost(s.Message()))
		}
	}
	if n > 0 && answered == 0 {
		fmt.Println("no server answered: meshfed resolved the target, but nothing listens on its endpoints;")
		fmt.Println("start a gRPC server on one of the addresses above to get answers")
	}
	return nil
}

// settle waits, at most until ctx ends, for the channel to leave
// CONNECTING and for no new endpoint to be dialed for a short while.
func settle(ctx context.Context, conn *grpc.ClientConn, d *recordingDialer) {
	const quiet = 300 * time.Millisecond
	for {
		s := conn.GetState()
		seen := len(d.snapshot())
		if s != connectivity.Connecting && s != connectivity.Idle {
			select {
			case <-time.After(quiet):
			case <-ctx.Done():
				return
			}
			if len(d.snapshot()) == seen {
				return
			}
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, quiet)
		conn.WaitForStateChange(wctx, s)
		cancel()
		if ctx.Err() != nil {
			return
		}
	}
}

// recordingDialer dials TCP and remembers each address with the outcome
// of its first dial, in the order they were first dialed.
type recordingDialer struct {
	mu     sync.Mutex
	seen   []endpoint
	dialed chan struct{} // receives once after the first dial
}

type endpoint struct{ addr, result string }

func (r *recordingDialer) dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	result := "server accepted the connection"
	if err != nil {
		result = "no server: " + shortDialError(err)
	}
	r.mu.Lock()
	if !slices.ContainsFunc(r.seen, func(e endpoint) bool { return e.addr == addr }) {
		r.seen = append(r.seen, endpoint{addr, result})
	}
	r.mu.Unlock()
	select {
	case r.dialed <- struct{}{}:
	default:
	}
	return c, err
}

func (r *recordingDialer) snapshot() []endpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := slices.Clone(r.seen)
	slices.SortFunc(s, func(a, b endpoint) int { return strings.Compare(a.addr, b.addr) })
	return s
}

// innermost shortens grpc-go's nested status messages ("max retries
// exhausted: ... desc = connection error: desc = \"transport: ...\"")
// to the innermost description.
func innermost(msg string) string {
	if i := strings.LastIndex(msg, "desc = "); i >= 0 {
		msg = msg[i+len("desc = "):]
		if u, err := strconv.Unquote(msg); err == nil {
			msg = u
		}
	}
	return msg
}

// shortDialError turns "dial tcp 127.0.0.1:18080: connect: connection
// refused" into "connection refused".
func shortDialError(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		err = op.Err
		if inner := errors.Unwrap(err); inner != nil {
			err = inner
		}
	}
	return err.Error()
}
