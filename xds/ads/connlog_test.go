package ads

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// TestConnectAndDisconnectLoggedAtInfo: a proxy's connect and disconnect
// are both INFO lines with the same keys; the disconnect says how long
// the stream lasted.
func TestConnectAndDisconnectLoggedAtInfo(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	tr := newTracker(slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})), nil)
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	tr.now = func() time.Time { return now }
	s := tr.open(streamKey{delta: true, id: 4})
	tr.learn(s, &core.Node{Id: "sidecar~10.0.0.1~a~ns"}, "envoy")
	now = now.Add(90 * time.Second)
	tr.close(s)

	var recs []map[string]any
	dec := json.NewDecoder(&logs)
	for dec.More() {
		var r map[string]any
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 2 {
		t.Fatalf("%d log lines at INFO, want connect and disconnect: %v", len(recs), recs)
	}
	for i, msg := range []string{"xds proxy connected", "xds proxy disconnected"} {
		r := recs[i]
		if r["msg"] != msg || r["level"] != "INFO" {
			t.Errorf("line %d = %v, want %q at INFO", i, r, msg)
		}
		for k, want := range map[string]any{"node": "sidecar~10.0.0.1~a~ns", "class": "envoy", "stream": "delta", "streamId": 4.0} {
			if r[k] != want {
				t.Errorf("%s: %s = %v, want %v", msg, k, r[k], want)
			}
		}
	}
	if d := recs[1]["duration"]; d != float64(90*time.Second) {
		t.Errorf("disconnect duration = %v, want 90s", d)
	}
}
