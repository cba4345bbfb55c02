package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/admin"
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
