package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/xds/ads"
)

func execute(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	cmd := newRootCmd(&o, &e)
	cmd.SetArgs(args)
	err = cmd.Execute()
	return o.String(), e.String(), err
}

func TestValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("registries:\n  - name: vms\n    kind: file\n    domian: vm.internal\n    file: {path: s.yaml}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		file       string
		wantCode   int
		wantStdout string
		wantStderr []string
	}{
		{name: "default config is valid", file: "../../clusters.yaml", wantStdout: "vms"},
		{name: "unknown key names file, line and key", file: bad, wantCode: 1,
			wantStderr: []string{"bad.yaml:4:", "registries[0].domian", "domain"}},
		{name: "missing file", file: filepath.Join(dir, "nope.yaml"), wantCode: 1, wantStderr: []string{"nope.yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, errOut, err := execute(t, "validate", tt.file)
			code := 0
			var ee exitError
			if errors.As(err, &ee) {
				code = ee.code
			} else if err != nil {
				t.Fatalf("validate: %v", err)
			}
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tt.wantCode, errOut)
			}
			if !strings.Contains(out, tt.wantStdout) {
				t.Errorf("stdout %q, want it to contain %q", out, tt.wantStdout)
			}
			for _, w := range tt.wantStderr {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q, want it to contain %q", errOut, w)
				}
			}
		})
	}
}

func TestBootstrapNeedsOneKind(t *testing.T) {
	t.Parallel()
	if _, _, err := execute(t, "bootstrap", "--xds", "127.0.0.1:15010"); err == nil {
		t.Fatal("bootstrap without --grpc or --envoy succeeded")
	}
	out, _, err := execute(t, "bootstrap", "--envoy", "--xds", "127.0.0.1:15010", "--node-id", "router~10.0.0.1~gw~ns")
	if err != nil || !strings.Contains(out, "router~10.0.0.1~gw~ns") || !strings.Contains(out, "adsConfig") {
		t.Fatalf("envoy bootstrap: %v\n%s", err, out)
	}
}

func TestBootstrapIstio(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("s.yaml", "services: []\n")
	for _, f := range []string{"c.pem", "k.pem", "ca.pem"} {
		write(f, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
	}
	reg := "registries:\n  - {name: vms, kind: file, domain: vm.internal, file: {path: s.yaml}}\n"
	plain := write("plain.yaml", "xds: {address: 127.0.0.1:15010}\n"+reg)
	tls := write("tls.yaml", "xds: {address: 10.0.0.9:15010, tls: {cert: c.pem, key: k.pem}}\n"+reg)
	mtls := write("mtls.yaml", "xds: {address: 10.0.0.9:15010, tls: {cert: c.pem, key: k.pem, clientCA: ca.pem}}\n"+reg)
	tests := []struct {
		name string
		args []string
		want string // in stdout, or in the error when wantErr
		bad  bool
	}{
		{name: "plain from the config", args: []string{"--config", plain}, want: "- address: xds://127.0.0.1:15010\n"},
		{name: "TLS config needs the CA", args: []string{"--config", tls}, want: "--ca", bad: true},
		{name: "TLS with the CA inline", args: []string{"--config", tls, "--ca", filepath.Join(dir, "ca.pem"), "--sni", "meshfed.example"},
			want: "mode: SIMPLE\n    sni: \"meshfed.example\"\n    caCertificates: |\n      -----BEGIN CERTIFICATE-----"},
		{name: "mTLS refused", args: []string{"--config", mtls}, want: "client certificate", bad: true},
		{name: "listen address refused", args: []string{"--xds", "0.0.0.0:15010"}, want: "--xds HOST:PORT", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, _, err := execute(t, append([]string{"bootstrap", "--istio"}, tt.args...)...)
			if tt.bad {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v, want one mentioning %q (stdout %q)", err, tt.want, out)
				}
				return
			}
			if err != nil || !strings.Contains(out, tt.want) {
				t.Fatalf("err %v, stdout %q, want %q", err, out, tt.want)
			}
		})
	}
}

func TestWriteStatus(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	rep := statusReport{Registries: []admin.RegistryReport{{
		Name: "dc1", Kind: "consul", State: "Degraded",
		LastSync: now.Add(-90 * time.Second), LastError: "dial tcp 127.0.0.1:8500: connection refused", Services: 3, Endpoints: 12,
		Restarts: 2,
	}, {
		Name: "vms", Kind: "file", State: "Held", Services: 1, Endpoints: 10,
		Hold: &admin.HoldReport{Since: now.Add(-time.Minute), Served: 10, Pending: 2, Reason: "would drop 80% of endpoints"},
	}}, Proxies: []proxyReport{{ID: "sidecar~10.0.0.1~a~ns", Class: "envoy", Stream: "delta", Types: []typeReport{
		{Type: "CDS", State: ads.StateSynced, SentVersion: "7", AckedVersion: "7"},
		{Type: "EDS", State: ads.StateNacked, SentVersion: "8", AckedVersion: "7",
			LastNack: &ads.Nack{Version: "8", Nonce: "10", Error: "bad endpoint", At: now.Add(-5 * time.Second)}},
	}}}}
	var b bytes.Buffer
	writeStatus(&b, painter{}, rep, now)
	out := b.String()
	for _, want := range []string{
		"dc1", "consul", "Degraded", "1m30s ago", "connection refused",
		"HELD vms: update held since 1m0s ago, serving 10 endpoints, 2 pending: would drop 80% of endpoints", "release it: meshfed release vms",
		"PROXY", "CDS", "EDS", "LDS", "RDS",
		"sidecar~10.0.0.1~a~ns", "SYNCED", "NACKED (8)", "EDS 5s ago: bad endpoint",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("uncoloured output has escape codes:\n%q", out)
	}

	// istiod reading MCP shows its collections in their own column.
	mcp := rep
	mcp.Proxies = append(mcp.Proxies, proxyReport{ID: "istiod-1", Class: "envoy", Stream: "delta", Types: []typeReport{
		{Type: "v1/ServiceEntry", State: ads.StateSynced, SentVersion: "3", AckedVersion: "3"},
	}})
	b.Reset()
	writeStatus(&b, painter{}, mcp, now)
	if err := containsAll(b.String(), "OTHER TYPES", "v1/ServiceEntry SYNCED"); err != "" {
		t.Errorf("status with an MCP client lacks %s:\n%s", err, b.String())
	}

	// Coloured: states are painted and the columns stay aligned.
	b.Reset()
	writeStatus(&b, painter{on: true}, rep, now)
	col := b.String()
	if !strings.Contains(col, "\x1b[31mNACKED (8)\x1b[0m") || !strings.Contains(col, "\x1b[32mSYNCED\x1b[0m") {
		t.Errorf("coloured output lacks painted states:\n%q", col)
	}
	plainLines, colLines := strings.Split(out, "\n"), strings.Split(stripANSI(col), "\n")
	if len(plainLines) != len(colLines) {
		t.Fatalf("coloured output has %d lines, plain %d", len(colLines), len(plainLines))
	}
	for i := range plainLines {
		if plainLines[i] != colLines[i] {
			t.Errorf("line %d differs once colours are removed:\n%q\n%q", i, plainLines[i], colLines[i])
		}
	}
}

func containsAll(s string, subs ...string) string {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return strconvQuote(sub)
		}
	}
	return ""
}

func strconvQuote(s string) string { return "\"" + s + "\"" }

func stripANSI(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b {
			for i < len(s) && s[i] != 'm' {
				i++
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// TestValidateOpensFiles: validate opens every file the config names and
// reports each problem at the clusters.yaml key naming the file; run
// refuses to start on the xDS TLS files, with the same line and column.
func TestValidateOpensFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("server.key", "not a key\n")
	write("empty.token", "  \n")
	write("bad.kubeconfig", "apiVersion: v1\nkind: Config\ncontexts: [{name: a, context: {cluster: c}}]\ncurrent-context: b\n")
	write("services.yaml", "services:\n  - name: echo\n    ports: [{name: grpc, port: 8080, protocol: SOAP}]\n")
	write("zk.auth", "no-colon\n")
	write("istio.yaml", "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: a}\nspec: {hosts: [a.mesh.example], ports: [{number: 0, name: x}]}\n")
	config := filepath.Join(dir, "clusters.yaml")
	write("clusters.yaml", `xds:
  address: 127.0.0.1:15010
  tls: {cert: server.crt, key: server.key}
registries:
  - {name: vms, kind: file, domain: vm.internal, file: {path: services.yaml}}
  - {name: gone, kind: file, domain: gone.internal, file: {path: missing.yaml}}
  - {name: dc1, kind: consul, domain: consul, consul: {tokenFile: empty.token}}
  - {name: east, kind: kubernetes, domain: svc.cluster.local, kubernetes: {kubeconfig: bad.kubeconfig}}
  - {name: zk, kind: zookeeper, domain: zk, zookeeper: {servers: [127.0.0.1:2181], authFile: zk.auth}}
  - {name: istio, kind: serviceentry, domain: mesh.example, serviceentry: {path: istio.yaml}}
`)
	_, errOut, err := execute(t, "validate", config)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Fatalf("validate = %v, want exit 1; stderr:\n%s", err, errOut)
	}
	for _, want := range []string{
		config + ":3:15: xds.tls.cert: cannot read " + filepath.Join(dir, "server.crt") + ": no such file or directory",
		config + ":3:32: xds.tls.key: " + filepath.Join(dir, "server.key") + ": holds no PEM private key",
		config + ":5:63: registries[0].file.path: " + filepath.Join(dir, "services.yaml") + `: services.yaml:3:48: services[0].ports[0].protocol: unknown protocol "SOAP"`,
		config + ":6:66: registries[1].file.path: cannot read " + filepath.Join(dir, "missing.yaml"),
		config + ":7:67: registries[2].consul.tokenFile: " + filepath.Join(dir, "empty.token") + ": is empty",
		config + ":8:88: registries[3].kubernetes.kubeconfig: " + filepath.Join(dir, "bad.kubeconfig") + `: has no context "b"`,
		config + ":9:94: registries[4].zookeeper.authFile: " + filepath.Join(dir, "zk.auth") + ": want one line user:password",
		config + ":10:82: registries[5].serviceentry.path: " + filepath.Join(dir, "istio.yaml") + ": " + filepath.Join(dir, "istio.yaml") +
			":4:50: ServiceEntry default/a: spec.ports[0].number: 0 is not a port number (1-65535)",
		config + ":10:82: registries[5].serviceentry.path: " + filepath.Join(dir, "istio.yaml") + ": " + filepath.Join(dir, "istio.yaml") +
			":4:1: ServiceEntry default/a: spec.resolution: NONE without endpoints",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}

	_, errOut, err = execute(t, "run", "--config", config)
	if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(errOut, config+":3:15: xds.tls.cert: cannot read") {
		t.Errorf("run = %v, stderr:\n%s\nwant exit 1 naming xds.tls.cert at 3:15", err, errOut)
	}
}

func TestValidateConfigDir(t *testing.T) {
	t.Parallel()
	out, errOut, err := execute(t, "validate", "--config-dir", "../../examples/traffic")
	if err != nil {
		t.Fatalf("examples/traffic: %v\n%s", err, errOut)
	}
	for _, w := range []string{"ok: DestinationRule shop/orders (../../examples/traffic/orders-subsets.yaml:4)", "ok: VirtualService shop/orders (../../examples/traffic/orders-canary.yaml:5)"} {
		if !strings.Contains(out, w) {
			t.Errorf("stdout %q, want %q", out, w)
		}
	}
	dir := t.TempDir()
	body := "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: a}\nspec: {host: a.b}\n---\n" +
		"apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: b}\nspec:\n  hosts: [a.b]\n  http: [{route: [{destination: {host: a.b}}], timeout: -1s}]\n"
	if err := os.WriteFile(filepath.Join(dir, "x.yaml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = execute(t, "validate", "--config-dir", dir)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Fatalf("validate of a bad dir: err %v, want exit code 1", err)
	}
	if !strings.Contains(out, "ok: DestinationRule default/a") {
		t.Errorf("stdout %q lacks the valid DestinationRule", out)
	}
	if want := "x.yaml:11:57 VirtualService default/b: spec.http[0].timeout"; !strings.Contains(errOut, want) {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
}

// TestValidateConfigDirServiceEntries: --config-dir checks ServiceEntries
// and WorkloadEntries too, each problem with its file:line.
func TestValidateConfigDirServiceEntries(t *testing.T) {
	t.Parallel()
	out, errOut, err := execute(t, "validate", "--config-dir", "../../examples/serviceentry/istio")
	if err != nil {
		t.Fatalf("examples/serviceentry/istio: %v\n%s", err, errOut)
	}
	if w := "ok: WorkloadEntry shop/orders-vm-1 (../../examples/serviceentry/istio/workloads.yaml:1)"; !strings.Contains(out, w) {
		t.Errorf("stdout %q, want %q", out, w)
	}
	dir := t.TempDir()
	body := "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: pay, namespace: shop}\n" +
		"spec:\n  hosts: [pay.ext.example, \"*.ext.example\"]\n  ports: [{number: 80, name: http, protocol: HTTP}]\n  workloadSelector: {labels: {app: pay}}\n---\n" +
		"apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: vm-1, namespace: shop}\nspec:\n  address: unix:///x.sock\n---\n" +
		"apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: vm-2, namespace: shop}\nspec: {address: 10.0.0.2, labels: {app: pay}}\n"
	if err := os.WriteFile(filepath.Join(dir, "se.yaml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = execute(t, "validate", "--config-dir", dir)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Fatalf("validate of a bad dir: err %v, want exit code 1", err)
	}
	for _, w := range []string{"ok: ServiceEntry shop/pay (" + dir + "/se.yaml:1)", "ok: WorkloadEntry shop/vm-2 (" + dir + "/se.yaml:15)"} {
		if !strings.Contains(out, w) {
			t.Errorf("stdout %q, want %q", out, w)
		}
	}
	for _, w := range []string{
		"rejected: " + dir + "/se.yaml:13:12 WorkloadEntry shop/vm-1: object rejected: spec.address: \"unix:///x.sock\": Unix domain socket endpoints are not served",
		"rejected: *.ext.example: ServiceEntry shop/pay host \"*.ext.example\" (" + dir + "/se.yaml:5): host rejected: wildcard hosts",
	} {
		if !strings.Contains(errOut, w) {
			t.Errorf("stderr %q, want %q", errOut, w)
		}
	}
	if strings.Contains(out, "vm-1") {
		t.Errorf("stdout %q lists the rejected vm-1 as ok", out)
	}
}

// TestValidateConfigDirMissingOrEmpty: a missing --config-dir is reported
// once (exit 1); an empty one says that it holds no Istio objects (exit 0).
func TestValidateConfigDirMissingOrEmpty(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope")
	out, errOut, err := execute(t, "validate", "--config-dir", missing)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Errorf("missing dir: err %v, want exit code 1", err)
	}
	if n := strings.Count(errOut, missing); n != 1 {
		t.Errorf("missing dir named %d times on stderr, want once:\n%s", n, errOut)
	}
	if out != "" {
		t.Errorf("missing dir: stdout %q, want nothing", out)
	}

	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = execute(t, "validate", "--config-dir", empty)
	if err != nil {
		t.Errorf("empty dir: %v, want exit code 0 (stderr %q)", err, errOut)
	}
	if want := "no Istio objects found in " + empty; !strings.Contains(out, want) {
		t.Errorf("empty dir: stdout %q, want %q", out, want)
	}
}

// TestValidateConfigDirPositions (issue 24 item 5): every problem of every
// object — VirtualServices and DestinationRules, ServiceEntries and
// WorkloadEntries alike — is printed at its field's FILE:LINE:COL, one
// line each, an unknown field with the nearest known name, a wrong type
// with what the field wants.
func TestValidateConfigDirPositions(t *testing.T) {
	t.Parallel()
	const traffic = "testdata/issue24/traffic/orders.yaml"
	const entries = "../../registries/serviceentry/testdata/typos/entries.yaml"
	tests := []struct {
		name, dir string
		want      []string // lines of stderr
		problems  int
	}{{
		name: "traffic rules", dir: "testdata/issue24/traffic", problems: 6,
		want: []string{
			"rejected: " + traffic + `:9:7 VirtualService shop/orders: spec.http[0].route[0].wieght: unknown field "wieght" of HTTPRouteDestination (did you mean "weight"?)`,
			"rejected: " + traffic + `:10:14 VirtualService shop/orders: spec.http[0].timeout: want a duration string like "5s", got 5`,
			"rejected: " + traffic + `:13:16 VirtualService shop/orders: spec.http[0].retries.retryOn "sometimes": unknown retry condition`,
			"rejected: " + traffic + `:21:28 DestinationRule shop/orders: spec.trafficPolicy.loadBalancer.simple: want one of`,
			"rejected: " + traffic + `:27:11 DestinationRule shop/orders: spec.subsets[1].name "V2": want a DNS-1123 label`,
		},
	}, {
		name: "service entries", dir: filepath.Dir(entries), problems: 8,
		want: []string{
			"rejected: " + entries + `:9:3 ServiceEntry shop/orders: object rejected: spec.resolutoin: unknown field "resolutoin" of ServiceEntry (did you mean "resolution"?)`,
			"rejected: " + entries + `:18:15 ServiceEntry shop/orders: object rejected: spec.endpoints[0].weight: want an integer, got "heavy"`,
			"rejected: " + entries + `:26:3 WorkloadEntry shop/vm-1: object rejected: spec.adress: unknown field "adress" of WorkloadEntry (did you mean "address"?)`,
			"rejected: " + entries + `:29:17 WorkloadEntry shop/vm-1: object rejected: spec.ports["grpc"]: 0 is not a port number`,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, errOut, err := execute(t, "validate", "--config-dir", tt.dir)
			var ee exitError
			if !errors.As(err, &ee) || ee.code != 1 {
				t.Fatalf("validate: err %v, want exit code 1; stderr:\n%s", err, errOut)
			}
			if strings.Contains(out, "ok:") {
				t.Errorf("stdout %q, want no valid object", out)
			}
			for _, w := range tt.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks\n%s\nstderr:\n%s", w, errOut)
				}
			}
			if n := strings.Count(errOut, "\n"); n != tt.problems {
				t.Errorf("%d problems reported, want %d:\n%s", n, tt.problems, errOut)
			}
		})
	}
}

// TestValidateConfigSourcesDespiteErrors (issue 24 item 6): a clusters.yaml
// with problems still has the traffic rules of its configSources
// directories checked, reported after its own problems (exit code 1).
func TestValidateConfigSourcesDespiteErrors(t *testing.T) {
	t.Parallel()
	const config = "testdata/issue24/clusters.yaml"
	abs, err := filepath.Abs("testdata/issue24/traffic/orders.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, err := execute(t, "validate", config)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Fatalf("validate: err %v, want exit code 1; stderr:\n%s", err, errOut)
	}
	if out != "" {
		t.Errorf("stdout %q, want nothing", out)
	}
	first := strings.Index(errOut, config+":4:5: registries[0].domian")
	rules := strings.Index(errOut, "rejected: "+abs+":9:7 VirtualService shop/orders: spec.http[0].route[0].wieght")
	if first < 0 || rules < 0 || rules < first {
		t.Errorf("stderr, want the clusters.yaml problem, then the traffic rules' problems:\n%s", errOut)
	}
	for _, w := range []string{`did you mean "domain"`, abs + `:13:16 VirtualService shop/orders: spec.http[0].retries.retryOn "sometimes"`,
		abs + `:27:11 DestinationRule shop/orders: spec.subsets[1].name "V2"`} {
		if !strings.Contains(errOut, w) {
			t.Errorf("stderr lacks %q:\n%s", w, errOut)
		}
	}

	// A clusters.yaml that decodes but names files that are missing: the
	// missing config source directory is one problem, the other is checked.
	dir := t.TempDir()
	config2 := filepath.Join(dir, "clusters.yaml")
	body := "registries:\n  - name: vms\n    kind: file\n    domain: vm.internal\n    file: {path: services.yaml}\n" +
		"configSources:\n  - name: traffic\n    dir: " + filepath.Dir(abs) + "\n  - name: gone\n    dir: gone\n"
	if err := os.WriteFile(config2, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, err = execute(t, "validate", config2)
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Fatalf("validate: err %v, want exit code 1; stderr:\n%s", err, errOut)
	}
	if n := strings.Count(errOut, filepath.Join(dir, "gone")); n != 1 {
		t.Errorf("missing config source dir named %d times, want once:\n%s", n, errOut)
	}
	first = strings.Index(errOut, config2+":5:")
	rules = strings.Index(errOut, "rejected: "+abs+":10:14 VirtualService shop/orders: spec.http[0].timeout")
	if first < 0 || rules < first {
		t.Errorf("stderr, want the missing services file, then the traffic rules' problems:\n%s", errOut)
	}
}
