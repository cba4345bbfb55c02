package admin

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/meshfed/meshfed/config"
)

// sessionCookie carries a browser's proof of the token: an HMAC derived
// from it, never the token itself.
const sessionCookie = "meshfed_admin"

// adminGuard is the admin port's access policy (docs/architecture.md,
// admin API):
//
//   - open paths (health, readiness, metrics) answer anyone;
//   - every other path requires, when configured, a client certificate
//     verified against admin.tls.clientCA and the bearer token of
//     admin.tokenFile (header "Authorization: Bearer T", or the session
//     cookie a browser gets from POST /login);
//   - methods other than GET and HEAD change state: with a token
//     configured they require it, without one they are accepted only from
//     loopback peers; a browser's cookie counts only for same-origin
//     requests.
//
// Routes themselves say which methods they take; the mux answers 405 to
// the others.
type adminGuard struct {
	token       []byte // nil: no token configured
	session     string // hex HMAC of the token, the cookie's value
	requireCert bool
}

func newAdminGuard(a config.Admin) (*adminGuard, error) {
	g := &adminGuard{requireCert: a.TLS != nil && a.TLS.ClientCA != ""}
	if a.TokenFile != "" {
		t, err := config.ReadToken(a.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("admin.tokenFile: %w", err)
		}
		g.token = []byte(t)
		m := hmac.New(sha256.New, g.token)
		m.Write([]byte("meshfed admin session v1"))
		g.session = hex.EncodeToString(m.Sum(nil))
	}
	return g, nil
}

// openPath reports whether p is served without credentials.
func openPath(p string) bool {
	switch p {
	case "/healthz", "/readyz", "/metrics", "/healthz/registries", "/login", "/favicon.ico":
		return true
	}
	// The stylesheet and script hold no data; the sign-in form needs them.
	return strings.HasPrefix(p, "/healthz/registries/") || strings.HasPrefix(p, "/static/")
}

func safeMethod(m string) bool { return m == http.MethodGet || m == http.MethodHead }

// wrap applies the policy in front of next.
func (g *adminGuard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if openPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		if g.requireCert && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
			// No sign-in form: a token would not help.
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "a client certificate signed by admin.tls.clientCA is required"})
			return
		}
		byHeader, byCookie := g.credentials(r)
		if g.token != nil && !byHeader && !byCookie {
			w.Header().Set("WWW-Authenticate", `Bearer realm="meshfed admin"`)
			deny(w, r, http.StatusUnauthorized, "this endpoint requires the admin token (Authorization: Bearer <token>)")
			return
		}
		if !safeMethod(r.Method) {
			switch {
			case g.token == nil && !loopbackPeer(r):
				deny(w, r, http.StatusForbidden, "changes are accepted from loopback only unless admin.tokenFile is set")
				return
			case g.token != nil && !byHeader && !sameOrigin(r):
				deny(w, r, http.StatusForbidden, "cross-origin request refused")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// credentials reports whether r carries the token in its Authorization
// header or a valid session cookie.
func (g *adminGuard) credentials(r *http.Request) (header, cookie bool) {
	if g.token == nil {
		return false, false
	}
	if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		header = subtle.ConstantTimeCompare([]byte(strings.TrimSpace(a[7:])), g.token) == 1
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		cookie = subtle.ConstantTimeCompare([]byte(c.Value), []byte(g.session)) == 1
	}
	return header, cookie
}

// login takes the token from a form (POST /login, field "token") and, if
// it is right, sets the session cookie and sends the browser to next.
func (g *adminGuard) login(w http.ResponseWriter, r *http.Request) {
	if g.token == nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if !sameOrigin(r) {
		deny(w, r, http.StatusForbidden, "cross-origin request refused")
		return
	}
	if err := r.ParseForm(); err != nil ||
		subtle.ConstantTimeCompare([]byte(strings.TrimSpace(r.PostForm.Get("token"))), g.token) != 1 {
		renderLogin(w, http.StatusUnauthorized, r.PostForm.Get("next"), "Wrong token")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: g.session, Path: "/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, localPath(r.PostForm.Get("next")), http.StatusSeeOther)
}

// localPath returns next when it is a path on this server, else "/": never
// a scheme-relative "//host" nor "/\host", which browsers read as one.
func localPath(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return "/"
	}
	return next
}

// deny answers JSON to API clients and sends browsers that lack the token
// to the sign-in form.
func deny(w http.ResponseWriter, r *http.Request, code int, msg string) {
	if code == http.StatusUnauthorized && safeMethod(r.Method) && strings.Contains(r.Header.Get("Accept"), "text/html") {
		http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		return
	}
	writeJSON(w, code, map[string]string{"error": msg})
}

// loginForm serves the sign-in form (GET /login?next=PATH).
func (g *adminGuard) loginForm(w http.ResponseWriter, r *http.Request) {
	next := localPath(r.URL.Query().Get("next"))
	if g.token == nil {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	renderLogin(w, http.StatusOK, next, "This page requires the admin token")
}

func loopbackPeer(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sameOrigin reports whether a browser request comes from the admin page
// itself: its Origin (or, lacking one, Referer) names the request's host.
// Requests without either (curl, meshfed CLI) pass: they carry no cookie
// a third party could abuse.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		o = r.Header.Get("Referer")
	}
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}
