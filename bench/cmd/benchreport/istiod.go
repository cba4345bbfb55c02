package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/test/servers"
	"github.com/meshfed/meshfed/xds/translate"
)

// runIS measures registry write → ACK of the changed endpoints by a client
// of istiod whose only config source is meshfed (MCP over xDS), beside the
// same client connected to meshfed directly, at r.c.services services.
func (r *runner) runIS() error {
	bin, ok := servers.IstiodBinary()
	if !ok {
		r.rep.notes = append(r.rep.notes, "IS skipped: istiod not built (tools/testservers/build.sh istiod)")
		return nil
	}
	srv, err := r.server(mfT)
	if err != nil {
		return err
	}
	defer srv.stop()
	stop, grpcAddr, _, err := startIstiod(bin, srv.xds, "")
	if err != nil {
		return err
	}
	defer stop()
	n := r.c.dsEvents * 2
	svcs := make([]int, n)
	for i := range svcs {
		svcs[i] = (r.c.services/3 + 11*i) % r.c.services
	}
	direct, err := r.eventLatency(srv, srv.xds, svcs[:n/2])
	if err != nil {
		return fmt.Errorf("direct: %w", err)
	}
	via, err := r.eventLatency(srv, grpcAddr, svcs[n/2:])
	if err != nil {
		return fmt.Errorf("via istiod: %w", err)
	}
	r.rep.add(row{id: "IS", figure: fmt.Sprintf("write → client ACK, meshfed direct (%d services)", r.c.services), unit: "ms", mf: &direct})
	r.rep.add(row{id: "IS", figure: "write → client ACK through istiod (MCP over xDS)", unit: "ms", mf: &via,
		note: "one SotW EDS client of the changed services' clusters; istiod " + servers.IstiodVersion +
			" with PILOT_DEBOUNCE_AFTER=10ms (default 100ms); includes istiod's debounce and push"})
	return nil
}

// eventLatency writes one endpoint change per service in svcs, one at a
// time, and measures until a SotW client of addr (subscribed to the
// services' EDS) received and ACKed a response for the changed cluster.
func (r *runner) eventLatency(srv *proc, addr string, svcs []int) (bench.Summary, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return bench.Summary{}, err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return bench.Summary{}, err
	}
	node := &core.Node{Id: "sidecar~127.0.0.1~bench.default~default.svc.cluster.local", Cluster: "bench"}
	names := make([]string, len(svcs))
	for i, s := range svcs {
		names[i] = translate.ClusterName(bench.Host(s), bench.Port)
	}
	if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: translate.EndpointType, ResourceNames: names}); err != nil {
		return bench.Summary{}, err
	}
	// got receives, per response, the cluster names it carried and when
	// its ACK was sent.
	type resp struct {
		names map[string]bool
		ack   int64
	}
	got := make(chan resp, 64)
	go func() {
		for {
			m, err := st.Recv()
			if err != nil {
				close(got)
				return
			}
			_ = st.Send(&discovery.DiscoveryRequest{TypeUrl: m.GetTypeUrl(), VersionInfo: m.GetVersionInfo(),
				ResponseNonce: m.GetNonce(), ResourceNames: names})
			rs := resp{names: map[string]bool{}, ack: time.Now().UnixNano()}
			for _, a := range m.GetResources() {
				rs.names[clusterOf(a.GetValue())] = true
			}
			got <- rs
		}
	}()
	// The first responses carry every subscribed cluster.
	seen := map[string]bool{}
	for len(seen) < len(names) {
		select {
		case rs, ok := <-got:
			if !ok {
				return bench.Summary{}, fmt.Errorf("stream ended during the initial sync")
			}
			for n := range rs.names {
				seen[n] = true
			}
		case <-time.After(2 * time.Minute):
			return bench.Summary{}, fmt.Errorf("initial sync: %d of %d clusters", len(seen), len(names))
		}
	}
	var lat []float64
	for i, s := range svcs {
		var ev bench.Event
		if err := post(fmt.Sprintf("%s/event?svc=%d", srv.ctl, s), &ev); err != nil {
			return bench.Summary{}, err
		}
	wait:
		for {
			select {
			case rs, ok := <-got:
				if !ok {
					return bench.Summary{}, fmt.Errorf("stream ended")
				}
				if rs.names[names[i]] {
					lat = append(lat, float64(rs.ack-ev.Stamp)/1e6)
					break wait
				}
			case <-time.After(time.Minute):
				return bench.Summary{}, fmt.Errorf("event %d on %s: no response", ev.Seq, names[i])
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return bench.Summarize(lat), nil
}

// clusterOf reads the cluster_name (field 1) of an encoded
// ClusterLoadAssignment without decoding the rest.
func clusterOf(b []byte) string {
	if len(b) < 2 || b[0] != 0x0a {
		return ""
	}
	n, w := int(b[1]), 2
	if n >= 0x80 { // two-byte length: names here are short
		if len(b) < 3 {
			return ""
		}
		n, w = int(b[1]&0x7f)|int(b[2])<<7, 3
	}
	if len(b) < w+n {
		return ""
	}
	return string(b[w : w+n])
}

// startIstiod runs istiod on loopback ports with configSource (an xDS
// address: MCP over xDS) or else configDir (a directory of Istio YAML,
// --configDir) as its only config source, as test/servers.StartIstiod
// does, and waits for /ready. pid is istiod's process id.
func startIstiod(bin, configSource, configDir string) (stop func(), grpcAddr string, pid int, err error) {
	dir, err := os.MkdirTemp("", "meshfed-bench-istiod")
	if err != nil {
		return nil, "", 0, err
	}
	port := func() string {
		l, err := bench.Listen("127.0.0.1:0")
		if err != nil {
			return "127.0.0.1:0"
		}
		defer l.Close()
		return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	}
	grpcAddr, httpAddr := port(), port()
	mesh := filepath.Join(dir, "mesh.yaml")
	nets := filepath.Join(dir, "meshNetworks.yaml")
	meshCfg := "configSources:\n- address: xds://" + configSource + "\n"
	args := []string{"discovery", "--registries=", "--meshConfig", mesh}
	if configSource == "" {
		meshCfg = "{}\n"
		args = append(args, "--configDir", configDir)
	}
	if err := os.WriteFile(mesh, []byte(meshCfg), 0o600); err != nil {
		return nil, "", 0, err
	}
	if err := os.WriteFile(nets, []byte("networks: {}\n"), 0o600); err != nil {
		return nil, "", 0, err
	}
	logf, err := os.Create(filepath.Join(dir, "istiod.log"))
	if err != nil {
		return nil, "", 0, err
	}
	cmd := exec.Command(bin, append(args, "--networksConfig", nets,
		"--httpAddr", httpAddr, "--grpcAddr", grpcAddr, "--monitoringAddr", port(), "--httpsAddr", port(),
		"--secureGRPCAddr=", "--namespace", "istio-system")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "ENABLE_CA_SERVER=false", "PILOT_MAX_REQUESTS_PER_SECOND=10000",
		"PILOT_DEBOUNCE_AFTER=10ms", "PILOT_DEBOUNCE_MAX=100ms", "POD_NAME=istiod-bench", "POD_NAMESPACE=istio-system", "HOME="+dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, "", 0, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	stop = func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		os.RemoveAll(dir)
	}
	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		resp, err := c.Get("http://" + httpAddr + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return stop, grpcAddr, cmd.Process.Pid, nil
			}
		}
		select {
		case <-done:
			b, _ := os.ReadFile(filepath.Join(dir, "istiod.log"))
			stop()
			return nil, "", 0, fmt.Errorf("istiod exited: %s", lastLines(string(b), 20))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, "", 0, fmt.Errorf("istiod not ready in 3m")
		}
	}
}
