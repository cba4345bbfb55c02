package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/admin"
)

// digestServer answers /debug/digestz with d, as a replica's admin API
// does, and reports no registries and no proxies (a healthy status).
func digestServer(t *testing.T, d admin.DigestInfo) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/debug/digestz":
			_ = json.NewEncoder(w).Encode(d)
		case "/healthz/registries", "/debug/syncz":
			_, _ = w.Write([]byte("[]"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

func TestStatusDrift(t *testing.T) {
	t.Parallel()
	const h1, h2, h3 = "aaaaaaaaaaaa1111", "bbbbbbbbbbbb2222", "cccccccccccc3333"
	a := digestServer(t, admin.DigestInfo{Version: 4, Overall: h1, Registries: map[string]string{"vms": h2, "spring": h3}})
	same := digestServer(t, admin.DigestInfo{Version: 9, Overall: h1, Registries: map[string]string{"vms": h2, "spring": h3}})
	other := digestServer(t, admin.DigestInfo{Version: 4, Overall: h2, Registries: map[string]string{"vms": h2, "spring": h1}})
	missing := digestServer(t, admin.DigestInfo{Version: 4, Overall: h1, Registries: map[string]string{"vms": h2}})

	tests := []struct {
		name     string
		admins   []string
		wantCode int
		want     []string
		wantNot  []string
	}{
		{name: "equal digests, different versions", admins: []string{a, same},
			want: []string{"no drift: 2 replicas", "spring  ", "cccccccccccc"}, wantNot: []string{"DRIFT"}},
		{name: "one registry differs", admins: []string{a, other}, wantCode: exitDrift,
			want: []string{"drift: 2 replicas differ on (overall), spring", "DRIFT"}},
		{name: "registry missing on one replica", admins: []string{a, same, missing}, wantCode: exitDrift,
			want: []string{"differ on spring", "-"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"status"}
			for _, ad := range tt.admins {
				args = append(args, "--admin", ad)
			}
			out, _, err := execute(t, args...)
			code := 0
			var ee exitError
			if errors.As(err, &ee) {
				code = ee.code
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d\n%s", code, tt.wantCode, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, "vms ") && strings.Contains(line, "DRIFT") {
					t.Errorf("vms marked as drifted: %q", line)
				}
			}
		})
	}

	// An unreachable replica is an error naming it (exit 1), not "no drift".
	out, errOut, err := execute(t, "status", "--admin", a, "--admin", "127.0.0.1:1")
	var ee exitError
	if !errors.As(err, &ee) || ee.code != exitFailed || !strings.Contains(errOut, "127.0.0.1:1") || strings.Contains(out, "no drift") {
		t.Errorf("unreachable replica: err = %v, stderr %q, stdout %q", err, errOut, out)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	out, _, err := execute(t, "version")
	if err != nil {
		t.Fatal(err)
	}
	flag, _, err := execute(t, "--version")
	if err != nil {
		t.Fatal(err)
	}
	if out != flag {
		t.Errorf("`version` printed %q, `--version` %q; want the same line", out, flag)
	}
	// A test binary has no link-time version: "dev", and Go's version.
	if !strings.HasPrefix(out, "meshfed dev (revision ") || !strings.Contains(out, "go1.") {
		t.Errorf("version = %q", out)
	}
}
