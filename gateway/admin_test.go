package gateway

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/config"
)

const testToken = "tok-9f8e7d6c5b4a"

// adminGateway builds (does not run) a gateway with one file registry and
// the given admin block, logging into logs.
func adminGateway(t *testing.T, admin string, logs io.Writer) *Gateway {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte("services: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "admin.token"), []byte("  "+testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(filepath.Join(dir, "clusters.yaml"), []byte(`admin: `+admin+`
registries:
  - {name: vms, kind: file, domain: vm.internal, file: {path: services.yaml}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if logs == nil {
		logs = io.Discard
	}
	g, err := NewGateway(cfg, GatewayOptions{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

type adminReq struct {
	method, path string
	token        string // Authorization: Bearer token
	remote       string // peer address; default loopback
	headers      map[string]string
	body         string
}

func (r adminReq) do(h http.Handler) *httptest.ResponseRecorder {
	req := httptest.NewRequest(r.method, r.path, strings.NewReader(r.body))
	req.RemoteAddr = "127.0.0.1:40000"
	if r.remote != "" {
		req.RemoteAddr = r.remote
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	for k, v := range r.headers {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestAdminAccessWithToken(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	g := adminGateway(t, `{tokenFile: admin.token}`, &logs)
	h := g.Handler()
	tests := []struct {
		name string
		req  adminReq
		want int
	}{
		{"healthz open", adminReq{method: "GET", path: "/healthz"}, 200},
		{"readyz open", adminReq{method: "GET", path: "/readyz"}, 503},
		{"registry health open", adminReq{method: "GET", path: "/healthz/registries/vms"}, 503},
		{"metrics open", adminReq{method: "GET", path: "/metrics"}, 200},
		{"healthz refuses POST", adminReq{method: "POST", path: "/healthz"}, 405},
		{"debug needs the token", adminReq{method: "GET", path: "/debug/syncz"}, 401},
		{"debug with a wrong token", adminReq{method: "GET", path: "/debug/syncz", token: "nope"}, 401},
		{"debug with the token", adminReq{method: "GET", path: "/debug/syncz", token: testToken}, 200},
		{"status page needs the token", adminReq{method: "GET", path: "/"}, 401},
		{"status page with the token", adminReq{method: "GET", path: "/", token: testToken}, 200},
		{"registry page with the token", adminReq{method: "GET", path: "/registries/vms", token: testToken}, 200},
		{"host page needs the token", adminReq{method: "GET", path: "/hosts/a.vm.internal"}, 401},
		{"host page of a host not served", adminReq{method: "GET", path: "/hosts/a.vm.internal", token: testToken}, 404},
		{"describez needs the token", adminReq{method: "GET", path: "/debug/describez?host=a.vm.internal"}, 401},
		{"describez of a host not served", adminReq{method: "GET", path: "/debug/describez?host=a.vm.internal", token: testToken}, 404},
		{"describez without a host", adminReq{method: "GET", path: "/debug/describez", token: testToken}, 400},
		{"config_dump needs the token", adminReq{method: "GET", path: "/debug/config_dump?proxy=x"}, 401},
		{"pprof off by default", adminReq{method: "GET", path: "/debug/pprof/", token: testToken}, 404},
		{"syncz refuses POST", adminReq{method: "POST", path: "/debug/syncz", token: testToken}, 405},
		{"log level read", adminReq{method: "GET", path: "/debug/loglevel", token: testToken}, 200},
		{"log level change needs the token", adminReq{method: "PUT", path: "/debug/loglevel?level=debug"}, 401},
		{"log level change, bad level", adminReq{method: "PUT", path: "/debug/loglevel?level=loud", token: testToken}, 400},
		{"release needs the token", adminReq{method: "POST", path: "/debug/registries/vms/release"}, 401},
		{"release with the token (nothing held)", adminReq{method: "POST", path: "/debug/registries/vms/release", token: testToken}, 409},
		{"release refuses GET", adminReq{method: "GET", path: "/debug/registries/vms/release", token: testToken}, 405},
		{"unknown path needs the token first", adminReq{method: "GET", path: "/nothing"}, 401},
		{"static assets open (the sign-in form uses them)", adminReq{method: "GET", path: "/static/style.css"}, 200},
	}
	for _, tt := range tests {
		rec := tt.req.do(h)
		if rec.Code != tt.want {
			t.Errorf("%s: %s %s = %d, want %d: %s", tt.name, tt.req.method, tt.req.path, rec.Code, tt.want, rec.Body.String())
		}
		if strings.Contains(rec.Body.String(), testToken) || strings.Contains(rec.Header().Get("Set-Cookie"), testToken) {
			t.Errorf("%s: the response carries the token", tt.name)
		}
	}

	// A browser without the session gets the sign-in form, signs in, and
	// its cookie (not the token) opens the page and lets it change things
	// from the same origin only.
	rec := adminReq{method: "GET", path: "/registries/vms", headers: map[string]string{"Accept": "text/html"}}.do(h)
	if loc := rec.Header().Get("Location"); rec.Code != http.StatusSeeOther || loc != "/login?next=%2Fregistries%2Fvms" {
		t.Fatalf("browser without session: %d to %q", rec.Code, loc)
	}
	rec = adminReq{method: "GET", path: "/login?next=%2Fregistries%2Fvms"}.do(h)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `name="token"`) || !strings.Contains(rec.Body.String(), `value="/registries/vms"`) {
		t.Fatalf("sign-in form: %d\n%s", rec.Code, rec.Body.String())
	}
	form := url.Values{"token": {testToken}, "next": {"/registries/vms"}}.Encode()
	login := adminReq{method: "POST", path: "/login", body: form, headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}
	bad := login
	bad.body = url.Values{"token": {"guess"}}.Encode()
	if rec := bad.do(h); rec.Code != 401 || rec.Header().Get("Set-Cookie") != "" {
		t.Errorf("login with a wrong token: %d, cookie %q", rec.Code, rec.Header().Get("Set-Cookie"))
	}
	rec = login.do(h)
	cookie := rec.Result().Cookies()
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/registries/vms" || len(cookie) != 1 {
		t.Fatalf("login: %d, Location %q, cookies %v", rec.Code, rec.Header().Get("Location"), cookie)
	}
	if c := cookie[0]; !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || strings.Contains(c.Value, testToken) {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, not the token", c)
	}
	withCookie := map[string]string{"Cookie": cookie[0].Name + "=" + cookie[0].Value}
	if rec := (adminReq{method: "GET", path: "/", headers: withCookie}).do(h); rec.Code != 200 {
		t.Errorf("page with the session cookie: %d", rec.Code)
	}
	crossSite := map[string]string{"Cookie": withCookie["Cookie"], "Origin": "http://evil.example"}
	if rec := (adminReq{method: "PUT", path: "/debug/loglevel?level=debug", headers: crossSite}).do(h); rec.Code != 403 {
		t.Errorf("cross-origin change with the cookie: %d, want 403", rec.Code)
	}
	sameSite := map[string]string{"Cookie": withCookie["Cookie"], "Origin": "http://example.com"}
	if rec := (adminReq{method: "PUT", path: "/debug/loglevel?level=debug", headers: sameSite}).do(h); rec.Code != 200 {
		t.Errorf("same-origin change with the cookie: %d %s", rec.Code, rec.Body.String())
	}

	// The log level endpoint changes the level.
	if rec := (adminReq{method: "PUT", path: "/debug/loglevel", token: testToken, body: `{"level": "warn"}`}).do(h); rec.Code != 200 || !strings.Contains(rec.Body.String(), "WARN") {
		t.Errorf("PUT level warn: %d %s", rec.Code, rec.Body.String())
	}
	if g.level.Level() != slog.LevelWarn {
		t.Errorf("level after PUT = %v, want WARN", g.level.Level())
	}
	if strings.Contains(logs.String(), testToken) {
		t.Errorf("the logs carry the token:\n%s", logs.String())
	}
}

func TestAdminAccessWithoutToken(t *testing.T) {
	t.Parallel()
	g := adminGateway(t, `{pprof: true}`, nil)
	h := g.Handler()
	tests := []struct {
		name string
		req  adminReq
		want int
	}{
		{"debug open without a token", adminReq{method: "GET", path: "/debug/syncz"}, 200},
		{"page open without a token", adminReq{method: "GET", path: "/"}, 200},
		{"pprof on when enabled", adminReq{method: "GET", path: "/debug/pprof/"}, 200},
		{"pprof refuses POST", adminReq{method: "POST", path: "/debug/pprof/"}, 405},
		{"pprof refuses PUT", adminReq{method: "PUT", path: "/debug/pprof/profile"}, 405},
		{"pprof refuses DELETE", adminReq{method: "DELETE", path: "/debug/pprof/symbol"}, 405},
		{"changes from loopback", adminReq{method: "PUT", path: "/debug/loglevel?level=info"}, 200},
		{"changes from elsewhere refused", adminReq{method: "PUT", path: "/debug/loglevel?level=debug", remote: "10.1.2.3:5000"}, 403},
	}
	for _, tt := range tests {
		if rec := tt.req.do(h); rec.Code != tt.want {
			t.Errorf("%s: %s %s = %d, want %d: %s", tt.name, tt.req.method, tt.req.path, rec.Code, tt.want, rec.Body.String())
		}
	}
}
