package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/test/servers"
)

// startBackendFunc is startBackend with a hook run before each call: a
// non-nil error fails the call with it.
func startBackendFunc(t *testing.T, name string, hook func(ctx context.Context) error) *backend {
	t.Helper()
	lis := servers.LowListener(t)
	s := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := hook(ctx); err != nil {
			return nil, err // no response headers: the call may be retried
		}
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-backend", name))
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return &backend{name: name, host: "127.0.0.1", port: lis.Addr().(*net.TCPAddr).Port}
}

// trafficServices lists services of one gRPC port 8080 in a file
// registry: name → endpoints (backend, version label).
func trafficServices(svcs map[string][][2]any) string {
	var b strings.Builder
	b.WriteString("services:\n")
	for name, eps := range svcs {
		fmt.Fprintf(&b, "  - name: %s\n    ports: [{name: grpc, port: 8080, protocol: GRPC}]\n    endpoints:\n", name)
		for _, e := range eps {
			fmt.Fprintf(&b, "      - %s\n", localEndpoint(e[0].(*backend), e[1].(string)))
		}
	}
	return b.String()
}

// collect reads n calls of c, failing after timeout.
func (c *client) collect(t *testing.T, n int, timeout time.Duration) []clientLine {
	t.Helper()
	deadline := time.After(timeout)
	out := make([]clientLine, 0, n)
	for len(out) < n {
		select {
		case l := <-c.lines:
			out = append(out, l)
		case <-deadline:
			t.Fatalf("only %d of %d calls within %s", len(out), n, timeout)
		}
	}
	return out
}

// drain discards the calls buffered so far.
func (c *client) drain() {
	for {
		select {
		case <-c.lines:
		default:
			return
		}
	}
}

const trafficDR = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: e2e}
spec:
  host: echo.vm.internal
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: sticky, namespace: e2e}
spec:
  host: sticky.vm.internal
  trafficPolicy:
    loadBalancer: {consistentHash: {httpHeaderName: x-user}}
`

func echoVS(w1, w2 int) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: e2e}
spec:
  hosts: [echo.vm.internal]
  http:
  - match: [{headers: {x-canary: {exact: "yes"}}}]
    route: [{destination: {host: echo.vm.internal, subset: v2}}]
  - route:
    - {destination: {host: echo.vm.internal, subset: v1}, weight: %d}
    - {destination: {host: echo.vm.internal, subset: v2}, weight: %d}
`, w1, w2)
}

const otherVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: faulty, namespace: e2e}
spec:
  hosts: [faulty.vm.internal]
  http:
  - fault: {abort: {grpcStatus: UNAVAILABLE, percentage: {value: 50}}}
    route: [{destination: {host: faulty.vm.internal}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: flaky, namespace: e2e}
spec:
  hosts: [flaky.vm.internal]
  http:
  - retries: {attempts: 2, retryOn: unavailable}
    route: [{destination: {host: flaky.vm.internal}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: slow, namespace: e2e}
spec:
  hosts: [slow.vm.internal]
  http:
  - timeout: 300ms
    route: [{destination: {host: slow.vm.internal}}]
`

// outlierDR ejects an endpoint of ejecting.vm.internal whose calls all
// fail (grpc-go: failure-percentage ejection, see xds.grpcOutlier), and
// weighs spread.vm.internal's localities 80/20.
const outlierDR = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ejecting, namespace: e2e}
spec:
  host: ejecting.vm.internal
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 3, interval: 1s, baseEjectionTime: 5m, maxEjectionPercent: 50}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: spread, namespace: e2e}
spec:
  host: spread.vm.internal
  trafficPolicy:
    loadBalancer:
      localityLbSetting: {distribute: [{from: "*", to: {"test/zone-a": 80, "test/zone-b": 20}}]}
`

// TestTrafficManagementGRPC drives Istio traffic rules from a config
// directory through the built binary to real grpc-go xDS clients calling
// real gRPC backends: a 90/10 canary split shifted to 0/100 without the
// client reconnecting, a header route to a DestinationRule subset, fault
// abort, retries, a timeout, ring-hash stickiness and outlier detection.
func TestTrafficManagementGRPC(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := t.TempDir()
	v1, v2 := startBackend(t, "v1"), startBackend(t, "v2")
	var flakyCalls atomic.Int64
	flaky := startBackendFunc(t, "flaky", func(context.Context) error {
		if flakyCalls.Add(1)%2 == 1 { // every first attempt fails
			return status.Error(codes.Unavailable, "flaky: first attempt")
		}
		return nil
	})
	// The slow backend answers after 3s; when the call's deadline (the
	// route timeout, sent as grpc-timeout) passes first it answers
	// DEADLINE_EXCEEDED, so the client sees that code whichever of its own
	// timer and the server's answer comes first.
	slow := startBackendFunc(t, "slow", func(ctx context.Context) error {
		select {
		case <-time.After(3 * time.Second):
			return nil
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	})
	broken := startBackendFunc(t, "broken", func(context.Context) error {
		return status.Error(codes.Internal, "broken: every call fails")
	})
	writeFile(t, filepath.Join(dir, "services.yaml"), trafficServices(map[string][][2]any{
		"ejecting": {{v1, "v1"}, {broken, "v2"}},
		"echo":     {{v1, "v1"}, {v2, "v2"}},
		"sticky":   {{v1, "v1"}, {v2, "v2"}},
		"faulty":   {{v1, "v1"}},
		"flaky":    {{flaky, "v1"}},
		"slow":     {{slow, "v1"}},
	})+fmt.Sprintf(`  - name: spread
    ports: [{name: grpc, port: 8080, protocol: GRPC}]
    endpoints:
      - {address: 127.0.0.1, ports: {grpc: %d}, locality: test/zone-a}
      - {address: 127.0.0.1, ports: {grpc: %d}, locality: test/zone-b}
`, v1.port, v2.port))
	traffic := filepath.Join(dir, "traffic")
	if err := os.Mkdir(traffic, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(traffic, "dr.yaml"), trafficDR)
	writeFile(t, filepath.Join(traffic, "echo.yaml"), echoVS(90, 10))
	writeFile(t, filepath.Join(traffic, "other.yaml"), otherVS)
	writeFile(t, filepath.Join(traffic, "outlier.yaml"), outlierDR)
	config, xdsAddr, adminAddr := writeClusters(t, dir,
		"  - {name: vms, kind: file, domain: vm.internal, file: {path: services.yaml}}\nconfigSources:\n  - {name: local, dir: traffic}\n")

	if out, stderr, code := meshfedCmd(t, "validate", config); code != 0 || !strings.Contains(out, "ok: VirtualService e2e/echo") {
		t.Fatalf("validate: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	m := startMeshfed(t, config, xdsAddr, adminAddr)
	m.waitReady(t, 20*time.Second)
	bootstrap := func(id string) string {
		b, stderr, code := meshfedCmd(t, "bootstrap", "--grpc", "--config", config, "--node-id", id)
		if code != 0 {
			t.Fatalf("bootstrap: exit %d: %s", code, stderr)
		}
		return b
	}
	start := func(id, target string, extra ...string) *client {
		return startClientCmd(t, bootstrap(id), append([]string{xdsClientBin, "-target", target, "-interval", "5ms", "-duration", "3m"}, extra...)...)
	}

	split := start("split", "xds:///echo.vm.internal:8080")
	canary := start("canary", "xds:///echo.vm.internal:8080", "-header", "x-canary=yes")

	t.Run("header route to a subset", func(t *testing.T) {
		canary.waitFor(t, "v2", 100, 30*time.Second)
	})

	t.Run("90/10 split, then 0/100 without reconnecting", func(t *testing.T) {
		split.waitFor(t, "v1", 1, 30*time.Second) // routes in place
		connected := proxyConnected(t, m, "split")
		const n = 400
		counts := map[string]int{}
		for _, l := range split.collect(t, n, time.Minute) {
			if l.Err != "" {
				t.Fatalf("call failed: %+v", l)
			}
			counts[l.Backend]++
		}
		// v2 share: expected 10%; binomial sd over 400 calls is 1.5
		// points; accept 4%-18% (4 sd below, 5 above).
		share := float64(counts["v2"]) / n
		t.Logf("split over %d calls: %v (v2 %.1f%%)", n, counts, 100*share)
		if share < 0.04 || share > 0.18 || counts["v1"]+counts["v2"] != n {
			t.Fatalf("v2 share %.3f (%v), want 0.10 within 0.04-0.18", share, counts)
		}
		writeFile(t, filepath.Join(traffic, "echo.yaml"), echoVS(0, 100))
		split.drain()
		split.waitFor(t, "v2", 200, 30*time.Second)
		if again := proxyConnected(t, m, "split"); !again.Equal(connected) {
			t.Errorf("client reconnected (connected %v, then %v)", connected, again)
		}
	})

	t.Run("an invalid edit is rejected alone, the last good rule stays", func(t *testing.T) {
		writeFile(t, filepath.Join(traffic, "echo.yaml"), echoVS(-5, 100))
		eventually(t, 20*time.Second, "the rejection in /debug/configz", func() error {
			var st istioconfig.Status
			if code := m.getJSON(t, "/debug/configz", &st); code != 200 {
				return fmt.Errorf("configz %d", code)
			}
			if len(st.Rejected) != 1 {
				return fmt.Errorf("rejected %+v", st.Rejected)
			}
			r := st.Rejected[0]
			if r.Name != "echo" || !r.KeptLastGood || !strings.HasSuffix(r.Source, "echo.yaml:1") || !strings.Contains(r.Reason, "weight -5") {
				return fmt.Errorf("rejection %+v", r)
			}
			if len(st.InForce) != 8 {
				return fmt.Errorf("in force %+v, want all 8 objects", st.InForce)
			}
			return nil
		})
		split.drain()
		split.waitFor(t, "v2", 100, 30*time.Second)
	})

	t.Run("fault abort", func(t *testing.T) {
		c := start("faulty", "xds:///faulty.vm.internal:8080")
		c.waitFor(t, "v1", 1, 30*time.Second)
		const n = 300
		aborted := 0
		for _, l := range c.collect(t, n, time.Minute) {
			switch {
			case l.Err == "" && l.Backend == "v1":
			case l.Code == "Unavailable" && strings.Contains(l.Err, "fault injection"):
				aborted++
			default:
				t.Fatalf("unexpected call: %+v", l)
			}
		}
		// 50% aborted; sd over 300 calls is 2.9 points: accept 38%-62%.
		t.Logf("fault abort: %d of %d calls aborted with UNAVAILABLE", aborted, n)
		if share := float64(aborted) / n; share < 0.38 || share > 0.62 {
			t.Errorf("aborted share %.3f, want 0.50 within 0.38-0.62", share)
		}
	})

	t.Run("retry recovers from a failed first attempt", func(t *testing.T) {
		c := start("flaky", "xds:///flaky.vm.internal:8080")
		c.waitFor(t, "flaky", 1, 30*time.Second)
		for _, l := range c.collect(t, 50, 30*time.Second) {
			if l.Err != "" {
				t.Fatalf("call failed despite the retry policy: %+v", l)
			}
		}
		before := flakyCalls.Load()
		c.waitFor(t, "flaky", 50, 30*time.Second)
		// 50 successful calls in a row, each after a failed attempt.
		if attempts := flakyCalls.Load() - before; attempts < 100 {
			t.Errorf("backend saw %d attempts for 50 calls, want at least 100 (every first attempt fails)", attempts)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		c := startClientCmd(t, bootstrap("slow"), xdsClientBin, "-target", "xds:///slow.vm.internal:8080", "-interval", "5ms", "-duration", "3m", "-rpc-timeout", "10s")
		for _, l := range c.collect(t, 3, 30*time.Second) {
			if l.Code != "DeadlineExceeded" {
				t.Errorf("call to a 3s backend with a 300ms route timeout: %+v, want DeadlineExceeded", l)
			}
		}
	})

	t.Run("outlier detection ejects a failing endpoint", func(t *testing.T) {
		c := start("ejecting", "xds:///ejecting.vm.internal:8080")
		// Round robin sends calls to both endpoints until the first
		// interval after the broken one failed them all.
		failed := 0
		for _, l := range c.collect(t, 50, 30*time.Second) {
			if l.Err != "" {
				failed++
			}
		}
		if failed == 0 {
			t.Fatal("no call reached the broken endpoint: the test proves nothing")
		}
		// Ejected for 5 minutes: every call now goes to v1.
		c.waitFor(t, "v1", 300, 30*time.Second)
	})

	t.Run("locality weights 80/20", func(t *testing.T) {
		c := start("spread", "xds:///spread.vm.internal:8080")
		c.waitFor(t, "v1", 1, 30*time.Second)
		const n = 400
		counts := map[string]int{}
		for _, l := range c.collect(t, n, time.Minute) {
			if l.Err != "" {
				t.Fatalf("call failed: %+v", l)
			}
			counts[l.Backend]++
		}
		// zone-b (v2) share: expected 20%; binomial sd over 400 calls is
		// 2 points: accept 12%-30%. Without the weights it would be 50%.
		share := float64(counts["v2"]) / n
		t.Logf("locality split over %d calls: %v (zone-b %.1f%%)", n, counts, 100*share)
		if share < 0.12 || share > 0.30 {
			t.Errorf("zone-b share %.3f (%v), want 0.20 within 0.12-0.30", share, counts)
		}
	})

	t.Run("ring hash stickiness by header", func(t *testing.T) {
		for _, user := range []string{"alice", "bob", "carol"} {
			c := start("sticky-"+user, "xds:///sticky.vm.internal:8080", "-header", "x-user="+user)
			first := c.collect(t, 1, 30*time.Second)[0]
			if first.Err != "" {
				t.Fatalf("%s: %+v", user, first)
			}
			// Round robin over two backends would alternate; the hash keeps
			// every call of one user on one backend.
			c.waitFor(t, first.Backend, 100, 30*time.Second)
		}
	})
}

// TestIstiodReceivesTrafficRules: the VirtualService and DestinationRule
// in force reach a real istiod over MCP, unchanged, and istiod routes its
// own grpc-go client by them (the split shifted to the v2 subset).
func TestIstiodReceivesTrafficRules(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	if _, ok := servers.IstiodBinary(); !ok {
		servers.Missing(t, "istiod "+servers.IstiodVersion, "tools/testservers/build.sh istiod")
	}
	b1 := startBackendOn(t, "v1", "127.0.0.1", 0)
	b2 := startBackendOn(t, "v2", "127.0.0.2", 0)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "services.yaml"), servicesYAML(
		fmt.Sprintf("{address: 127.0.0.1, ports: {grpc: %d}, labels: {version: v1}, locality: test/zone-a}", b1.port),
		fmt.Sprintf("{address: 127.0.0.2, ports: {grpc: %d}, labels: {version: v2}, locality: test/zone-a}", b2.port)))
	traffic := filepath.Join(dir, "traffic")
	if err := os.Mkdir(traffic, 0o755); err != nil {
		t.Fatal(err)
	}
	// The client's namespace is default: the rules live there.
	rules := strings.ReplaceAll(strings.SplitN(trafficDR, "---", 2)[0]+"---\n"+echoVS(0, 100), "namespace: e2e", "namespace: default")
	writeFile(t, filepath.Join(traffic, "echo.yaml"), rules)
	config, xdsAddr, adminAddr := writeClusters(t, dir,
		"  - {name: vms, kind: file, domain: vm.internal, file: {path: services.yaml}}\nconfigSources:\n  - {name: local, dir: traffic}\n")
	startMeshfed(t, config, xdsAddr, adminAddr)
	d := servers.StartIstiod(t, servers.IstiodOptions{ConfigSource: xdsAddr})

	eventually(t, 60*time.Second, "istiod holds the VirtualService and DestinationRule", func() error {
		b, err := d.Get("/debug/configz")
		if err != nil {
			return err
		}
		var all []struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
			Spec json.RawMessage `json:"spec"`
		}
		if err := json.Unmarshal(b, &all); err != nil {
			return err
		}
		found := map[string]string{}
		for _, c := range all {
			if c.Kind == "VirtualService" || c.Kind == "DestinationRule" {
				found[c.Kind+" "+c.Metadata.Namespace+"/"+c.Metadata.Name] = string(c.Spec)
			}
		}
		vs, dr := found["VirtualService default/echo"], found["DestinationRule default/echo"]
		if !strings.Contains(vs, `"weight":100`) || !strings.Contains(vs, "x-canary") || !strings.Contains(dr, `"name":"v2"`) {
			return fmt.Errorf("istiod holds %v", found)
		}
		return nil
	})

	bootstrap, stderr, code := meshfedCmd(t, "bootstrap", "--grpc", "--xds", d.GRPCAddr,
		"--node-id", "sidecar~127.0.0.1~client.default~default.svc.cluster.local")
	if code != 0 {
		t.Fatalf("bootstrap: exit %d: %s", code, stderr)
	}
	c := startClient(t, bootstrap, "xds:///echo.vm.internal:8080")
	c.waitFor(t, "v2", 30, 60*time.Second)
}
