package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/federation"
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
			var ee exitCode
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

func TestWriteStatus(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	rep := statusReport{Registries: []federation.RegistryReport{{
		Name: "dc1", Kind: "consul", State: "Degraded",
		LastSync: now.Add(-90 * time.Second), LastError: "dial tcp 127.0.0.1:8500: connection refused", Services: 3, Endpoints: 12,
		Restarts: 2,
	}, {
		Name: "vms", Kind: "file", State: "Held", Services: 1, Endpoints: 10,
		Hold: &federation.HoldReport{Since: now.Add(-time.Minute), Served: 10, Pending: 2, Reason: "would drop 80% of endpoints"},
	}}, Proxies: []proxyReport{{ID: "sidecar~10.0.0.1~a~ns", Class: "envoy", Stream: "delta", Types: []typeReport{
		{Type: "CDS", State: xds.StateSynced, SentVersion: "7", AckedVersion: "7"},
		{Type: "EDS", State: xds.StateNacked, SentVersion: "8", AckedVersion: "7",
			LastNack: &xds.Nack{Version: "8", Nonce: "10", Error: "bad endpoint", At: now.Add(-5 * time.Second)}},
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
