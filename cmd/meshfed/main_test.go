package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/xds"
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
	regs := []federation.RegistryHealth{{
		RegistryStatus: aggregate.RegistryStatus{Name: "dc1", Kind: "consul", State: registries.Degraded,
			LastSync: now.Add(-90 * time.Second), LastError: "dial tcp 127.0.0.1:8500: connection refused", Services: 3, Endpoints: 12},
		Restarts: 2,
	}}
	proxies := []federation.ProxySync{{ID: "sidecar~10.0.0.1~a~ns", Class: "envoy", Stream: "delta", Types: []xds.TypeStatus{
		{TypeURL: xds.ClusterType, SentVersion: "7", SentNonce: "9", AckedVersion: "7", AckedNonce: "9"},
		{TypeURL: xds.EndpointType, SentVersion: "8", SentNonce: "10", AckedVersion: "7", AckedNonce: "8",
			LastNack: &xds.Nack{Version: "8", Nonce: "10", Error: "bad endpoint"}},
	}}}
	var b bytes.Buffer
	writeStatus(&b, regs, proxies, now)
	out := b.String()
	for _, want := range []string{
		"dc1", "consul", "Degraded", "1m30s ago", "connection refused",
		"sidecar~10.0.0.1~a~ns", "Cluster", "SYNCED", "ClusterLoadAssignment", "NACKED", "bad endpoint",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
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
	if want := "x.yaml:6 VirtualService default/b: spec.http[0].timeout"; !strings.Contains(errOut, want) {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
}
