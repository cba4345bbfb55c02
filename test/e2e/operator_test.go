package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshfed/meshfed/test/logbuf"
	"github.com/meshfed/meshfed/test/servers"
)

const (
	adminToken = "s3cret-e2e-token-4f1d"
	nackerID   = "sidecar~127.0.0.1~nacker.default~default.svc.cluster.local"
	nackMsg    = "e2e: cluster rejected on purpose"
)

// operatorSetup is a meshfed with a file registry "vms", a token on its
// admin port, and a proxy that NACKs every CDS response.
type operatorSetup struct {
	m         *meshfed
	dir       string
	config    string
	svcFile   string
	tokenFile string
}

func newOperatorSetup(t *testing.T) *operatorSetup {
	t.Helper()
	dir := t.TempDir()
	o := &operatorSetup{dir: dir, svcFile: filepath.Join(dir, "services.yaml"), tokenFile: filepath.Join(dir, "admin.token")}
	writeFile(t, o.svcFile, servicesYAML(
		"{address: 127.0.0.1, ports: {grpc: 18080}, locality: us-east/zone-a, labels: {version: v1}}",
		"{address: 127.0.0.2, ports: {grpc: 18080}, locality: us-east/zone-b, health: UNHEALTHY}"))
	writeFile(t, o.tokenFile, adminToken+"\n")
	// A second registry, Synced, with one endpoint quarantined.
	writeFile(t, filepath.Join(dir, "edge.yaml"), `services:
  - name: api
    ports: [{name: http, port: 8080, protocol: HTTP}]
    endpoints:
      - {address: 127.0.0.3, locality: eu-west/zone-a}
      - {address: not-an-ip}
`)
	if err := os.Mkdir(filepath.Join(dir, "traffic"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Traffic rules: a DestinationRule in force for echo, and a
	// VirtualService rejected (a destination without a host).
	writeFile(t, filepath.Join(dir, "traffic", "echo.yaml"), `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: default}
spec:
  host: echo.vm.internal
  trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}
  subsets: [{name: v1, labels: {version: v1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo-bad, namespace: default}
spec:
  hosts: [echo.vm.internal]
  http: [{route: [{destination: {subset: v1}}]}]
`)
	pick := servers.FreePorts(t, 2)
	xdsAddr := fmt.Sprintf("127.0.0.1:%d", pick[0])
	adminAddr := fmt.Sprintf("127.0.0.1:%d", pick[1])
	o.config = filepath.Join(dir, "clusters.yaml")
	writeFile(t, o.config, fmt.Sprintf(`xds: {address: %s}
admin: {address: %s, tokenFile: admin.token}
debounce: {quiet: 10ms, max: 100ms}
registries:
  - name: vms
    kind: file
    domain: vm.internal
    file: {path: services.yaml}
  - name: edge
    kind: file
    domain: edge.internal
    file: {path: edge.yaml}
configSources:
  - {name: local, dir: traffic}
`, xdsAddr, adminAddr))
	o.m = startMeshfed(t, o.config, xdsAddr, adminAddr)
	o.m.waitReady(t, 20*time.Second)
	return o
}

// authGet GETs an admin path with the token.
func (o *operatorSetup) authGet(t *testing.T, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+o.m.admin+path, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// startNacker connects an Envoy-like SotW stream that NACKs every CDS
// response it gets, until the test ends.
func startNacker(t *testing.T, xdsAddr string) {
	t.Helper()
	conn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); conn.Close(); <-done })
	node := &core.Node{Id: nackerID, Cluster: "nacker"}
	const cds = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: cds}); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(done)
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			_ = stream.Send(&discovery.DiscoveryRequest{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce,
				ErrorDetail: &status.Status{Code: 3, Message: nackMsg}})
		}
	}()
}

// TestOperatorViews causes a Degraded registry and a NACKing proxy, then
// checks what an operator sees: the status page in a real headless
// Chromium (after signing in with the token), `meshfed status`,
// `proxy-config` and `describe`.
func TestOperatorViews(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	o := newOperatorSetup(t)
	startNacker(t, o.m.xds)

	// The admin port: health open, debug closed without the token.
	if code, _, _ := o.m.get("/healthz"); code != 200 {
		t.Errorf("/healthz without token = %d, want 200", code)
	}
	if code, _, _ := o.m.get("/debug/syncz"); code != 401 {
		t.Errorf("/debug/syncz without token = %d, want 401", code)
	}

	eventually(t, 10*time.Second, "the proxy's NACK on /debug/syncz", func() error {
		_, body := o.authGet(t, "/debug/syncz")
		return contains(body, "nacker", nackMsg)
	})
	writeFile(t, o.svcFile, servicesYAML("{address: 127.0.0.1, ports: {grpc: 18080}}")+"      - {address: 10.0.0.9, health: SICK}\n")
	eventually(t, 10*time.Second, "vms Degraded", func() error {
		_, body, err := o.m.get("/healthz/registries/vms")
		if err != nil {
			return err
		}
		return contains(string(body), `"Degraded"`)
	})

	t.Run("page", func(t *testing.T) { checkStatusPage(t, o) })
	t.Run("cli", func(t *testing.T) { checkCLI(t, o) })
	if strings.Contains(o.m.logs.String(), adminToken) {
		t.Error("meshfed logged the admin token")
	}
}

func checkStatusPage(t *testing.T, o *operatorSetup) {
	chrome, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("MESHFED_REQUIRE_SERVERS") != "" {
			t.Fatal("chromium not installed (Debian package chromium; tools/install-test-deps.sh installs it)")
		}
		t.Skip("chromium not installed")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chrome),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1400, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	defer cancelTimeout()

	var problems logbuf.Buffer
	err = chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value))
				}
				fmt.Fprintf(&problems, "console.%s: %s\n", ev.Type, strings.Join(args, " "))
			}
		case *runtime.EventExceptionThrown:
			fmt.Fprintf(&problems, "exception: %s (line %d)\n", ev.ExceptionDetails.Text, ev.ExceptionDetails.LineNumber)
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError || ev.Entry.Level == log.EntryLevelWarning {
				fmt.Fprintf(&problems, "log %s: %s %s\n", ev.Entry.Level, ev.Entry.Text, ev.Entry.URL)
			}
		}
	})
	if err != nil {
		t.Fatalf("start chromium: %v", err)
	}

	if _, err := chromedp.Call(ctx, log.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("enable the log domain: %v", err)
	}
	if _, err := chromedp.Call(ctx, runtime.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("enable the runtime domain: %v", err)
	}

	// Without the session the page asks for the token; signing in shows it.
	base := "http://" + o.m.admin
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)),
	); err != nil {
		t.Fatalf("load the sign-in form: %v (console: %s)", err, problems.String())
	}
	loginTitle, err := chromedp.Run(ctx, chromedp.Title())
	if err != nil || !strings.Contains(loginTitle, "token required") {
		t.Errorf("page before sign-in titled %q (%v), want the token form", loginTitle, err)
	}
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), adminToken),
		chromedp.Submit(chromedp.CSS(`input[name=token]`)),
		chromedp.WaitVisible(chromedp.ID("registries")),
	); err != nil {
		t.Fatalf("sign in: %v (console: %s)", err, problems.String())
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return s
	}
	if err := contains(text(`tr[data-registry="vms"]`), "vms", "file", "Degraded", "SICK"); err != nil {
		t.Errorf("registry row: %v", err)
	}
	if err := contains(text(`tr[data-proxy="`+nackerID+`"]`), "NACKED", nackMsg, "CDS"); err != nil {
		t.Errorf("proxy row: %v", err)
	}
	if err := contains(text(`#conflicts`), "edge", "api.edge.internal", "not-an-ip"); err != nil {
		t.Errorf("conflicts: %v", err)
	}
	// The rules section: the config source, the object in force with
	// its host linked, the rejected one with its reason.
	if err := contains(text(`#rules`), "1 object in force", "1 rejected", "/debug/configz"); err != nil {
		t.Errorf("rules section: %v", err)
	}
	if err := contains(text(`tr[data-source="local"]`), "local", "dir", "Synced"); err != nil {
		t.Errorf("rules section, source: %v", err)
	}
	if err := contains(text(`tr[data-rule="DestinationRule/default/echo"]`), "DestinationRule default/echo", "echo.vm.internal", "echo.yaml:1"); err != nil {
		t.Errorf("rules section, in force: %v", err)
	}
	if err := contains(text(`#rejected-rules`), "VirtualService default/echo-bad", "echo.yaml:", "destination.host: is required"); err != nil {
		t.Errorf("rules section, rejected: %v", err)
	}
	if ready := text(`#ready`); ready != "ready" {
		t.Errorf("readiness badge %q, want ready", ready)
	}

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	writeArtifact(t, "statuspage.png", png)

	// The registry drill-down lists its services.
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`tr[data-registry="vms"] a`)),
		chromedp.WaitVisible(chromedp.ID("services")),
	); err != nil {
		t.Fatalf("registry page: %v", err)
	}
	if err := contains(text(`#services`), "echo.vm.internal", "grpc 8080/grpc"); err != nil {
		t.Errorf("registry page services: %v", err)
	}
	if png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		writeArtifact(t, "registrypage.png", png)
	}
	checkHostPage(t, ctx, base, text, &problems)

	// A held update shows with a Release button; clicking it (the page's
	// session, same origin) releases it.
	writeFile(t, filepath.Join(o.dir, "edge.yaml"), "services: []\n")
	eventually(t, 10*time.Second, "edge Held", func() error {
		_, body, err := o.m.get("/healthz/registries/edge")
		if err != nil {
			return err
		}
		return contains(string(body), `"Held"`, `"hold"`)
	})
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-hold="edge"] button`)),
	); err != nil {
		t.Fatalf("page with a held update: %v", err)
	}
	if err := contains(text(`tr[data-hold="edge"]`), "held", "serving 1 endpoints, 0 pending", "Release held update"); err != nil {
		t.Errorf("hold row: %v", err)
	}
	if png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		writeArtifact(t, "statuspage-held.png", png)
	}
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`tr[data-hold="edge"] button`)),
		chromedp.WaitNotPresent(chromedp.CSS(`tr[data-hold="edge"]`)),
	); err != nil {
		t.Fatalf("release from the page: %v (console: %s)", err, problems.String())
	}
	if err := contains(text(`tr[data-registry="edge"]`), "Synced", "0"); err != nil {
		t.Errorf("edge after release: %v", err)
	}
	var reported []string
	for _, l := range strings.Split(strings.TrimSpace(problems.String()), "\n") {
		// The host pages of an unknown host and endpoint answer 404 on purpose.
		if l != "" && !(strings.Contains(l, "404 (Not Found)") && strings.Contains(l, "/hosts/echo.vm.")) {
			reported = append(reported, l)
		}
	}
	if len(reported) > 0 {
		t.Errorf("browser console reported problems:\n%s", strings.Join(reported, "\n"))
	}
}

// checkHostPage follows the registry page's link to echo's host page
// and checks it shows the explanation `meshfed describe` prints: rules
// in force with their sources, subsets, policies, the rejected rule, and
// why an UNHEALTHY endpoint is not used; an unknown host or endpoint gets
// the error, escaped.
func checkHostPage(t *testing.T, ctx context.Context, base string, text func(string) string, problems *logbuf.Buffer) {
	t.Helper()
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`tr[data-host="echo.vm.internal"] a`)),
		chromedp.WaitVisible(chromedp.ID("host-endpoints")),
	); err != nil {
		t.Fatalf("host page: %v (console: %s)", err, problems.String())
	}
	if err := contains(text(`#service`), "vms", "EDS", "grpc 8080/grpc"); err != nil {
		t.Errorf("host page service: %v", err)
	}
	if err := contains(text(`#host-endpoints`), "127.0.0.1", "127.0.0.2", "UNHEALTHY", "us-east/zone-b", "version=v1"); err != nil {
		t.Errorf("host page endpoints: %v", err)
	}
	if err := contains(text(`#host-rules`), "DestinationRule", "default/echo", "echo.yaml:1"); err != nil {
		t.Errorf("host page rules: %v", err)
	}
	if err := contains(text(`#subsets`), "v1", "version=v1", "1", "default/echo"); err != nil {
		t.Errorf("host page subsets: %v", err)
	}
	if err := contains(text(`#policies`), "loadBalancer", "LEAST_REQUEST", "every port", "default/echo"); err != nil {
		t.Errorf("host page policies: %v", err)
	}
	if err := contains(text(`#host-rejected`), "VirtualService default/echo-bad", "destination.host: is required"); err != nil {
		t.Errorf("host page rejected: %v", err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err == nil {
		writeArtifact(t, "hostpage.png", png)
	}

	// "why?" on the UNHEALTHY endpoint explains it.
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`tr[data-address="127.0.0.2"] a`)),
		chromedp.WaitVisible(chromedp.ID("endpoint-explain")),
	); err != nil {
		t.Fatalf("endpoint explanation: %v (console: %s)", err, problems.String())
	}
	if err := contains(text(`#endpoint-explain`), "Endpoint 127.0.0.2", "not scoped: every proxy", "UNHEALTHY", "us-east/zone-b",
		"Degraded", "last good state"); err != nil {
		t.Errorf("endpoint explanation: %v", err)
	}
	if err := contains(text(`#endpoint-explain tr[data-cluster="outbound|8080||echo.vm.internal"]`), "in, not used", "UNHEALTHY: listed, sent no calls",
		"grpc-go uses only HEALTHY endpoints"); err != nil {
		t.Errorf("endpoint explanation, port cluster: %v", err)
	}
	if err := contains(text(`#endpoint-explain tr[data-cluster="outbound|8080|v1|echo.vm.internal"]`), "not in", "outside subset v1"); err != nil {
		t.Errorf("endpoint explanation, subset cluster: %v", err)
	}
	if err := contains(text(`#endpoint-explain tr[data-cluster="serviceentry"]`), "not in", "health UNHEALTHY"); err != nil {
		t.Errorf("endpoint explanation, istiod: %v", err)
	}
	if png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		writeArtifact(t, "hostpage-endpoint.png", png)
	}

	// An unknown endpoint: the error with the host's addresses, markup
	// shown as text.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/hosts/echo.vm.internal?endpoint="+url.QueryEscape("<b>127.0.0.3</b>")),
		chromedp.WaitVisible(chromedp.ID("host-error")),
	); err != nil {
		t.Fatalf("host page, unknown endpoint: %v", err)
	}
	if err := contains(text(`#host-error`), "no endpoint <b>127.0.0.3</b> of echo.vm.internal is served", "its addresses: 127.0.0.1, 127.0.0.2"); err != nil {
		t.Errorf("host page, unknown endpoint: %v", err)
	}
	if err := contains(text(`#host-endpoints`), "127.0.0.1", "127.0.0.2"); err != nil {
		t.Errorf("host page, unknown endpoint, shows the host's endpoints: %v", err)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#host-error b").length`)); err != nil || n != 0 {
		t.Errorf("the endpoint asked for became markup: %d <b> elements (%v)", n, err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/hosts/echo.vm.interna"),
		chromedp.WaitVisible(chromedp.ID("host-error")),
	); err != nil {
		t.Fatalf("host page, unknown host: %v", err)
	}
	if err := contains(text(`#host-error`), `no service "echo.vm.interna" is served; did you mean echo.vm.internal?`); err != nil {
		t.Errorf("host page, unknown host: %v", err)
	}
}

// writeArtifact keeps a test output under testdata/tmp (gitignored).
func writeArtifact(t *testing.T, name string, b []byte) {
	t.Helper()
	dir := filepath.Join("testdata", "tmp")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", p)
}

func checkCLI(t *testing.T, o *operatorSetup) {
	// Exit 2: a registry is not Synced and a proxy NACKs.
	out, stderr, code := meshfedCmd(t, "status", "--config", o.config)
	if code != 2 {
		t.Errorf("status exit %d, want 2 (stderr %q)\n%s", code, stderr, out)
	}
	if err := contains(out, "vms", "Degraded", "nacker", "NACKED", "CDS"); err != nil {
		t.Errorf("status table: %v\n%s", err, out)
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("status coloured its output though stdout is not a terminal:\n%q", out)
	}

	out, _, _ = meshfedCmd(t, "status", "--config", o.config, "-o", "json", "--proxy", "nacker")
	var doc struct {
		Registries []struct{ Name, State string }
		Proxies    []struct {
			ID    string `json:"id"`
			Types []struct {
				Type  string `json:"type"`
				State string `json:"state"`
			} `json:"types"`
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	if len(doc.Proxies) != 1 || doc.Proxies[0].ID != nackerID || len(doc.Registries) != 2 || doc.Registries[1].State != "Degraded" {
		t.Errorf("status -o json --proxy nacker = %+v", doc)
	}
	out, _, _ = meshfedCmd(t, "status", "--config", o.config, "-o", "json", "--proxy", "nobody")
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Proxies) != 0 {
		t.Errorf("status --proxy nobody: %v %s", err, out)
	}
	out, _, code = meshfedCmd(t, "status", "--config", o.config, "-o", "yaml")
	if err := contains(out, "registries:", "state: Degraded", "proxies:"); err != nil || code != 2 {
		t.Errorf("status -o yaml (exit %d): %v\n%s", code, err, out)
	}

	out, stderr, code = meshfedCmd(t, "proxy-config", "clusters", "nacker", "--config", o.config)
	if code != 0 {
		t.Fatalf("proxy-config clusters: exit %d: %s", code, stderr)
	}
	if err := contains(out, "outbound|8080||echo.vm.internal", "EDS"); err != nil {
		t.Errorf("proxy-config clusters: %v\n%s", err, out)
	}
	_, stderr, code = meshfedCmd(t, "proxy-config", "clusters", "nobody", "--config", o.config)
	if code == 0 || !strings.Contains(stderr, "nobody") {
		t.Errorf("proxy-config for an unknown proxy: exit %d, stderr %q", code, stderr)
	}

	out, stderr, code = meshfedCmd(t, "describe", "echo.vm.internal", "--config", o.config)
	if code != 0 {
		t.Fatalf("describe: exit %d: %s", code, stderr)
	}
	if err := contains(out, "echo.vm.internal", "vms", "127.0.0.1:18080", "grpc"); err != nil {
		t.Errorf("describe: %v\n%s", err, out)
	}
	out, stderr, code = meshfedCmd(t, "describe", "echo.vm.internal", "--endpoint", "127.0.0.2", "--config", o.config)
	if code != 0 {
		t.Fatalf("describe --endpoint: exit %d: %s", code, stderr)
	}
	if err := contains(out, "Endpoint:    127.0.0.2 of echo.vm.internal", "not scoped: every proxy", "registry vms (Degraded",
		"outbound|8080||echo.vm.internal (as port 18080)", "in, not used: UNHEALTHY", "not in: outside subset v1",
		"istiod (MCP): not in: health UNHEALTHY"); err != nil {
		t.Errorf("describe --endpoint: %v\n%s", err, out)
	}
	_, stderr, code = meshfedCmd(t, "describe", "echo.vm.internal", "--endpoint", "127.0.0.9", "--config", o.config)
	if code != 1 || !strings.Contains(stderr, `no endpoint 127.0.0.9 of echo.vm.internal is served (did you mean "127.0.0.1"?); its addresses: 127.0.0.1, 127.0.0.2`) {
		t.Errorf("describe --endpoint of an unknown endpoint: exit %d, stderr %q", code, stderr)
	}
	if strings.Contains(out+stderr, adminToken) {
		t.Error("the CLI printed the admin token")
	}
}
