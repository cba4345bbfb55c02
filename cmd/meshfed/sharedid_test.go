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
	"github.com/meshfed/meshfed/xds/ads"
)

// TestBootstrapGRPCNodeIDUnique: without --node-id every --grpc bootstrap
// names a node of its own, keeping GENERATOR: grpc; --node-id still wins.
func TestBootstrapGRPCNodeIDUnique(t *testing.T) {
	t.Parallel()
	node := func(args ...string) (string, map[string]string) {
		t.Helper()
		out, errOut, err := execute(t, append([]string{"bootstrap", "--grpc", "--xds", "127.0.0.1:15010"}, args...)...)
		if err != nil {
			t.Fatalf("bootstrap --grpc: %v\n%s", err, errOut)
		}
		var b struct {
			Node struct {
				ID       string            `json:"id"`
				Metadata map[string]string `json:"metadata"`
			} `json:"node"`
		}
		if err := json.Unmarshal([]byte(out), &b); err != nil {
			t.Fatalf("bootstrap output: %v\n%s", err, out)
		}
		return b.Node.ID, b.Node.Metadata
	}
	a, md := node()
	b, _ := node()
	if a == b {
		t.Errorf("two bootstraps share the node id %q", a)
	}
	for _, id := range []string{a, b} {
		if !strings.HasPrefix(id, "grpc-client-") {
			t.Errorf("node id %q, want a grpc-client-... id", id)
		}
	}
	if md["GENERATOR"] != "grpc" {
		t.Errorf("metadata %v, want GENERATOR: grpc", md)
	}
	if id, _ := node("--node-id", "mine"); id != "mine" {
		t.Errorf("--node-id mine gave node id %q", id)
	}
}

// sharedIDAdmin serves the admin routes status and proxy-config read, with
// two streams sharing the node id grpc-client and one other proxy.
func sharedIDAdmin(t *testing.T) string {
	t.Helper()
	at := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	ps := []ads.ProxyStatus{
		{ID: "grpc-client", Class: "grpc", Stream: "sotw", StreamID: 3, Connected: at},
		{ID: "grpc-client", Class: "grpc", Stream: "sotw", StreamID: 7, Connected: at.Add(time.Minute)},
		{ID: "sidecar~10.0.0.1~a~ns", Class: "envoy", Stream: "delta", StreamID: 1, Connected: at},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/syncz", func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(ps) })
	mux.HandleFunc("GET /healthz/registries", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode([]admin.RegistryReport{{Name: "vms", Kind: "file", State: "Synced"}})
	})
	mux.HandleFunc("GET /debug/config_dump", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(configDump{ID: r.URL.Query().Get("proxy"), Class: "grpc", Resources: map[string][]json.RawMessage{}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestProxyConfigSharedNodeID: proxy-config refuses an id two connected
// streams share instead of showing the newest.
func TestProxyConfigSharedNodeID(t *testing.T) {
	t.Parallel()
	url := sharedIDAdmin(t)
	out, _, err := execute(t, "proxy-config", "clusters", "grpc-client", "--admin", url)
	if err == nil {
		t.Fatalf("proxy-config of a shared node id succeeded:\n%s", out)
	}
	for _, w := range []string{`2 streams share node id "grpc-client"`, "sotw #3", "sotw #7"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	// A proxy of its own is still shown.
	if _, _, err := execute(t, "proxy-config", "clusters", "sidecar~10.0.0.1", "--admin", url); err != nil {
		t.Errorf("proxy-config of an unshared id: %v", err)
	}
}

// TestStatusSharedNodeID: status tells apart two streams sharing a node
// id by their stream numbers and says that they share it.
func TestStatusSharedNodeID(t *testing.T) {
	t.Parallel()
	out, errOut, err := execute(t, "status", "--admin", sharedIDAdmin(t))
	if err != nil {
		var ee exitError
		if !errors.As(err, &ee) {
			t.Fatalf("status: %v\n%s", err, errOut)
		}
	}
	var rows []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "grpc-client ") {
			rows = append(rows, l)
		}
	}
	if len(rows) != 2 || rows[0] == rows[1] {
		t.Errorf("status rows of grpc-client %q, want two distinct ones:\n%s", rows, out)
	}
	if err := containsAll(out, "sotw #3", "sotw #7", "2 streams share node id grpc-client"); err != "" {
		t.Errorf("status lacks %s:\n%s", err, out)
	}
}
