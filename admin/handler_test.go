package admin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/config"
	"github.com/meshfed/meshfed/model"
)

func (conflictGateway) Metrics() prometheus.Gatherer { return prometheus.NewRegistry() }

// conflictGateway serves one conflict whose reason holds HTML characters;
// the other Gateway methods are not called.
type conflictGateway struct{ Gateway }

func (conflictGateway) Conflicts() []aggregate.Conflict {
	return []aggregate.Conflict{{Rejection: model.Rejection{Host: "a.b", Reason: "would drop endpoints (100% > 50%) & more"}, Category: aggregate.CategoryHoldDown}}
}

func serve(t *testing.T, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	s, err := New(conflictGateway{}, config.Admin{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = "127.0.0.1:40000" // changes are accepted from loopback
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, r)
	return w
}

// TestHandlerErrorsAreJSON: a wrong method (405, with Allow) and an
// unknown path (404) answer JSON {"error": ...} like every admin answer.
func TestHandlerErrorsAreJSON(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		method, path string
		code         int
		allow, want  string
	}{
		{http.MethodPost, "/debug/syncz", http.StatusMethodNotAllowed, "GET", "method POST is not allowed on /debug/syncz"},
		{http.MethodDelete, "/debug/loglevel", http.StatusMethodNotAllowed, "PUT", "method DELETE is not allowed on /debug/loglevel"},
		{http.MethodGet, "/debug/nope", http.StatusNotFound, "", `no admin endpoint "/debug/nope"`},
	} {
		w := serve(t, tt.method, tt.path)
		if w.Code != tt.code {
			t.Errorf("%s %s: code %d, want %d", tt.method, tt.path, w.Code, tt.code)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q, want application/json", tt.method, tt.path, ct)
		}
		if !strings.Contains(w.Header().Get("Allow"), tt.allow) {
			t.Errorf("%s %s: Allow %q, want it to name %s", tt.method, tt.path, w.Header().Get("Allow"), tt.allow)
		}
		var body struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || !strings.Contains(body.Error, tt.want) {
			t.Errorf("%s %s: body %q (%v), want JSON error containing %q", tt.method, tt.path, w.Body, err, tt.want)
		}
	}
}

// TestHandlerJSONNotHTMLEscaped: reasons keep their > and & verbatim.
func TestHandlerJSONNotHTMLEscaped(t *testing.T) {
	t.Parallel()
	w := serve(t, http.MethodGet, "/debug/conflictz")
	if w.Code != http.StatusOK {
		t.Fatalf("code %d: %s", w.Code, w.Body)
	}
	if b := w.Body.String(); !strings.Contains(b, "(100% > 50%) & more") || strings.Contains(b, `\u003e`) {
		t.Errorf("conflictz body is HTML-escaped:\n%s", b)
	}
}
