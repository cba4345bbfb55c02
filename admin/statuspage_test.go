package admin

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/explain"
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
// with the config sources and their state, the objects in force with
// their sources and hosts (linked to the host pages, wildcards not), each
// rejected object with its reason, and a link to /debug/configz.
func TestStatusPageShowsRules(t *testing.T) {
	t.Parallel()
	d := &pageData{Now: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC), Refresh: 5, Types: []string{"CDS", "EDS", "LDS", "RDS"},
		Rules: Configz{Status: istioconfig.Status{
			InForce: []istioconfig.ObjectStatus{{Kind: "DestinationRule", Namespace: "shop", Name: "orders", Source: "traffic/orders-subsets.yaml:5",
				Hosts: []string{"orders.vm.internal"}},
				{Kind: "VirtualService", Namespace: "shop", Name: "web", Source: "traffic/web.yaml:1", Hosts: []string{"*.web.internal"}}},
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
		`id="rules-in-force"`, `data-rule="DestinationRule/shop/orders"`, `<a href="/hosts/orders.vm.internal">orders.vm.internal</a>`,
		"traffic/orders-subsets.yaml:5", "*.web.internal</td>",
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

// TestHostPageEscapes: the host page shows what it is asked and what the
// rules say as text, never as markup, and links hosts and endpoints with
// their names escaped for the URL.
func TestHostPageEscapes(t *testing.T) {
	t.Parallel()
	d := &pageData{Now: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC), Refresh: 5,
		HostName: "a.vm.internal", Query: `"><script>x()</script>`,
		Host: &explain.Description{
			Service:   explain.ServiceInfo{Host: "a.vm.internal", Sources: []string{"vms"}},
			Endpoints: []explain.EndpointInfo{{Address: "10.0.0.1&x=<y>", Health: "HEALTHY"}},
			Traffic: explain.Traffic{Rejected: []istioconfig.Rejection{{Kind: "VirtualService", Namespace: "ns", Name: "<b>", Reason: "bad <i>"}},
				Policies: []explain.Policy{{Rule: "ns/r", Kind: "tls", Summary: "SIMPLE, ca </td>"}}},
		}}
	var b bytes.Buffer
	if err := pageTmpl.ExecuteTemplate(&b, "host.html", d); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		`value="&#34;&gt;&lt;script&gt;x()&lt;/script&gt;"`, `href="/hosts/a.vm.internal?endpoint=10.0.0.1%26x%3d%3cy%3e"`,
		"VirtualService ns/&lt;b&gt;", "bad &lt;i&gt;", "SIMPLE, ca &lt;/td&gt;",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("host page lacks %q", want)
		}
	}
	for _, bad := range []string{"<script>", "<b>", "<i>"} {
		if strings.Contains(out, bad) {
			t.Errorf("host page carries %q as markup", bad)
		}
	}
}
