package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/xds/ads"
)

// TestStatusPipedKeepsWholeError: output that is not a terminal (execute
// writes to a buffer) shows the last error, the hold reason and the NACK
// whole; a terminal cuts them to 80 characters.
func TestStatusPipedKeepsWholeError(t *testing.T) {
	t.Parallel()
	long := "dial tcp 10.1.0.4:8500: connect: connection refused; " + strings.Repeat("retrying with backoff, ", 4) + "END-OF-ERROR"
	at := time.Now().Add(-time.Minute)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz/registries", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode([]admin.RegistryReport{{Name: "dc1", Kind: "consul", State: "Degraded", LastError: long,
			Hold: &admin.HoldReport{Since: at, Reason: "hold " + long}}})
	})
	mux.HandleFunc("GET /debug/syncz", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode([]ads.ProxyStatus{{ID: "p1", Class: "envoy", Stream: "sotw", StreamID: 1, Types: []ads.TypeStatus{
			{TypeURL: "type.googleapis.com/envoy.config.cluster.v3.Cluster", SentNonce: "2", AckedNonce: "1",
				LastNack: &ads.Nack{Nonce: "2", Error: "nack " + long, At: at}}}}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	out, errOut, _ := execute(t, "status", "--admin", srv.URL)
	if n := strings.Count(out, "END-OF-ERROR"); n != 3 {
		t.Errorf("piped status shows %d of the 3 long texts whole (stderr %q):\n%s", n, errOut, out)
	}
	if p := (painter{tty: true}); len(p.oneLine(long)) != 80 || !strings.HasSuffix(p.oneLine(long), "...") {
		t.Errorf("on a terminal: %q, want 80 characters ending ...", p.oneLine(long))
	}
}

// TestStatusReportsRejectedRules: status lists the traffic rules from
// /debug/configz (sources, objects in force, one line per rejected object
// with file:line and reason) and exits 3 while one is rejected; an
// unhealthy registry still exits 2, and without rejection the exit is 0.
func TestStatusReportsRejectedRules(t *testing.T) {
	t.Parallel()
	rejected := istioconfig.Rejection{Kind: "VirtualService", Namespace: "shop", Name: "orders",
		Source: "examples/traffic/orders-canary.yaml:5", Reason: "spec.http[1].route: weights sum to 110,\nnot 100"}
	fake := func(state string, rej ...istioconfig.Rejection) string {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /healthz/registries", func(w http.ResponseWriter, _ *http.Request) {
			_ = json.NewEncoder(w).Encode([]admin.RegistryReport{{Name: "vms", Kind: "file", State: state}})
		})
		mux.HandleFunc("GET /debug/syncz", func(w http.ResponseWriter, _ *http.Request) {
			_ = json.NewEncoder(w).Encode([]ads.ProxyStatus{})
		})
		mux.HandleFunc("GET /debug/configz", func(w http.ResponseWriter, _ *http.Request) {
			_ = json.NewEncoder(w).Encode(admin.Configz{Status: istioconfig.Status{Version: 3,
				InForce: []istioconfig.ObjectStatus{{Kind: "DestinationRule", Namespace: "shop", Name: "orders",
					Source: "examples/traffic/orders-subsets.yaml:5"}},
				Rejected: rej,
				Sources:  []istioconfig.SourceState{{Name: "examples/traffic", Kind: "dir", State: "Synced"}}}})
		})
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	code := func(err error) int {
		var ee exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		return 0
	}
	url := fake("Synced", rejected)
	out, errOut, err := execute(t, "status", "--admin", url)
	if c := code(err); c != exitRejected || exitRejected != 3 {
		t.Errorf("exit %d, want 3 (stderr %q)", c, errOut)
	}
	for _, want := range []string{
		"TRAFFIC RULES: 1 in force, 1 rejected (details: /debug/configz)",
		"examples/traffic  dir   Synced",
		"REJECTED examples/traffic/orders-canary.yaml:5 VirtualService shop/orders: spec.http[1].route: weights sum to 110, not 100\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	out, _, err = execute(t, "status", "--admin", url, "-o", "json")
	var rep statusReport
	if jerr := json.Unmarshal([]byte(out), &rep); jerr != nil || code(err) != exitRejected ||
		rep.Rules == nil || rep.Rules.InForce != 1 || len(rep.Rules.Rejected) != 1 || rep.Rules.Rejected[0].Name != "orders" {
		t.Errorf("-o json: exit %d, rules %+v (%v):\n%s", code(err), rep.Rules, jerr, out)
	}
	if _, _, err := execute(t, "status", "--admin", fake("Degraded", rejected)); code(err) != exitUnhealthy {
		t.Errorf("unhealthy and rejected: exit %d, want %d", code(err), exitUnhealthy)
	}
	out, _, err = execute(t, "status", "--admin", fake("Synced"))
	if c := code(err); c != exitOK || !strings.Contains(out, "1 in force, 0 rejected") || strings.Contains(out, "REJECTED") {
		t.Errorf("nothing rejected: exit %d, want 0:\n%s", c, out)
	}
}
