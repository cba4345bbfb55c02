package admin

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/xds/ads"
	"github.com/meshfed/meshfed/xds/translate"
)

func TestStatusPageShowsHold(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	d := &pageData{Now: now, Refresh: 5, Types: []string{"CDS", "EDS", "LDS", "RDS"},
		Registries: []RegistryReport{{Name: "dc1", Kind: "consul", State: "Held", Services: 3, Endpoints: 10, Restored: true,
			Hold: &HoldReport{Since: now.Add(-2 * time.Minute), Served: 10, Pending: 1, Reason: "would drop 90% of endpoints"}}},
		Conflicts: []aggregate.Conflict{{Category: aggregate.CategoryHoldDown, Since: now}},
		Proxies: proxyRows([]ads.ProxyStatus{{ID: "sidecar~10.0.0.1~a~ns", Class: "envoy", Stream: "sotw", Types: []ads.TypeStatus{
			{TypeURL: translate.EndpointType, SentVersion: "4", SentNonce: "4", AckedVersion: "3", AckedNonce: "3",
				LastNack: &ads.Nack{Version: "4", Nonce: "4", Error: "bad <endpoint>", At: now}},
		}}}),
	}
	var b bytes.Buffer
	if err := pageTmpl.ExecuteTemplate(&b, "index.html", d); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		`action="/debug/registries/dc1/release"`, "Release held update", "serving 10 endpoints, 1 pending",
		"would drop 90% of endpoints", ">restored<", ">Held<",
		`data-proxy="sidecar~10.0.0.1~a~ns"`, ">NACKED<", "bad &lt;endpoint&gt;", "EDS v4",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// TestLoginRedirectStaysLocal: the sign-in form's next= never sends a
// browser to another host, including "/\host", which browsers read as
// "//host".
func TestLoginRedirectStaysLocal(t *testing.T) {
	t.Parallel()
	for next, want := range map[string]string{
		"/registries/vms":      "/registries/vms",
		"":                     "/",
		"https://evil.example": "/",
		"//evil.example":       "/",
		"/\\evil.example":      "/",
		"/debug/\\x":           "/",
	} {
		if got := localPath(next); got != want {
			t.Errorf("localPath(%q) = %q, want %q", next, got, want)
		}
	}
}
