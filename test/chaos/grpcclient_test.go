package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/xds" // registers the xds:/// resolver

	"github.com/meshfed/meshfed/test/servers"
)

// grpcChildEnv makes the test binary a proxyless grpc-go client: it opens a
// channel to every xds:/// target in the variable (comma-separated) and
// keeps them (LDS, RDS, CDS, EDS watched) until it is killed. grpc-go
// validates everything it is sent; a NACK shows in meshfed's
// meshfed_xds_nacks_total, which the sampler follows.
const grpcChildEnv = "MESHFED_CHAOS_GRPC_TARGETS"

func grpcChild(targets string) int {
	var conns []*grpc.ClientConn
	for _, target := range strings.Split(targets, ",") {
		conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithIdleTimeout(0)) // never idle: the xDS watches stay
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", target, err)
			return 1
		}
		conn.Connect()
		conns = append(conns, conn)
	}
	time.Sleep(24 * time.Hour) // killed by the test
	for _, c := range conns {
		c.Close()
	}
	return 0
}

// grpcClient is one grpc-go child process.
type grpcClient struct {
	id   string
	proc *servers.Process
	w    *world
}

func (w *world) startGRPC() {
	for _, m := range []*Meshfed{w.a, w.b} {
		id := "grpc-" + strings.TrimPrefix(m.Name, "meshfed-")
		out, err := exec.Command(meshfedBin, "bootstrap", "--grpc", "--xds", m.XDS, "--node-id", id).Output()
		if err != nil {
			w.t.Fatalf("bootstrap: %v", err)
		}
		dir := filepath.Join(w.dir, id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			w.t.Fatal(err)
		}
		bs := filepath.Join(dir, "bootstrap.json")
		if err := os.WriteFile(bs, out, 0o644); err != nil {
			w.t.Fatal(err)
		}
		var targets []string
		for _, k := range w.kinds {
			targets = append(targets, fmt.Sprintf("xds:///%s:%d", k.Host(0), w.servicePort(k)))
		}
		g := &grpcClient{id: id, w: w, proc: &servers.Process{Name: id, Bin: os.Args[0], LogPath: filepath.Join(dir, "client.log"),
			Env: []string{"GRPC_XDS_BOOTSTRAP=" + bs, grpcChildEnv + "=" + strings.Join(targets, ","), "GRPC_GO_LOG_SEVERITY_LEVEL=warning"}}}
		w.t.Cleanup(func() { g.proc.Kill() })
		if err := g.proc.Start(); err != nil {
			w.t.Fatal(err)
		}
		w.grpc = append(w.grpc, g)
	}
}

// servicePort is the port of service 0 of k as the proxies see it (its
// listener host:port).
func (w *world) servicePort(k Kind) int { return k.Port(0) }

func (w *world) grpcNamed(id string) *grpcClient {
	for _, g := range w.grpc {
		if g.id == id {
			return g
		}
	}
	return nil
}

func (g *grpcClient) restart(d time.Duration) {
	g.proc.Kill()
	time.Sleep(d)
	if err := g.proc.Start(); err != nil {
		g.w.t.Logf("%s: %v", g.id, err)
	}
}

func (g *grpcClient) stall(d time.Duration) {
	g.proc.Signal(syscall.SIGSTOP)
	time.Sleep(d)
	g.proc.Signal(syscall.SIGCONT)
}

func (w *world) stopGRPC() {
	for _, g := range w.grpc {
		g.proc.Kill()
	}
}
