package servers

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// IstiodVersion is the istio.io/istio pseudo-version (and patch revision)
// that `tools/testservers/build.sh istiod` builds.
const IstiodVersion = "v0.0.0-20260827124520-eed52ebb66ad-p1"

// IstiodBinary returns the path of pilot-discovery built by
// `tools/testservers/build.sh istiod`, and whether it exists.
func IstiodBinary() (string, bool) {
	return builtBinary("istiod-"+IstiodVersion, "pilot-discovery")
}

// IstiodOptions configures StartIstiod.
type IstiodOptions struct {
	// ConfigSource is the host:port of an MCP-over-xDS server, istiod's
	// only config source (meshConfig configSources: xds://ConfigSource).
	ConfigSource string
}

// Istiod is a running istiod (pilot-discovery) owned by one test, without
// Kubernetes: no service registry but its ServiceEntries, no CA, no
// webhooks.
type Istiod struct {
	// GRPCAddr is the plaintext xDS port proxies and proxyless gRPC
	// clients connect to.
	GRPCAddr string
	// HTTPAddr serves /ready and /debug/*.
	HTTPAddr string

	proc *Process
}

// StartIstiod starts istiod on loopback ports, waits until /ready passes
// (every collection it asked its config source for was answered), and
// stops it in t.Cleanup. It skips (or fails, see Missing) if the binary is
// not built.
func StartIstiod(t testing.TB, opts IstiodOptions) *Istiod {
	t.Helper()
	bin := needBinary(t, IstiodBinary, "istiod "+IstiodVersion, "istiod")
	dir := t.TempDir()
	pick := FreePorts(t, 4) // gRPC, HTTP, monitoring, HTTPS
	addr := func() string { p := pick[0]; pick = pick[1:]; return "127.0.0.1:" + strconv.Itoa(p) }
	d := &Istiod{GRPCAddr: addr(), HTTPAddr: addr()}
	mesh := fmt.Sprintf("configSources:\n- address: xds://%s\nrootNamespace: istio-system\ntrustDomain: cluster.local\n", opts.ConfigSource)
	meshFile := filepath.Join(dir, "mesh.yaml")
	if err := os.WriteFile(meshFile, []byte(mesh), 0o600); err != nil {
		t.Fatal(err)
	}
	networksFile := filepath.Join(dir, "meshNetworks.yaml")
	if err := os.WriteFile(networksFile, []byte("networks: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.proc = &Process{Name: "istiod", Bin: bin, Dir: dir, LogPath: filepath.Join(dir, "istiod.log"),
		Args: []string{"discovery",
			"--registries=", // no Kubernetes: ServiceEntries only
			"--meshConfig", meshFile, "--networksConfig", networksFile,
			"--httpAddr", d.HTTPAddr, "--grpcAddr", d.GRPCAddr, "--monitoringAddr", addr(),
			"--httpsAddr", addr(), "--secureGRPCAddr=", "--namespace", "istio-system",
			"--keepaliveMaxServerConnectionAge", "30m", "--log_output_level", "default:info",
		}}
	d.proc.Env = []string{
		"ENABLE_CA_SERVER=false",
		"PILOT_MAX_REQUESTS_PER_SECOND=10000", // tests reconnect clients quickly
		"PILOT_DEBOUNCE_AFTER=10ms", "PILOT_DEBOUNCE_MAX=100ms",
		"POD_NAME=istiod-test", "POD_NAMESPACE=istio-system",
		"HOME=" + dir,
	}
	t.Cleanup(func() {
		d.proc.Stop()
		if t.Failed() {
			t.Logf("istiod log:\n%s", d.proc.Log())
		}
	})
	if err := d.proc.StartReady(90*time.Second, d.ready); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *Istiod) ready() error { return httpOK(noKeepAlive, "http://"+d.HTTPAddr+"/ready", "") }

// Get fetches http://HTTPAddr/path (e.g. /debug/configz) and returns the
// body of a 200 answer.
func (d *Istiod) Get(path string) ([]byte, error) {
	resp, err := noKeepAlive.Get("http://" + d.HTTPAddr + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", path, resp.Status, b)
	}
	return b, nil
}

// Log returns istiod's output so far.
func (d *Istiod) Log() string { return d.proc.Log() }
