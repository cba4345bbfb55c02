package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/statestore"
)

const clusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

// ordersFile is a services file with orders.vm.internal on port 8080 and
// one endpoint per address.
func ordersFile(addrs ...string) string {
	var b strings.Builder
	b.WriteString("services:\n  - name: orders\n    ports: [{name: grpc, port: 8080, protocol: GRPC}]\n    endpoints:\n")
	for _, a := range addrs {
		fmt.Fprintf(&b, "      - {address: %s, locality: r1/z1}\n", a)
	}
	return b.String()
}

// deltaCDS opens a delta ADS stream as an Envoy sidecar with a wildcard
// CDS subscription, telling the server the clusters it already holds.
func deltaCDS(t *testing.T, xdsAddr string, held map[string]string) (discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient, func()) {
	t.Helper()
	conn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = st.Send(&discovery.DeltaDiscoveryRequest{
		Node:                    &core.Node{Id: "sidecar~127.0.0.1~warm~default.svc.cluster.local", Cluster: "warm"},
		TypeUrl:                 clusterType,
		InitialResourceVersions: held,
	})
	if err != nil {
		t.Fatal(err)
	}
	return st, func() { cancel(); conn.Close() }
}

// stateDirConfig writes clusters.yaml with one file registry "vms" over
// services.yaml in dir, a state directory and a short syncTimeout.
func stateDirConfig(t *testing.T, dir string, withState bool) (config, xdsAddr, adminAddr string) {
	t.Helper()
	config, xdsAddr, adminAddr = writeClusters(t, dir, "  - {name: vms, kind: file, domain: vm.internal, file: {path: services.yaml}}\n")
	b, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	extra := "syncTimeout: 1s\n"
	if withState {
		extra += "state: {dir: state}\n"
	}
	writeFile(t, config, string(b)+extra)
	return config, xdsAddr, adminAddr
}

// TestWarmStartWhileBackendDown: meshfed restarted while its registry is
// unreachable (the services file is gone) serves the state it saved, and a
// reconnecting delta client that lists the clusters it holds is told of
// no removal, also after syncTimeout.
func TestWarmStartWhileBackendDown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	services := filepath.Join(dir, "services.yaml")
	writeFile(t, services, ordersFile("127.0.0.1", "127.0.0.2"))
	config, xdsAddr, adminAddr := stateDirConfig(t, dir, true)

	m := startMeshfed(t, config, xdsAddr, adminAddr)
	held := map[string]string{}
	st, closeStream := deltaCDS(t, xdsAddr, nil)
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.GetResources() {
		held[r.GetName()] = r.GetVersion()
	}
	want := "outbound|8080||orders.vm.internal"
	if _, ok := held[want]; !ok {
		t.Fatalf("first CDS response holds %v, want %s", held, want)
	}
	closeStream()
	if err := m.stop(20 * time.Second); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "vms.json")); err != nil {
		t.Fatalf("no saved state after a clean stop: %v", err)
	}

	// The backend goes down, then meshfed restarts.
	if err := os.Remove(services); err != nil {
		t.Fatal(err)
	}
	m = startMeshfed(t, config, xdsAddr, adminAddr)
	st, closeStream = deltaCDS(t, xdsAddr, held)
	defer closeStream()
	got := make(chan *discovery.DeltaDiscoveryResponse, 16)
	go func() {
		defer close(got)
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			got <- r
			_ = st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
		}
	}()
	// Listen well past syncTimeout (1s).
	deadline := time.After(4 * time.Second)
listen:
	for {
		select {
		case r, ok := <-got:
			if !ok {
				break listen
			}
			if rm := r.GetRemovedResources(); len(rm) > 0 {
				t.Errorf("reconnecting client told to remove %v after a restart with the backend down", rm)
			}
		case <-deadline:
			break listen
		}
	}

	var reg admin.RegistryHealth
	m.getJSON(t, "/healthz/registries/vms", &reg)
	if !reg.Restored || reg.Endpoints != 2 {
		t.Errorf("registry vms %+v, want restored with 2 endpoints", reg)
	}
	var infos []admin.ServiceInfo
	m.getJSON(t, "/debug/registryz", &infos)
	if len(infos) != 1 || !infos[0].Restored || infos[0].Host != "orders.vm.internal" {
		t.Errorf("/debug/registryz = %+v, want orders.vm.internal marked restored", infos)
	}

	// The backend comes back: the registry syncs and is no longer restored.
	writeFile(t, services, ordersFile("127.0.0.1", "127.0.0.2", "127.0.0.3"))
	eventually(t, 10*time.Second, "registry synced, not restored", func() error {
		var reg admin.RegistryHealth
		m.getJSON(t, "/healthz/registries/vms", &reg)
		if reg.Restored || reg.Endpoints != 3 {
			return fmt.Errorf("%+v", reg)
		}
		return nil
	})
}

// TestStateSurvivesSIGKILLMidWrite kills meshfed with SIGKILL while it
// writes its state (the write is slowed down by a test hook): the next
// start restores the previous, complete state.
func TestStateSurvivesSIGKILLMidWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	services := filepath.Join(dir, "services.yaml")
	writeFile(t, services, ordersFile("127.0.0.1", "127.0.0.2"))
	config, xdsAddr, adminAddr := stateDirConfig(t, dir, true)
	stateDir := filepath.Join(dir, "state")

	m := startMeshfedEnv(t, config, xdsAddr, adminAddr, statestore.WritePauseEnv+"=3s")
	waitSaved(t, stateDir, 2)
	writeFile(t, services, ordersFile("127.0.0.1", "127.0.0.2", "127.0.0.3"))
	// The change is written as a new base (a temporary file) or appended
	// to the log (statestore): either is caught half-way.
	var tmp string
	logFile := filepath.Join(stateDir, "vms.log")
	halfRecord := func() bool {
		b, err := os.ReadFile(logFile)
		return err == nil && len(b) > 0 && b[len(b)-1] != '\n'
	}
	eventually(t, 20*time.Second, "a state write in progress", func() error {
		if ms, _ := filepath.Glob(filepath.Join(stateDir, "vms.*.tmp")); len(ms) > 0 {
			tmp = ms[0]
			return nil
		}
		if halfRecord() {
			return nil
		}
		return fmt.Errorf("no temporary file or half-written log record in %s", stateDir)
	})
	if err := m.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-m.done
	t.Logf("killed mid-write (temporary file %q; else the log)", tmp)
	if tmp == "" {
		if !halfRecord() {
			t.Fatal("the log ends in a complete record after SIGKILL; the kill was not mid-write")
		}
	} else if b, err := os.ReadFile(tmp); err != nil {
		t.Fatalf("temporary file gone after SIGKILL: %v", err)
	} else if json.Valid(b) || len(b) == 0 {
		t.Fatalf("the temporary file holds %d bytes of complete JSON; the kill was not mid-write", len(b))
	}

	// Restart with the backend down: the previous state is served.
	if err := os.Remove(services); err != nil {
		t.Fatal(err)
	}
	m = startMeshfed(t, config, xdsAddr, adminAddr)
	eventually(t, 10*time.Second, "previous state restored", func() error {
		var eps []admin.EndpointInfo
		if code, body, err := m.get("/debug/endpointz?host=orders.vm.internal"); err != nil || code != 200 {
			return fmt.Errorf("endpointz: %d %s %v", code, body, err)
		} else if err := json.Unmarshal(body, &eps); err != nil {
			return err
		}
		var addrs []string
		for _, e := range eps {
			addrs = append(addrs, e.Address)
		}
		slices.Sort(addrs)
		if strings.Join(addrs, ",") != "127.0.0.1,127.0.0.2" {
			return fmt.Errorf("served %v, want the previous state 127.0.0.1,127.0.0.2", addrs)
		}
		return nil
	})
	if _, err := os.Stat(tmp); tmp != "" && err == nil {
		t.Error("the unfinished temporary file is still there after the restart")
	}
}

// waitSaved waits until the state file in dir holds n endpoints.
func waitSaved(t *testing.T, dir string, n int) {
	t.Helper()
	eventually(t, 20*time.Second, "first state saved", func() error {
		e, err := readState(dir)
		if err != nil {
			return err
		}
		if got := endpoints(e); got != n {
			return fmt.Errorf("saved %d endpoints", got)
		}
		return nil
	})
}

func readState(dir string) (*statestore.Entry, error) {
	b, err := os.ReadFile(filepath.Join(dir, "vms.json"))
	if err != nil {
		return nil, err
	}
	e := new(statestore.Entry)
	return e, json.Unmarshal(b, e)
}

func endpoints(e *statestore.Entry) int {
	n := 0
	for _, s := range e.Services {
		n += len(s.Endpoints)
	}
	return n
}

// TestWarmStartRestoresLoggedChanges: changes accepted after the first
// saved state are appended to the registry's log (statestore), not
// written as a new file; meshfed killed with SIGKILL after they were
// logged restores them on the next start with the backend down.
func TestWarmStartRestoresLoggedChanges(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	services := filepath.Join(dir, "services.yaml")
	writeFile(t, services, ordersFile("127.0.0.1", "127.0.0.2"))
	config, xdsAddr, adminAddr := stateDirConfig(t, dir, true)
	stateDir := filepath.Join(dir, "state")
	logFile := filepath.Join(stateDir, "vms.log")

	m := startMeshfed(t, config, xdsAddr, adminAddr)
	waitSaved(t, stateDir, 2)
	base, err := os.ReadFile(filepath.Join(stateDir, "vms.json"))
	if err != nil {
		t.Fatal(err)
	}
	// orders loses an endpoint, payments is added: two changes.
	writeFile(t, services, withPayments())
	eventually(t, 20*time.Second, "the changes logged", func() error {
		b, err := os.ReadFile(logFile)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), "payments.vm.internal") || b[len(b)-1] != '\n' {
			return fmt.Errorf("log holds %d bytes without payments complete", len(b))
		}
		return nil
	})
	if b, _ := os.ReadFile(filepath.Join(stateDir, "vms.json")); !slices.Equal(b, base) {
		t.Error("the base state file was rewritten for a change")
	}
	if err := m.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-m.done

	if err := os.Remove(services); err != nil {
		t.Fatal(err)
	}
	m = startMeshfed(t, config, xdsAddr, adminAddr)
	eventually(t, 10*time.Second, "logged changes restored", func() error {
		var reg admin.RegistryHealth
		m.getJSON(t, "/healthz/registries/vms", &reg)
		if !reg.Restored || reg.Services != 2 || reg.Endpoints != 2 {
			return fmt.Errorf("registry vms %+v, want restored with 2 services of 1 endpoint", reg)
		}
		return nil
	})
}
