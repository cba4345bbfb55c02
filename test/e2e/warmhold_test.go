package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/test/servers"
)

const (
	ordersCluster   = "outbound|8080||orders.vm.internal"
	paymentsCluster = "outbound|9090||payments.vm.internal"
)

// withPayments is a services file with orders and payments.vm.internal.
func withPayments() string {
	return ordersFile("127.0.0.1") +
		"  - name: payments\n    ports: [{name: http, port: 9090, protocol: HTTP}]\n    endpoints:\n      - {address: 127.0.0.5, locality: r1/z1}\n"
}

// cdsLog records every CDS response of one stream, ACKing each.
type cdsLog struct {
	mu    sync.Mutex
	sets  [][]string // SotW: the clusters of each response
	delta []*discovery.DeltaDiscoveryResponse
	last  string // SotW version_info of the last response
}

func (l *cdsLog) snapshot() (sets [][]string, delta []*discovery.DeltaDiscoveryResponse) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.sets), slices.Clone(l.delta)
}

// sotwCDS opens a SotW ADS stream as an Envoy sidecar subscribing to
// every cluster, saying it holds version (""; none), and records every
// response until the test ends.
func sotwCDS(t *testing.T, xdsAddr, id, version string) *cdsLog {
	t.Helper()
	conn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); conn.Close() })
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &core.Node{Id: "sidecar~127.0.0.1~" + id + "~default.svc.cluster.local", Cluster: id}
	if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: clusterType, VersionInfo: version}); err != nil {
		t.Fatal(err)
	}
	l := &cdsLog{last: version}
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			var names []string
			for _, a := range r.GetResources() {
				var c cluster.Cluster
				if proto.Unmarshal(a.GetValue(), &c) == nil {
					names = append(names, c.GetName())
				}
			}
			slices.Sort(names)
			l.mu.Lock()
			l.sets = append(l.sets, names)
			l.last = r.GetVersionInfo()
			l.mu.Unlock()
			_ = st.Send(&discovery.DiscoveryRequest{TypeUrl: clusterType, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
		}
	}()
	return l
}

// recordDelta records every response of a delta stream, ACKing each.
func recordDelta(t *testing.T, st discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient) *cdsLog {
	l := &cdsLog{}
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			l.mu.Lock()
			l.delta = append(l.delta, r)
			l.mu.Unlock()
			_ = st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
		}
	}()
	return l
}

// deltaHolds is what a delta client holds after its responses.
func deltaHolds(held map[string]string, rs []*discovery.DeltaDiscoveryResponse) map[string]string {
	out := map[string]string{}
	for k, v := range held {
		out[k] = v
	}
	for _, r := range rs {
		for _, res := range r.GetResources() {
			out[res.GetName()] = res.GetVersion()
		}
		for _, n := range r.GetRemovedResources() {
			delete(out, n)
		}
	}
	return out
}

// TestWarmStartHoldsReconnectingClients is the regression test of the
// chaos finding (issue #25, state-full-kill): meshfed's state directory
// cannot be written (here read-only), so the state with a service
// registered since is not saved; meshfed is SIGKILLed and restarts from
// the older saved state while its registry is not back yet. A client
// that reconnects holding the newer clusters (delta and SotW) must never
// be told to drop the service — not even briefly — and gets the truth
// once the registry syncs; a new client gets the restored state at once.
func TestWarmStartHoldsReconnectingClients(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	services := filepath.Join(dir, "services.yaml")
	writeFile(t, services, ordersFile("127.0.0.1"))
	config, xdsAddr, adminAddr := stateDirConfig(t, dir, true)
	b, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	// The hold's bound is syncTimeout: long enough for the test's steps.
	writeFile(t, config, strings.Replace(string(b), "syncTimeout: 1s", "syncTimeout: 60s", 1))
	fs := servers.NewStateFS(t, filepath.Join(dir, "state"))
	if !fs.OK() {
		t.Skip("no tmpfs in a user namespace here: the state directory cannot be made read-only")
	}
	stateFile := filepath.Join(dir, "state", "vms.json")

	m := startMeshfedIn(t, fs, config, xdsAddr, adminAddr)
	m.waitReady(t, 30*time.Second)
	eventually(t, 20*time.Second, "state of orders saved", func() error {
		return fs.Inside("grep", "-q", "orders", stateFile)
	})
	delta, closeDelta := deltaCDS(t, xdsAddr, nil)
	dlog := recordDelta(t, delta)
	sotwLog := sotwCDS(t, xdsAddr, "sotw", "")

	// The state directory turns read-only; payments is registered and
	// reaches both clients, but is not saved.
	if err := fs.ReadOnly(true); err != nil {
		t.Fatal(err)
	}
	writeFile(t, services, withPayments())
	var held map[string]string
	var sotwVersion string
	eventually(t, 20*time.Second, "both clients hold payments", func() error {
		sets, _ := sotwLog.snapshot()
		_, ds := dlog.snapshot()
		held = deltaHolds(nil, ds)
		if _, ok := held[paymentsCluster]; !ok {
			return fmt.Errorf("delta client holds %v", held)
		}
		if len(sets) == 0 || !slices.Contains(sets[len(sets)-1], paymentsCluster) {
			return fmt.Errorf("SotW client's CDS responses %v", sets)
		}
		sotwLog.mu.Lock()
		sotwVersion = sotwLog.last
		sotwLog.mu.Unlock()
		return nil
	})
	eventually(t, 20*time.Second, "the save failure logged", func() error {
		return contains(m.logs.String(), "cannot save registry state")
	})
	if err := fs.Inside("grep", "-qs", "payments", stateFile, strings.TrimSuffix(stateFile, ".json")+".log"); err == nil {
		t.Fatal("payments was saved to the read-only state directory: the test cannot show anything")
	}
	closeDelta()

	// SIGKILL; the registry's backend is down while meshfed restarts from
	// the older state (the directory is writable again: the disk was
	// freed, its content is still stale).
	if err := m.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-m.done
	if err := fs.ReadOnly(false); err != nil {
		t.Fatal(err)
	}
	away := services + ".away"
	if err := os.Rename(services, away); err != nil {
		t.Fatal(err)
	}
	m = startMeshfedIn(t, fs, config, xdsAddr, adminAddr)
	re, closeRe := deltaCDS(t, xdsAddr, held)
	defer closeRe()
	relog := recordDelta(t, re)
	resotw := sotwCDS(t, xdsAddr, "sotw", sotwVersion)

	// A new client gets the restored state (orders only) at once.
	fresh, closeFresh := deltaCDS(t, xdsAddr, nil)
	defer closeFresh()
	flog := recordDelta(t, fresh)
	eventually(t, 20*time.Second, "a new client gets the restored state", func() error {
		_, ds := flog.snapshot()
		got := deltaHolds(nil, ds)
		if _, ok := got[ordersCluster]; !ok || len(got) != 1 {
			return fmt.Errorf("new client holds %v, want the restored %s", got, ordersCluster)
		}
		return nil
	})
	keptPayments(t, resotw, relog)
	// The reconnecting clients are held, and /debug/syncz says so.
	eventually(t, 20*time.Second, "reconnecting streams shown held", func() error {
		var ps []admin.ProxySync
		m.getJSON(t, "/debug/syncz", &ps)
		n := 0
		for _, p := range ps {
			for _, ty := range p.Types {
				if ty.HeldRestored {
					n++
				}
			}
		}
		if n != 2 {
			return fmt.Errorf("%d held types on /debug/syncz, want 2 (delta and SotW CDS)", n)
		}
		return nil
	})
	if err := contains(m.logs.String(), "xds stream held"); err != nil {
		t.Error(err)
	}

	// The backend is back: the registry syncs, the held clients converge
	// to the truth.
	if err := os.Rename(away, services); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "held clients released with orders and payments", func() error {
		sets, _ := resotw.snapshot()
		if len(sets) == 0 || !slices.Equal(sets[len(sets)-1], []string{ordersCluster, paymentsCluster}) {
			return fmt.Errorf("SotW CDS responses %v", sets)
		}
		_, ds := relog.snapshot()
		if len(ds) == 0 {
			return fmt.Errorf("no delta response after the release")
		}
		if got := deltaHolds(held, ds); len(got) != 2 {
			return fmt.Errorf("delta client holds %v", got)
		}
		_, fds := flog.snapshot()
		if got := deltaHolds(nil, fds); len(got) != 2 {
			return fmt.Errorf("new client holds %v", got)
		}
		return nil
	})

	keptPayments(t, resotw, relog)
}

// keptPayments fails the test if a response the reconnecting clients got
// dropped payments.
func keptPayments(t *testing.T, sotw, delta *cdsLog) {
	t.Helper()
	sets, _ := sotw.snapshot()
	for i, s := range sets {
		if !slices.Contains(s, paymentsCluster) {
			t.Fatalf("SotW response %d after the restart holds %v: payments dropped", i, s)
		}
	}
	_, ds := delta.snapshot()
	for i, r := range ds {
		if len(r.GetRemovedResources()) > 0 {
			t.Fatalf("delta response %d after the restart removes %v", i, r.GetRemovedResources())
		}
	}
}
