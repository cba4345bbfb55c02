// Package hostile feeds generated hostile models through the normalization
// gate and xDS translation, and checks that whatever is served is valid:
// every resource passes ValidateAll, a real grpc-go xDS client (v1.85)
// accepts every resource it subscribes to (no NACK), and every input
// endpoint is either served or listed as a conflict.
package hostile

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/xds" // registers the xds:/// resolver

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/test/servers"
	"github.com/meshfed/meshfed/xds"
	"github.com/meshfed/meshfed/xds/ads"
	"github.com/meshfed/meshfed/xds/translate"
)

// childEnv makes the test binary act as a proxyless gRPC client that
// connects to every target in targetsEnv through xDS and stays until killed.
const (
	childEnv   = "MESHFED_HOSTILE_CHILD"
	targetsEnv = "MESHFED_HOSTILE_TARGETS"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

func child() int {
	for _, target := range strings.Split(os.Getenv(targetsEnv), ",") {
		conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", target, err)
			return 1
		}
		conn.Connect() // resolves through xDS: LDS, RDS, CDS, EDS
	}
	time.Sleep(2 * time.Minute) // the parent kills it once it has seen the ACKs
	return 0
}

// gen makes hostile but bounded models. Usable addresses are loopback only,
// so that a client that connects sends nothing off the machine; DNS
// services use IP addresses or localhost (no DNS look-ups).
type gen struct{ r *rand.Rand }

func (g gen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }

func (g gen) str() string {
	switch g.r.IntN(8) {
	case 0:
		return ""
	case 1:
		return "\xff\xfe" + g.pick("a", "zone", "")
	case 2:
		return strings.Repeat("x", 200+g.r.IntN(5000))
	case 3:
		return "é-漢字-\u0000-\u202e"
	}
	b := make([]byte, 1+g.r.IntN(12))
	for i := range b {
		b[i] = byte(g.r.IntN(256))
	}
	if g.r.IntN(2) == 0 {
		return strings.ToValidUTF8(string(b), "?")
	}
	return string(b)
}

var badAddrs = []string{"255.255.255.255", "224.0.0.1", "ff02::1", "169.254.1.1", "fe80::1", "fe80::1%lo",
	"0.0.0.0", "::", "0.0.0.7", "::ffff:239.0.0.1", "not-an-ip", "", "127.0.0.1:80", "1.2.3.4.5"}

func (g gen) addr(dns bool) string {
	switch g.r.IntN(5) {
	case 0:
		return badAddrs[g.r.IntN(len(badAddrs))]
	case 1:
		if dns {
			return "localhost"
		}
		return "::1"
	}
	return fmt.Sprintf("127.%d.%d.%d", g.r.IntN(4), g.r.IntN(256), 1+g.r.IntN(254))
}

func (g gen) weight() uint32 {
	switch g.r.IntN(4) {
	case 0:
		return math.MaxUint32
	case 1:
		return math.MaxUint32 - uint32(g.r.IntN(1000))
	case 2:
		return 0
	}
	return g.r.Uint32()
}

func (g gen) service(domain string, i int) model.Service {
	host := fmt.Sprintf("s%d.%s", i, domain)
	switch g.r.IntN(12) {
	case 0:
		host = "bad host." + domain
	case 1:
		host = strings.Repeat("a", 64) + "." + domain
	case 2:
		host = fmt.Sprintf("s%d.elsewhere", i)
	}
	s := model.Service{Hostname: host}
	if g.r.IntN(6) == 0 {
		s.Resolution = model.ResolutionDNS
	}
	for range 1 + g.r.IntN(3) {
		p := model.Port{Name: g.pick("grpc", "http", "", "tcp", "\xffx"), Number: uint32(g.r.IntN(4)) * 5000,
			Protocol: model.Protocol(g.pick("GRPC", "http", "HTTP2", "tcp", "", "SCTP"))}
		if g.r.IntN(4) != 0 {
			p.Number = 1 + uint32(g.r.IntN(65535))
		}
		s.Ports = append(s.Ports, p)
	}
	for j := range g.r.IntN(12) {
		e := model.Endpoint{
			Address: g.addr(s.Resolution == model.ResolutionDNS), Weight: g.weight(),
			Health: model.Health(g.r.IntN(5)), Origin: fmt.Sprintf("item-%d-%d", i, j),
			Locality: model.Locality{Region: g.pick("r1", "r2", "")},
		}
		if g.r.IntN(5) == 0 {
			e.Locality.Zone = g.str()
		}
		if g.r.IntN(3) == 0 {
			e.Labels = map[string]string{}
			for range g.r.IntN(80) {
				e.Labels[g.str()] = g.str()
			}
		}
		if g.r.IntN(6) == 0 {
			e.Ports = map[string]uint32{s.Ports[0].Name: uint32(g.r.IntN(70000))}
		}
		s.Endpoints = append(s.Endpoints, e)
	}
	return s
}

// TestHostileModelsServeOnlyWhatClientsAccept is the gate's contract
// (docs/architecture.md §3.4, normalization gate).
func TestHostileModelsServeOnlyWhatClientsAccept(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a grpc-go xDS client")
	}
	t.Parallel()
	for round := range 3 {
		seed := uint64(time.Now().UnixNano())
		t.Run(fmt.Sprintf("round%d", round), func(t *testing.T) {
			t.Logf("seed %d", seed)
			runRound(t, gen{rand.New(rand.NewPCG(seed, uint64(round)))})
		})
	}
}

var hostileRegs = []aggregate.RegistryOptions{
	{Common: registries.Common{Name: "vms", Kind: "file", Domain: "vm"}},
	{Common: registries.Common{Name: "east", Kind: "kubernetes", Domain: "svc"}, Multicluster: true},
	{Common: registries.Common{Name: "west", Kind: "kubernetes", Domain: "svc"}, Multicluster: true},
	{Common: registries.Common{Name: "istio", Kind: "serviceentry", Domain: "ext"}},
}

func runRound(t *testing.T, g gen) {
	inputs := map[string][]model.Service{}
	for _, r := range hostileRegs {
		var svcs []model.Service
		for i := range 25 {
			svcs = append(svcs, g.service(r.Domain, i))
		}
		inputs[r.Name] = svcs
	}
	serveAndCheck(t, inputs)
}

// Observations 1 and 2 of issue 10, exactly: weights summing over 2^32-1
// in one locality (also across two merged clusters), a label that is not
// valid UTF-8, and addresses no proxy can use. grpc-go NACKed the first;
// the second withdrew the whole service; the others were served HEALTHY.
func TestObservedHostileDataIsServedAcceptably(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a grpc-go xDS client")
	}
	t.Parallel()
	port := []model.Port{{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}}
	loc := model.Locality{Region: "r1", Zone: "z1"}
	vms := model.Service{Hostname: "orders.vm", Ports: port, Endpoints: []model.Endpoint{
		{Address: "127.0.0.1", Weight: math.MaxUint32, Locality: loc, Origin: "a"},
		{Address: "127.0.0.2", Weight: math.MaxUint32, Locality: loc, Origin: "b", Labels: map[string]string{"tag": "\xff", "version": "v1"}},
	}}
	for _, a := range []string{"255.255.255.255", "224.0.0.1", "ff02::1", "169.254.1.1", "fe80::1"} {
		vms.Endpoints = append(vms.Endpoints, model.Endpoint{Address: a, Locality: loc, Origin: "bad " + a})
	}
	kube := func(addr string) []model.Service {
		return []model.Service{{Hostname: "pay.svc", Ports: port, Endpoints: []model.Endpoint{
			{Address: addr, Weight: math.MaxUint32, Locality: loc, Origin: addr}}}}
	}
	snap, srv := serveAndCheck(t, map[string][]model.Service{"vms": {vms}, "east": kube("127.0.0.3"), "west": kube("127.0.0.4")})
	for host, want := range map[string]int{"orders.vm": 2, "pay.svc": 2} {
		s, ok := snap.Service(host)
		if !ok || len(s.Endpoints) != want {
			t.Errorf("%s: served %v, want %d endpoints", host, s, want)
		}
	}
	cla := srv.Resources(translate.Kind{TypeURL: translate.EndpointType})[translate.ClusterName("orders.vm", 8080)]
	if cla == nil {
		t.Fatal("no CLA for orders.vm")
	}
}

// serveAndCheck runs the registries' inputs through an Aggregator and an
// xDS server, checks the invariants and has a grpc-go client ACK it all.
func serveAndCheck(t *testing.T, inputs map[string][]model.Service) (*model.Snapshot, *xds.Server) {
	agg := aggregate.New(aggregate.Options{Registries: hostileRegs})
	for _, r := range hostileRegs {
		agg.Publish(model.ShardKey{Kind: r.Kind, Name: r.Name}, registries.FullState(inputs[r.Name], nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agg.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Serve: %v", err)
		}
	}()
	// Ready: every shard's first state is built into the snapshot (which
	// stays version 0 when the inputs serve nothing at all).
	waitFor(t, "the first snapshot", func() bool { ok, _ := agg.Ready(); return ok })
	snap := agg.Snapshot()

	// Nothing disappears silently: every input endpoint of a served
	// service is served, or a conflict names its item.
	conflicts := agg.Conflicts()
	listed := func(registry, host, origin string) bool {
		for _, c := range conflicts {
			if c.Registry != registry {
				continue
			}
			switch {
			case strings.Contains(c.Subject, "("+origin+")"):
				return true // the endpoint
			case c.Subject == c.Host && (c.Host == host || c.Host == strings.ToLower(host)):
				return true // its service
			case c.Host == strings.ToLower(host) && (c.Category == aggregate.CategoryPortMismatch ||
				c.Category == aggregate.CategoryResolutionMismatch || c.Category == aggregate.CategoryDuplicate):
				return true // its contribution to a merged service
			}
		}
		return false
	}
	for reg, svcs := range inputs {
		for _, s := range svcs {
			for _, e := range s.Endpoints {
				if !servedOrigin(snap, e.Origin) && !listed(reg, s.Hostname, e.Origin) {
					t.Errorf("%s endpoint %s (%q of %s) is neither served nor listed as a conflict", reg, e.Origin, e.Address, s.Hostname)
				}
			}
		}
	}

	srv := xds.NewServer(xds.Options{})
	srv.Update(snap)
	if inv := srv.Invalid(); len(inv) > 0 {
		t.Errorf("the gate let through services translation refused: %v", inv)
	}
	var targets []string
	clusters, eds := 0, 0
	for _, k := range translate.Kinds {
		for name, r := range srv.Resources(k) {
			if v, ok := r.(interface{ ValidateAll() error }); ok {
				if err := v.ValidateAll(); err != nil {
					t.Errorf("%s %s: %v", k.TypeURL, name, err)
				}
			}
			if k.Class == translate.ClassGRPC && k.TypeURL == translate.ListenerType {
				targets = append(targets, "xds:///"+name)
			}
			if c, ok := r.(*cluster.Cluster); ok && k.Class == translate.ClassGRPC {
				clusters++
				if c.GetEdsClusterConfig() != nil {
					eds++
				}
			}
		}
	}
	if len(targets) == 0 {
		t.Log("this round generated no servable gRPC service")
		return snap, srv
	}
	checkGRPCClientAccepts(t, srv, map[string]int{translate.ListenerType: len(targets), translate.ClusterType: clusters, translate.EndpointType: eds}, targets)
	return snap, srv
}

func servedOrigin(snap *model.Snapshot, origin string) bool {
	for _, s := range snap.Services() {
		for _, e := range s.Endpoints {
			if e.Origin == origin {
				return true
			}
		}
	}
	return false
}

// checkGRPCClientAccepts runs a grpc-go xDS client subscribed to every
// target and waits until it has ACKed every type it subscribes to with at
// least want resources each (and a route configuration); any NACK fails
// the test.
func checkGRPCClientAccepts(t *testing.T, srv *xds.Server, want map[string]int, targets []string) {
	lis := servers.LowListener(t)
	g := grpc.NewServer(ads.ServerOptions()...)
	srv.Register(g)
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(lis) }()
	defer func() { srv.Close(); g.Stop(); <-served }()

	boot, err := xds.GRPCBootstrap(lis.Addr().String(), "hostile-client", model.Locality{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bootFile := filepath.Join(t.TempDir(), "bootstrap.json")
	if err := os.WriteFile(bootFile, boot, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", "GRPC_XDS_BOOTSTRAP="+bootFile, targetsEnv+"="+strings.Join(targets, ","))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()

	// grpc-go 1.85 runs one xDS client (one stream) per target.
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the grpc-go client exited: %v\n%s", err, out.String())
		default:
		}
		synced, withEDS := 0, 0
		var summary []string
		for _, p := range srv.Proxies() {
			acked := map[string]bool{}
			for _, ts := range p.Types {
				if ts.LastNack != nil {
					t.Fatalf("grpc-go NACKed %s version %s: %s", ts.TypeURL, ts.LastNack.Version, ts.LastNack.Error)
				}
				acked[ts.TypeURL] = ts.SentNonce != "" && ts.AckedNonce == ts.SentNonce && ts.Resources > 0
			}
			if acked[translate.ListenerType] && acked[translate.RouteType] && acked[translate.ClusterType] {
				synced++
				if acked[translate.EndpointType] {
					withEDS++
				}
			}
			summary = append(summary, fmt.Sprint(acked))
		}
		if synced == len(targets) && (withEDS > 0 || want[translate.EndpointType] == 0) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the grpc-go client did not ACK every type within 60s: %d of %d targets synced (want %v); per stream %v\n%s",
				synced, len(targets), want, summary, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitFor polls cond until it holds, failing after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
