package admin

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/istioconfig"
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

// TestStatusPageShowsRules: the status page has a traffic rules section
// with the config sources and their state, the number of objects in
// force, each rejected object with its reason, and a link to
// /debug/configz.
func TestStatusPageShowsRules(t *testing.T) {
	t.Parallel()
	d := &pageData{Now: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC), Refresh: 5, Types: []string{"CDS", "EDS", "LDS", "RDS"},
		Rules: Configz{Status: istioconfig.Status{
			InForce: []istioconfig.ObjectStatus{{Kind: "DestinationRule", Namespace: "shop", Name: "orders", Source: "traffic/orders-subsets.yaml:5"},
				{Kind: "VirtualService", Namespace: "shop", Name: "web", Source: "traffic/web.yaml:1"}},
			Rejected: []istioconfig.Rejection{{Kind: "VirtualService", Namespace: "shop", Name: "orders",
				Source: "traffic/orders-canary.yaml:5", Reason: "weights sum to <110>", KeptLastGood: true}},
			Sources: []istioconfig.SourceState{{Name: "traffic", Kind: "dir", State: "Synced"},
				{Name: "k8s", Kind: "kubernetes", Cluster: "east", State: "Degraded", Error: "connection refused"}},
		}},
	}
	var b bytes.Buffer
	if err := pageTmpl.ExecuteTemplate(&b, "index.html", d); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		`<section id="rules">`, "Traffic rules", "2 objects in force", "1 rejected",
		`<a href="/debug/configz">/debug/configz</a>`,
		`data-source="traffic"`, `<span class="badge ok">Synced</span>`,
		`data-source="k8s"`, "(east)", `<span class="badge bad">Degraded</span>`, "connection refused",
		`id="rejected-rules"`, "VirtualService shop/orders", "traffic/orders-canary.yaml:5", "weights sum to &lt;110&gt;",
		"its last good version stays in force",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// Without configSources the section says so and still links configz.
	b.Reset()
	d.Rules = Configz{}
	if err := pageTmpl.ExecuteTemplate(&b, "index.html", d); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"0 objects in force", "no config source", `href="/debug/configz"`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("page without rules lacks %q", want)
		}
	}
	if strings.Contains(b.String(), "rejected-rules") {
		t.Error("page without rejected objects has the rejected table")
	}
}
