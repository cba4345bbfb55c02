package nacos

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

// authNacos is a Nacos 1.x open API with auth on, for what Polaris does not
// check: it logs in alice/s3cr3t and answers naming requests only with the
// token it issued last (rotate changes it, as a server restarted with a new
// token secret does).
func authNacos(t *testing.T) (addr string, logins *atomic.Int32, rotate func(token string)) {
	logins = new(atomic.Int32)
	var current atomic.Value
	current.Store("tok-1")
	mux := http.NewServeMux()
	mux.HandleFunc("POST /nacos/v1/auth/users/login", func(w http.ResponseWriter, r *http.Request) {
		logins.Add(1)
		if r.FormValue("username") != "alice" || r.FormValue("password") != "s3cr3t" {
			http.Error(w, "unknown user!", http.StatusForbidden)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"accessToken": current.Load(), "tokenTtl": 18000})
	})
	authed := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("accessToken") != current.Load() {
				http.Error(w, "user not found!", http.StatusForbidden)
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("GET /nacos/v1/ns/service/list", authed(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"count":1,"doms":["orders"]}`))
	}))
	mux.HandleFunc("GET /nacos/v1/ns/instance/list", authed(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("serviceName") != "DEFAULT_GROUP@@orders" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"name":"DEFAULT_GROUP@@orders","hosts":[{"ip":"10.2.0.1","port":8080,"weight":1.0,"healthy":true,"enabled":true}]}`))
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), logins, func(token string) { current.Store(token) }
}

// TestHTTPAuth: with the right credentials the registry logs in once and
// syncs; with refused ones it is Failed, and the password is in no error.
func TestHTTPAuth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	user, good, bad := write("user", "alice\n"), write("good", "s3cr3t\n"), write("bad", "wr0ng-pass\n")
	addr, logins, _ := authNacos(t)

	reg := newRegistry(t, "auth-ok", Config{Servers: []string{addr}, Transport: TransportHTTP, UsernameFile: user, PasswordFile: good})
	sink := registrytest.NewSink()
	stop := registrytest.Start(t, reg, sink)
	sink.WaitFor(t, visible, hasEndpoints("orders.nacos", "http", "10.2.0.1:8080/HEALTHY/100"))
	stop()
	if n := logins.Load(); n != 1 {
		t.Errorf("%d logins, want 1 (the token is kept until it expires)", n)
	}

	reg = newRegistry(t, "auth-refused", Config{Servers: []string{addr}, Transport: TransportHTTP, UsernameFile: user, PasswordFile: bad})
	err := reg.Run(t.Context(), registrytest.NewSink())
	if !registries.IsPermanent(err) {
		t.Fatalf("Run = %v, want a permanent error (Failed)", err)
	}
	var ae *authError
	if !errors.As(err, &ae) || strings.Contains(err.Error(), "wr0ng-pass") || strings.Contains(err.Error(), "alice") {
		t.Errorf("error %q: want refused credentials, without them", err)
	}
}

// TestRefusedTokenIsNotReused: after the first sync, a token the server
// refuses (it rotated its secret) is dropped and the registry logs in
// again instead of failing with the cached token until it expires.
func TestRefusedTokenIsNotReused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	user, pass := filepath.Join(dir, "user"), filepath.Join(dir, "pass")
	for p, v := range map[string]string{user: "alice\n", pass: "s3cr3t\n"} {
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addr, logins, rotate := authNacos(t)
	reg := newRegistry(t, "auth-rotate", Config{Servers: []string{addr}, Transport: TransportHTTP,
		UsernameFile: user, PasswordFile: pass, PollInterval: registries.Duration(50 * time.Millisecond)})
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	sink.WaitFor(t, visible, hasEndpoints("orders.nacos", "http", "10.2.0.1:8080/HEALTHY/100"))
	rotate("tok-2")
	// The next poll is refused (Degraded), the token dropped, the login
	// repeated, and the registry Synced again.
	sink.WaitFor(t, visible, func(st registrytest.State) bool { return logins.Load() >= 2 && st.Synced() })
	if n := logins.Load(); n != 2 {
		t.Errorf("%d logins, want 2 (one before, one after the rotation)", n)
	}
}
