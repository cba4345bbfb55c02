package chaos

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	adminpb "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	statuspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/xds" // registers the xds:/// resolver
	"google.golang.org/grpc/xds/csds"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/test/servers"
	"github.com/meshfed/meshfed/xds/translate"
)

// grpcChildEnv makes the test binary a proxyless grpc-go client: it opens a
// channel to every xds:/// target in the variable (comma-separated) and
// keeps them (LDS, RDS, CDS, EDS watched) until it is killed. grpc-go
// validates everything it is sent; a NACK shows in meshfed's
// meshfed_xds_nacks_total, which the sampler follows.
const grpcChildEnv = "MESHFED_CHAOS_GRPC_TARGETS"

// grpcCSDSEnv is the loopback address on which the child serves grpc-go's
// CSDS (google.golang.org/grpc/xds/csds): what its xDS clients hold, which
// the harness polls into the History.
const grpcCSDSEnv = "MESHFED_CHAOS_GRPC_CSDS"

// csdsPoll is how often the harness reads a grpc-go client's CSDS: its
// observations lag the client by at most this plus a fetch, and a drop
// shorter than it is not seen (doc.go states the bound).
const csdsPoll = 250 * time.Millisecond

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
	if addr := os.Getenv(grpcCSDSEnv); addr != "" {
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "csds: %v\n", err)
			return 1
		}
		cs, err := csds.NewClientStatusDiscoveryServer()
		if err != nil {
			fmt.Fprintf(os.Stderr, "csds: %v\n", err)
			return 1
		}
		srv := grpc.NewServer()
		statuspb.RegisterClientStatusDiscoveryServiceServer(srv, cs)
		go func() { _ = srv.Serve(lis) }()
	}
	time.Sleep(24 * time.Hour) // killed by the test
	for _, c := range conns {
		c.Close()
	}
	return 0
}

// grpcClient is one grpc-go child process and what its CSDS says it holds:
// the endpoints of the EDS clusters of its targets (one service of each
// kind), recorded in the History as the raw clients' are.
type grpcClient struct {
	id    string
	csds  string          // the child's CSDS address
	hosts map[string]bool // the service hosts of its targets
	proc  *servers.Process
	w     *world

	mu      sync.Mutex
	held    map[Key]bool // what the last fetch showed
	gen     int          // bumped when the process is killed: a fetch in flight is dropped
	dead    bool         // killed, not restarted yet
	stalled bool
	fetched bool   // the last fetch succeeded
	downEnd func() // closes the client's open Down interval (joining, restarted)
}

func (w *world) startGRPC(ctx context.Context, wg *sync.WaitGroup) {
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
		hosts := map[string]bool{}
		var targets []string
		for _, k := range w.kinds {
			t := fmt.Sprintf("xds:///%s:%d", k.Host(0), w.servicePort(k))
			if !slices.Contains(targets, t) { // the Kubernetes clusters share their hosts
				targets = append(targets, t)
			}
			hosts[k.Host(0)] = true
		}
		g := &grpcClient{id: id, w: w, hosts: hosts, held: map[Key]bool{}, csds: fmt.Sprintf("127.0.0.1:%d", servers.FreePort(w.t)),
			downEnd: w.hist.Joins("client:" + id)}
		g.proc = &servers.Process{Name: id, Bin: os.Args[0], LogPath: filepath.Join(dir, "client.log"),
			Env: []string{"GRPC_XDS_BOOTSTRAP=" + bs, grpcChildEnv + "=" + strings.Join(targets, ","), grpcCSDSEnv + "=" + g.csds,
				"GRPC_GO_LOG_SEVERITY_LEVEL=warning"}}
		w.t.Cleanup(func() { g.proc.Kill() })
		if err := g.proc.Start(); err != nil {
			w.t.Fatal(err)
		}
		w.mu.Lock()
		w.grpc = append(w.grpc, g)
		w.scopeOf[id] = m.Name
		w.mu.Unlock()
		wg.Go(func() { g.poll(ctx) })
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

// poll reads the child's CSDS every csdsPoll until ctx ends and records
// every change of what it holds.
func (g *grpcClient) poll(ctx context.Context) {
	conn, err := grpc.NewClient(g.csds, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		g.w.t.Errorf("%s: csds: %v", g.id, err)
		return
	}
	defer conn.Close()
	cl := statuspb.NewClientStatusDiscoveryServiceClient(conn)
	tick := time.NewTicker(csdsPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		g.mu.Lock()
		gen, skip := g.gen, g.dead || g.stalled
		g.mu.Unlock()
		if skip {
			continue
		}
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := cl.FetchClientStatus(fctx, &statuspb.ClientStatusRequest{})
		cancel()
		now := time.Now()
		g.mu.Lock()
		if gen == g.gen && !g.dead {
			g.fetched = err == nil
			if err == nil {
				view, synced := csdsView(resp, g.hosts)
				g.w.hist.Observe(diffObs(g.id, now, g.held, view, false)...)
				g.held = view
				if synced && g.downEnd != nil {
					g.downEnd()
					g.downEnd = nil
				}
			}
		}
		g.mu.Unlock()
	}
}

// csdsView is what a CSDS dump says a grpc-go client holds: the endpoints
// of the EDS resources of hosts (an EDS resource not in the dump, or
// without a config, holds none). synced: every host has its EDS resource
// and no resource waits for its first answer.
func csdsView(resp *statuspb.ClientStatusResponse, hosts map[string]bool) (view map[Key]bool, synced bool) {
	view = map[Key]bool{}
	have := map[string]bool{}
	synced = true
	for _, cc := range resp.GetConfig() {
		for _, x := range cc.GetGenericXdsConfigs() {
			if x.GetClientStatus() == adminpb.ClientResourceStatus_REQUESTED {
				synced = false
			}
			if x.GetTypeUrl() != translate.EndpointType || x.GetXdsConfig() == nil {
				continue
			}
			host, ok := plainClusterHost(x.GetName())
			if !ok || !hosts[host] {
				continue
			}
			var cla endpoint.ClusterLoadAssignment
			if err := proto.Unmarshal(x.GetXdsConfig().GetValue(), &cla); err != nil {
				continue
			}
			have[host] = true
			for a, h := range endpointsOf(&cla) {
				view[Key{host, a}] = h
			}
		}
	}
	return view, synced && len(have) == len(hosts)
}

// restart kills the child (it loses what it held: recorded as forgotten,
// not removed) and starts it again after d; it is down until its CSDS
// shows it synced.
func (g *grpcClient) restart(d time.Duration) {
	g.mu.Lock()
	g.gen++
	g.dead = true
	g.mu.Unlock()
	g.proc.Kill()
	g.mu.Lock()
	if g.downEnd == nil {
		g.downEnd = g.w.hist.Down("client:"+g.id, "restarted")
	}
	g.w.hist.Observe(diffObs(g.id, time.Now(), g.held, nil, true)...)
	g.held = map[Key]bool{}
	g.fetched = false
	g.mu.Unlock()
	time.Sleep(d)
	if err := g.proc.Start(); err != nil {
		g.w.t.Logf("%s: %v", g.id, err)
	}
	g.mu.Lock()
	g.dead = false
	g.mu.Unlock()
}

// stall stops the child for d (a hung proxy); it keeps what it held.
func (g *grpcClient) stall(d time.Duration) {
	g.mu.Lock()
	g.stalled = true
	g.mu.Unlock()
	end := g.w.hist.Down("client:"+g.id, "stalled")
	g.proc.Signal(syscall.SIGSTOP)
	time.Sleep(d)
	g.proc.Signal(syscall.SIGCONT)
	end()
	g.mu.Lock()
	g.stalled = false
	g.fetched = false // until the next fetch
	g.mu.Unlock()
}

// Name is the client's id.
func (g *grpcClient) Name() string { return g.id }

// Connected reports whether the child runs and its CSDS shows it synced.
func (g *grpcClient) Connected() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.dead && !g.stalled && g.fetched && g.downEnd == nil
}

// Subscribes reports whether host is one of the client's targets.
func (g *grpcClient) Subscribes(host string) bool { return g.hosts[host] }

// View returns the endpoints the client holds for hosts accepted by want.
func (g *grpcClient) View(want func(host string) bool) map[Key]bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[Key]bool{}
	for k, h := range g.held {
		if want(k.Host) {
			out[k] = h
		}
	}
	return out
}

func (w *world) stopGRPC() {
	for _, g := range w.grpc {
		g.proc.Kill()
	}
}
