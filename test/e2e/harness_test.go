package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/test/logbuf"
	"github.com/meshfed/meshfed/test/servers"
)

// binaries built once by TestMain.
var meshfedBin, xdsClientBin, exampleClientBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "meshfed-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	meshfedBin = filepath.Join(dir, "meshfed")
	xdsClientBin = filepath.Join(dir, "xdsclient")
	exampleClientBin = filepath.Join(dir, "grpc-client")
	for bin, pkg := range map[string]string{meshfedBin: "../../cmd/meshfed", xdsClientBin: "./xdsclient", exampleClientBin: "../../examples/grpc-client"} {
		out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, out)
			return 1
		}
	}
	return m.Run()
}

// backend is a real gRPC server on 127.0.0.1 that answers health checks and
// names itself in the "x-backend" response header.
type backend struct {
	name string
	host string
	port int
}

func startBackend(t *testing.T, name string) *backend {
	t.Helper()
	return startBackendOn(t, name, "127.0.0.1", 0)
}

// startBackendOn listens on host:port (port 0: any). Registries that derive
// a service port from their instances want two backends on one port: use
// 127.0.0.1 and 127.0.0.2.
func startBackendOn(t *testing.T, name, host string, port int) *backend {
	t.Helper()
	lis, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(port)))
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-backend", name))
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return &backend{name: name, host: host, port: lis.Addr().(*net.TCPAddr).Port}
}

// meshfed is the built binary running as a child process.
type meshfed struct {
	t      *testing.T
	cmd    *exec.Cmd
	config string
	admin  string
	xds    string
	logs   *logbuf.Buffer
	done   chan struct{}
	err    error
}

// writeClusters writes a clusters.yaml with fresh loopback ports and the
// given registries block (YAML, indented as list items under registries:).
func writeClusters(t *testing.T, dir, registries string) (path, xdsAddr, adminAddr string) {
	t.Helper()
	pick := servers.FreePorts(t, 2)
	xdsAddr = fmt.Sprintf("127.0.0.1:%d", pick[0])
	adminAddr = fmt.Sprintf("127.0.0.1:%d", pick[1])
	cfg := fmt.Sprintf("xds:\n  address: %s\nadmin:\n  address: %s\ndebounce: {quiet: 10ms, max: 100ms}\nregistries:\n%s", xdsAddr, adminAddr, registries)
	path = filepath.Join(dir, "clusters.yaml")
	writeFile(t, path, cfg)
	return path, xdsAddr, adminAddr
}

// writeFile replaces path atomically, as editors and config management do.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func startMeshfed(t *testing.T, config, xdsAddr, adminAddr string) *meshfed {
	t.Helper()
	return startMeshfedEnv(t, config, xdsAddr, adminAddr)
}

// startMeshfedEnv is startMeshfed with extra environment variables
// (NAME=value).
func startMeshfedEnv(t *testing.T, config, xdsAddr, adminAddr string, env ...string) *meshfed {
	t.Helper()
	return startMeshfedIn(t, nil, config, xdsAddr, adminAddr, env...)
}

// startMeshfedIn is startMeshfedEnv with meshfed run inside fs's mount
// namespace (its state directory a tmpfs the test fills or makes
// read-only); nil runs it as startMeshfedEnv does.
func startMeshfedIn(t *testing.T, fs *servers.StateFS, config, xdsAddr, adminAddr string, env ...string) *meshfed {
	t.Helper()
	m := &meshfed{t: t, config: config, admin: adminAddr, xds: xdsAddr, logs: &logbuf.Buffer{}, done: make(chan struct{})}
	argv := []string{meshfedBin, "run", "--config", config, "--log-level", "debug"}
	if fs != nil {
		argv = fs.Wrap(argv)
	}
	m.cmd = exec.Command(argv[0], argv[1:]...)
	m.cmd.Env = append(os.Environ(), env...)
	m.cmd.Stdout = m.logs
	m.cmd.Stderr = m.logs
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { m.err = m.cmd.Wait(); close(m.done) }()
	t.Cleanup(func() {
		select {
		case <-m.done:
		default:
			_ = m.cmd.Process.Kill()
			<-m.done
		}
		if t.Failed() {
			t.Logf("meshfed logs:\n%s", m.logs.String())
		}
	})
	eventually(t, 20*time.Second, "meshfed /healthz answers", func() error {
		select {
		case <-m.done:
			return fmt.Errorf("meshfed exited: %v\n%s", m.err, m.logs.String())
		default:
		}
		code, _, err := m.get("/healthz")
		if err != nil {
			return err
		}
		if code != 200 {
			return fmt.Errorf("status %d", code)
		}
		return nil
	})
	return m
}

// waitReady waits until /readyz answers 200, failing the test after
// timeout.
func (m *meshfed) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "/readyz is 200", func() error {
		code, body, err := m.get("/readyz")
		if err != nil || code != 200 {
			return fmt.Errorf("%d %s %v", code, body, err)
		}
		return nil
	})
}

// stop sends SIGTERM and returns the exit error (nil = exit 0).
func (m *meshfed) stop(timeout time.Duration) error {
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
		return m.err
	case <-time.After(timeout):
		return fmt.Errorf("meshfed did not exit %s after SIGTERM", timeout)
	}
}

func (m *meshfed) get(path string) (int, []byte, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + m.admin + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func (m *meshfed) getJSON(t *testing.T, path string, v any) int {
	t.Helper()
	code, body, err := m.get(path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, body)
	}
	return code
}

// meshfedCmd runs a meshfed subcommand to completion.
func meshfedCmd(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	cmd := exec.Command(meshfedBin, args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("meshfed %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

// client is a proxyless grpc-go xDS client running as a child process.
type client struct {
	cmd   *exec.Cmd
	lines chan clientLine
}

type clientLine struct {
	Seq     int    `json:"seq"`
	Backend string `json:"backend"`
	Err     string `json:"err"`
	Code    string `json:"code"`
}

// startClient runs the grpc-go client (xdsclient/) against target.
func startClient(t *testing.T, bootstrapJSON, target string) *client {
	t.Helper()
	return startClientCmd(t, bootstrapJSON, xdsClientBin, "-target", target, "-interval", "50ms", "-duration", "3m")
}

// startJSClient runs the grpc-js-xds client (jsclient/) against target.
func startJSClient(t *testing.T, bootstrapJSON, target string) *client {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		servers.Missing(t, "node", "Debian package nodejs")
	}
	if _, err := os.Stat("jsclient/node_modules/@grpc/grpc-js-xds"); err != nil {
		servers.Missing(t, "@grpc/grpc-js-xds", "npm ci --prefix test/e2e/jsclient")
	}
	return startClientCmd(t, bootstrapJSON, node, "jsclient/client.js", "--target="+target, "--interval=50", "--duration=180000")
}

func startClientCmd(t *testing.T, bootstrapJSON string, argv ...string) *client {
	t.Helper()
	bs := filepath.Join(t.TempDir(), "bootstrap.json")
	if err := os.WriteFile(bs, []byte(bootstrapJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &client{lines: make(chan clientLine, 1024)}
	c.cmd = exec.Command(argv[0], argv[1:]...)
	c.cmd.Env = append(os.Environ(), "GRPC_XDS_BOOTSTRAP="+bs)
	stderr := &logbuf.Buffer{}
	c.cmd.Stderr = stderr
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var l clientLine
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				select {
				case c.lines <- l:
				default: // test not reading: drop
				}
			}
		}
	}()
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		<-done
		_ = c.cmd.Wait()
		if t.Failed() {
			t.Logf("%s stderr:\n%s", argv[0], stderr.String())
		}
	})
	return c
}

// waitFor reads calls until n consecutive calls were answered by want, and
// fails after timeout.
func (c *client) waitFor(t *testing.T, want string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	run := 0
	var last clientLine
	for run < n {
		select {
		case l := <-c.lines:
			last = l
			if l.Err == "" && l.Backend == want {
				run++
			} else {
				run = 0
			}
		case <-deadline:
			t.Fatalf("client never got %d calls in a row answered by %q within %s; last call: %+v", n, want, timeout, last)
		}
	}
}

// eventually polls f until it returns nil, failing the test after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = f(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func contains(s string, subs ...string) error {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return fmt.Errorf("%q does not contain %q", s, sub)
		}
	}
	return nil
}

// claEndpoint is one endpoint of a ClusterLoadAssignment in config_dump.
type claEndpoint struct {
	addr, health, region, zone string
}

// servedCLA returns the endpoints of cluster outbound|<port>||host that
// proxy was served, once the proxy ACKed the latest EDS response.
func servedCLA(m *meshfed, proxy, host string, port int) ([]claEndpoint, error) {
	// ACKed: the client accepted what it was last sent.
	var proxies []admin.ProxySync
	_, body, err := m.get("/debug/syncz")
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(body, &proxies); err != nil {
		return nil, err
	}
	acked := false
	for _, p := range proxies {
		if p.ID != proxy {
			continue
		}
		for _, ts := range p.Types {
			if strings.HasSuffix(ts.TypeURL, "ClusterLoadAssignment") && ts.SentNonce != "" && ts.AckedNonce == ts.SentNonce {
				acked = true
			}
		}
	}
	if !acked {
		return nil, fmt.Errorf("proxy %s has not ACKed its last EDS response: %s", proxy, body)
	}
	_, body, err = m.get("/debug/config_dump?proxy=" + proxy)
	if err != nil {
		return nil, err
	}
	var d struct {
		Resources map[string][]struct {
			ClusterName string `json:"clusterName"`
			Endpoints   []struct {
				Locality struct {
					Region string `json:"region"`
					Zone   string `json:"zone"`
				} `json:"locality"`
				LbEndpoints []struct {
					Endpoint struct {
						Address struct {
							SocketAddress struct {
								Address string `json:"address"`
							} `json:"socketAddress"`
						} `json:"address"`
					} `json:"endpoint"`
					HealthStatus string `json:"healthStatus"`
				} `json:"lbEndpoints"`
			} `json:"endpoints"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		return nil, fmt.Errorf("config_dump: %v: %s", err, body)
	}
	name := fmt.Sprintf("outbound|%d||%s", port, host)
	for _, cla := range d.Resources["type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"] {
		if cla.ClusterName != name {
			continue
		}
		var out []claEndpoint
		for _, loc := range cla.Endpoints {
			for _, e := range loc.LbEndpoints {
				h := e.HealthStatus
				if h == "" {
					h = "UNKNOWN"
				}
				out = append(out, claEndpoint{e.Endpoint.Address.SocketAddress.Address, h, loc.Locality.Region, loc.Locality.Zone})
			}
		}
		slices.SortFunc(out, func(a, b claEndpoint) int { return strings.Compare(a.addr, b.addr) })
		return out, nil
	}
	return nil, fmt.Errorf("no CLA %s served to %s", name, proxy)
}

// hostEndpoints is the number of endpoints /debug/endpointz lists for host;
// an error while the host is not served.
func hostEndpoints(m *meshfed, host string) (int, error) {
	code, body, err := m.get("/debug/endpointz?host=" + host)
	if err != nil {
		return 0, err
	}
	if code != 200 {
		return 0, fmt.Errorf("status %d: %s", code, body)
	}
	var eps []admin.EndpointInfo
	err = json.Unmarshal(body, &eps)
	return len(eps), err
}
