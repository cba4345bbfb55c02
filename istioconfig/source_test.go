package istioconfig

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
)

const goodVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders, namespace: shop}
spec:
  hosts: [orders.vm.internal]
  http:
  - match: [{headers: {x-canary: {exact: "yes"}}}]
    route: [{destination: {host: orders.vm.internal, subset: v2}}]
  - route:
    - {destination: {host: orders.vm.internal, subset: v1}, weight: 90}
    - {destination: {host: orders.vm.internal, subset: v2}, weight: 10}
    timeout: 2s
    retries: {attempts: 3, perTryTimeout: 500ms, retryOn: unavailable}
`

const goodDR = `apiVersion: networking.istio.io/v1beta1
kind: DestinationRule
metadata: {name: orders, namespace: shop}
spec:
  host: orders.vm.internal
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
`

func write(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func keys(st Status) []string {
	var out []string
	for _, o := range st.InForce {
		out = append(out, o.Kind+"/"+o.Namespace+"/"+o.Name)
	}
	return out
}

func TestReloadGood(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, dir, "orders.yaml", goodVS+"---\n"+goodDR+"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
	write(t, dir, "notes.txt", "not yaml: [")
	s := New([]Dir{{Name: "local", Path: dir}}, nil)
	if !s.Reload() {
		t.Fatal("first Reload reported no change")
	}
	st := s.Status()
	if want := []string{"DestinationRule/shop/orders", "VirtualService/shop/orders"}; !slices.Equal(keys(st), want) {
		t.Fatalf("in force = %v, want %v; rejected %v", keys(st), want, st.Rejected)
	}
	if len(st.Rejected) != 0 {
		t.Fatalf("rejected = %v", st.Rejected)
	}
	if got := st.InForce[0].Source; got != filepath.Join(dir, "orders.yaml")+":15" {
		t.Errorf("DR source = %q, want orders.yaml:15", got)
	}
	vs := s.Snapshot().OfKind(KindVirtualService)[0].Spec.(*networking.VirtualService)
	if w := vs.GetHttp()[1].GetRoute()[0].GetWeight(); w != 90 {
		t.Errorf("weight = %d, want 90", w)
	}
	if d := vs.GetHttp()[1].GetTimeout().AsDuration().String(); d != "2s" {
		t.Errorf("timeout = %s", d)
	}
	before := s.Snapshot()
	if s.Reload() {
		t.Error("Reload of unchanged files reported a change")
	}
	if s.Snapshot() != before {
		t.Error("unchanged read published a new snapshot")
	}
}

func TestRejectedAloneKeepsLastGood(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, dir, "a.yaml", goodVS)
	write(t, dir, "b.yaml", goodDR)
	s := New([]Dir{{Name: "local", Path: dir}}, nil)
	s.Reload()
	oldVS := s.Snapshot().OfKind(KindVirtualService)[0]

	// The VirtualService turns invalid: it is rejected, its last good
	// version stays; the DestinationRule is untouched.
	write(t, dir, "a.yaml", strings.Replace(goodVS, "weight: 10", "weight: -10", 1))
	if s.Reload() {
		t.Error("an invalid edit changed what is in force")
	}
	st := s.Status()
	if len(st.InForce) != 2 || s.Snapshot().OfKind(KindVirtualService)[0] != oldVS {
		t.Fatalf("in force = %v, want the last good VirtualService and the DestinationRule", keys(st))
	}
	if len(st.Rejected) != 1 {
		t.Fatalf("rejected = %v, want one", st.Rejected)
	}
	r := st.Rejected[0]
	if r.Source != filepath.Join(dir, "a.yaml")+":1" || r.Name != "orders" || !r.KeptLastGood ||
		!strings.Contains(r.Reason, "spec.http[1].route[1].weight -10: must not be negative") {
		t.Errorf("rejection = %+v", r)
	}

	// A syntax error in the file keeps its objects too.
	write(t, dir, "a.yaml", "kind: [")
	s.Reload()
	if st := s.Status(); len(st.InForce) != 2 || len(st.Rejected) != 1 || !strings.Contains(st.Rejected[0].Reason, "YAML syntax error") {
		t.Fatalf("after syntax error: in force %v, rejected %v", keys(st), st.Rejected)
	}

	// Deleting the file removes its objects.
	os.Remove(filepath.Join(dir, "a.yaml"))
	if !s.Reload() {
		t.Fatal("deleting a file did not change what is in force")
	}
	if got := keys(s.Status()); !slices.Equal(got, []string{"DestinationRule/shop/orders"}) {
		t.Errorf("in force = %v", got)
	}
}

func TestRejections(t *testing.T) {
	t.Parallel()
	hdr := "apiVersion: networking.istio.io/v1alpha3\nkind: VirtualService\nmetadata: {name: x}\nspec:\n"
	drh := "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x}\nspec:\n"
	tests := []struct {
		name, body, reason string
	}{
		{"no hosts", hdr + "  http: [{route: [{destination: {host: a.b}}]}]\n", "spec.hosts: at least one host is required"},
		{"bad apiVersion", strings.Replace(hdr, "v1alpha3", "v2", 1) + "  hosts: [a.b]\n", `apiVersion "networking.istio.io/v2"`},
		{"unknown field", hdr + "  hosts: [a.b]\n  htp: []\n", `unknown field "htp"`},
		{"no destination host", hdr + "  hosts: [a.b]\n  http: [{route: [{destination: {subset: v1}}]}]\n", "spec.http[0].route[0].destination.host: is required"},
		{"bad regex", hdr + "  hosts: [a.b]\n  http: [{match: [{uri: {regex: '('}}], route: [{destination: {host: a.b}}]}]\n", "spec.http[0].match[0].uri: regex"},
		{"bad duration", hdr + "  hosts: [a.b]\n  http: [{route: [{destination: {host: a.b}}], timeout: 10}]\n", `spec.http[0].timeout: want a duration string like "5s", got 10`},
		{"tiny timeout", hdr + "  hosts: [a.b]\n  http: [{route: [{destination: {host: a.b}}], timeout: 0.0001s}]\n", "want at least 1ms"},
		{"bad grpc abort", hdr + "  hosts: [a.b]\n  http: [{route: [{destination: {host: a.b}}], fault: {abort: {grpcStatus: NOPE}}}]\n", `grpcStatus "NOPE"`},
		{"bad retryOn", hdr + "  hosts: [a.b]\n  http: [{route: [{destination: {host: a.b}}], retries: {attempts: 2, retryOn: sometimes}}]\n", `retryOn "sometimes"`},
		{"tls route", hdr + "  hosts: [a.b]\n  tls: [{match: [{sniHosts: [a.b]}], route: [{destination: {host: a.b}}]}]\n", "spec.tls: TLS (SNI) routes are not supported yet"},
		{"tcp no route", hdr + "  hosts: [a.b]\n  tcp: [{match: [{port: 5432}]}]\n", "spec.tcp[0].route: at least one destination is required"},
		{"redirect and route", hdr + "  hosts: [a.b]\n  http: [{redirect: {uri: /x}, route: [{destination: {host: a.b}}]}]\n", "must not have route destinations"},
		{"redirect code", hdr + "  hosts: [a.b]\n  http: [{redirect: {uri: /x, redirectCode: 200}}]\n", "redirectCode 200"},
		{"rewrite regex", hdr + "  hosts: [a.b]\n  http: [{rewrite: {uriRegexRewrite: {match: '(', rewrite: x}}, route: [{destination: {host: a.b}}]}]\n", "spec.http[0].rewrite.uriRegexRewrite.match"},
		{"header name", hdr + "  hosts: [a.b]\n  http: [{headers: {request: {set: {'bad name': v}}}, route: [{destination: {host: a.b}}]}]\n", `spec.http[0].headers.request.set "bad name"`},
		{"mirror percent", hdr + "  hosts: [a.b]\n  http: [{mirror: {host: c.d}, mirrorPercentage: {value: 150}, route: [{destination: {host: a.b}}]}]\n", "mirrorPercentage.value 150"},
		{"deprecated mirror percent", hdr + "  hosts: [a.b]\n  http: [{mirror: {host: c.d}, mirrorPercent: 150, route: [{destination: {host: a.b}}]}]\n", "spec.http[0].mirrorPercent 150: want 0-100"},
		{"deprecated delay percent", hdr + "  hosts: [a.b]\n  http: [{fault: {delay: {fixedDelay: 1s, percent: 101}}, route: [{destination: {host: a.b}}]}]\n", "spec.http[0].fault.delay.percent 101: want 0-100"},
		{"cors method", hdr + "  hosts: [a.b]\n  http: [{corsPolicy: {allowMethods: [FETCH]}, route: [{destination: {host: a.b}}]}]\n", `allowMethods "FETCH"`},
		{"delegate", hdr + "  hosts: [a.b]\n  http: [{delegate: {name: y}}]\n", "delegate VirtualServices are not supported yet"},
		{"cookie attribute no name", drh + "  host: a.b\n  trafficPolicy: {loadBalancer: {consistentHash: {httpCookie: {name: s, attributes: [{value: Strict}]}}}}\n", `spec.trafficPolicy.loadBalancer.consistentHash.httpCookie.attributes[0].name "": not an attribute name`},
		{"cookie attribute value", drh + "  host: a.b\n  trafficPolicy: {loadBalancer: {consistentHash: {httpCookie: {name: s, attributes: [{name: SameSite, value: \"a; Domain=evil\"}]}}}}\n", `httpCookie.attributes[0].value "a; Domain=evil": must not hold ';'`},
		{"cookie name", drh + "  host: a.b\n  trafficPolicy: {loadBalancer: {consistentHash: {httpCookie: {name: \"a b\"}}}}\n", `httpCookie.name "a b": not a cookie name`},
		{"hash header name", drh + "  host: a.b\n  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: \"x\\nb\"}}}\n", `httpHeaderName "x\nb": not a header name`},
		{"istio mutual", drh + "  host: a.b\n  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}\n", "mode ISTIO_MUTUAL: needs Istio workload certificates"},
		{"mutual without key", drh + "  host: a.b\n  trafficPolicy: {tls: {mode: MUTUAL, clientCertificate: /c.pem, caCertificates: /ca.pem}}\n", "mode MUTUAL needs clientCertificate and privateKey"},
		{"relative tls path", drh + "  host: a.b\n  trafficPolicy: {portLevelSettings: [{port: {number: 443}, tls: {mode: SIMPLE, caCertificates: ca.pem}}]}\n", `spec.trafficPolicy.portLevelSettings[0].tls.caCertificates "ca.pem": want an absolute path`},
		{"credential name", drh + "  host: a.b\n  trafficPolicy: {tls: {mode: SIMPLE, credentialName: x}}\n", "credentialName: secrets by name need SDS"},
		{"passthrough", drh + "  host: a.b\n  trafficPolicy: {loadBalancer: {simple: PASSTHROUGH}}\n", "PASSTHROUGH: not supported"},
		{"locality failover priority", drh + "  host: a.b\n  trafficPolicy: {loadBalancer: {localityLbSetting: {failoverPriority: [topology.kubernetes.io/region]}}}\n", "localityLbSetting.failoverPriority: not supported yet"},
		{"locality failover same", drh + "  host: a.b\n  trafficPolicy: {loadBalancer: {localityLbSetting: {failover: [{from: us-east, to: us-east}]}}}\n", `failover[0]: from and to are the same region "us-east"`},
		{"locality failover zone", drh + "  host: a.b\n  trafficPolicy: {loadBalancer: {localityLbSetting: {failover: [{from: us-east/a, to: us-west}]}}}\n", "failover[0]: from and to are region names"},
		{"locality failover and distribute", drh + "  host: a.b\n  trafficPolicy: {loadBalancer: {localityLbSetting: {failover: [{from: us-east, to: us-west}], distribute: [{from: '*', to: {us-east/*: 100}}]}}}\n", "failover and distribute are mutually exclusive"},
		{"locality from one locality", drh + "  host: a.b\n  trafficPolicy: {loadBalancer: {localityLbSetting: {distribute: [{from: us-east/*, to: {us-east/*: 100}}]}}}\n", `distribute[0].from "us-east/*": only "*"`},
		{"locality weights", drh + "  host: a.b\n  trafficPolicy: {loadBalancer: {localityLbSetting: {distribute: [{from: '*', to: {us-east/*: 60, us-west/*: 30}}]}}}\n", "weights sum to 90; want 100"},
		{"cookie name", drh + "  host: a.b\n  trafficPolicy: {loadBalancer: {consistentHash: {httpCookie: {ttl: 10s}}}}\n", "httpCookie.name: is required"},
		{"maglev size", drh + "  host: a.b\n  trafficPolicy: {loadBalancer: {consistentHash: {useSourceIp: true, maglev: {tableSize: 1000}}}}\n", "maglev.tableSize 1000: want a prime"},
		{"dr workload selector", drh + "  host: a.b\n  workloadSelector: {matchLabels: {app: a}}\n", "spec.workloadSelector: not supported"},
		{"port twice", drh + "  host: a.b\n  trafficPolicy: {portLevelSettings: [{port: {number: 80}}, {port: {number: 80}}]}\n", "port already has settings"},
		{"dr no host", drh + "  subsets: [{name: v1}]\n", "spec.host: is required"},
		{"dr dup subset", drh + "  host: a.b\n  subsets: [{name: v1}, {name: v1}]\n", `duplicate subset name`},
		{"dr hash key", drh + "  host: a.b\n  trafficPolicy: {loadBalancer: {consistentHash: {minimumRingSize: 3}}}\n", "a hash key is required"},
		{"weights over uint32", hdr + "  hosts: [a.b]\n  http: [{route: [{destination: {host: a.b, subset: x}, weight: 2000000000}, {destination: {host: a.b, subset: y}, weight: 2000000000}, {destination: {host: a.b, subset: z}, weight: 2000000000}]}]\n", "weights sum to 6000000000"},
		{"ring too large", drh + "  host: a.b\n  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user, ringHash: {minimumRingSize: 10000000}}}}\n", "minimumRingSize 10000000: want at most 8388608"},
		{"alias bomb", aliasBomb, "the document is too large"},
		{"no name", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nspec: {host: a.b}\n", "metadata.name is required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			write(t, dir, "x.yaml", tc.body)
			st := Validate(Dir{Name: "d", Path: dir})
			if len(st.InForce) != 0 || len(st.Rejected) != 1 {
				t.Fatalf("in force %v, rejected %v; want one rejection", keys(st), st.Rejected)
			}
			if !strings.Contains(st.Rejected[0].Reason, tc.reason) {
				t.Errorf("reason = %q, want it to contain %q", st.Rejected[0].Reason, tc.reason)
			}
			if !strings.HasSuffix(st.Rejected[0].Source, "x.yaml:1") {
				t.Errorf("source = %q, want x.yaml:1", st.Rejected[0].Source)
			}
		})
	}
}

func TestConflicts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, dir, "a.yaml", goodVS)
	write(t, dir, "b.yaml", strings.Replace(goodVS, "name: orders,", "name: orders-b,", 1)+"---\n"+goodVS)
	// A VirtualService bound only to a gateway does not conflict.
	write(t, dir, "c.yaml", strings.Replace(strings.Replace(goodVS, "name: orders,", "name: orders-gw,", 1), "  http:", "  gateways: [shop/ingress]\n  http:", 1))
	st := Validate(Dir{Name: "d", Path: dir})
	if got := keys(st); !slices.Equal(got, []string{"VirtualService/shop/orders", "VirtualService/shop/orders-gw"}) {
		t.Fatalf("in force = %v; rejected %v", got, st.Rejected)
	}
	if len(st.Rejected) != 2 {
		t.Fatalf("rejected = %v, want two", st.Rejected)
	}
	for _, r := range st.Rejected {
		switch r.Name {
		case "orders-b":
			if !strings.Contains(r.Reason, `host "orders.vm.internal" already has VirtualService shop/orders`) {
				t.Errorf("conflict reason = %q", r.Reason)
			}
		case "orders":
			if !strings.Contains(r.Reason, "already defined at "+filepath.Join(dir, "a.yaml")+":1") {
				t.Errorf("duplicate reason = %q", r.Reason)
			}
		default:
			t.Errorf("unexpected rejection %+v", r)
		}
	}
}

// TestShortNameConflicts: a short host and its full name are one host
// (Istio resolves short names in the rule's namespace), so the two
// DestinationRules for it merge; the same short name in another namespace
// is another host; the full name from another namespace is refused.
func TestShortNameConflicts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dr := func(name, ns, host string) string {
		return "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec: {host: " + host + "}\n"
	}
	write(t, dir, "a.yaml", dr("a", "shop", "reviews")+"---\n"+dr("b", "shop", "reviews.shop.svc.cluster.local")+"---\n"+
		dr("c", "other", "reviews")+"---\n"+dr("d", "other", "reviews.shop.svc.cluster.local"))
	st := Validate(Dir{Name: "d", Path: dir})
	if got := keys(st); !slices.Equal(got, []string{"DestinationRule/other/c", "DestinationRule/shop/a", "DestinationRule/shop/b"}) {
		t.Fatalf("in force = %v; rejected %v", got, st.Rejected)
	}
	if len(st.Rejected) != 1 || st.Rejected[0].Name != "d" ||
		!strings.Contains(st.Rejected[0].Reason, `host "reviews.shop.svc.cluster.local" already has DestinationRule shop/a from another namespace`) {
		t.Errorf("rejected = %v", st.Rejected)
	}
	if len(st.Merged) != 1 || st.Merged[0].Host != "reviews.shop.svc.cluster.local" || !slices.Equal(st.Merged[0].Objects, []string{"shop/a", "shop/b"}) {
		t.Errorf("merged = %+v", st.Merged)
	}
}

// TestMissingDirKeepsObjects: a directory that disappears (an unmounted
// volume) is reported and keeps its objects in force: stale beats empty.
func TestMissingDirKeepsObjects(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "traffic")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "a.yaml", goodVS+"---\n"+goodDR)
	s := New([]Dir{{Name: "local", Path: dir}}, nil)
	s.Reload()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if s.Reload() {
		t.Error("a missing directory changed what is in force")
	}
	st := s.Status()
	if len(st.InForce) != 2 || len(st.Rejected) != 1 || !strings.Contains(st.Rejected[0].Reason, `config source "local"`) {
		t.Errorf("in force %v, rejected %+v", keys(st), st.Rejected)
	}
}

func FuzzParseObjects(f *testing.F) {
	f.Add([]byte(goodVS + "---\n" + goodDR))
	f.Add([]byte("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: a}\nspec: {hosts: [a], http: [{route: [{destination: {host: a}, weight: 1}], timeout: 1m, fault: {delay: {fixedDelay: 1s}}}]}\n"))
	f.Add([]byte("kind: DestinationRule\nspec: [1, 2]\n---\n- a\n---\n&a [*a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, rej := ParseObjects("f.yaml", data)
		for _, o := range objs {
			if o.Spec == nil || o.Name == "" || o.Hash == "" {
				t.Fatalf("object without spec, name or hash: %+v", o)
			}
		}
		for _, r := range rej {
			if r.Reason == "" || !strings.HasPrefix(r.Source, "f.yaml") {
				t.Fatalf("rejection without reason or source: %+v", r)
			}
		}
	})
}

// aliasBomb expands to 9^8 nodes through aliases.
var aliasBomb = func() string {
	b := "a: &a [x, x, x, x, x, x, x, x, x]\n"
	for c := 'b'; c <= 'h'; c++ {
		p := string(c - 1)
		b += string(c) + ": &" + string(c) + " [*" + p + strings.Repeat(", *"+p, 8) + "]\n"
	}
	return b + "kind: VirtualService\n"
}()

// warnLog captures the WARN records of a Source's logger.
type warnLog struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnLog) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnLog) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *warnLog) WithGroup(string) slog.Handler            { return w }
func (w *warnLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level != slog.LevelWarn {
		return nil
	}
	line := r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "reason" || a.Key == "object" {
			line += " " + a.Key + "=" + a.Value.String()
		}
		return true
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, line)
	return nil
}

func (w *warnLog) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.msgs
	w.msgs = nil
	return out
}

// A rejected object is logged once, not on every re-read of unchanged
// files; a new reason, and a fixed then broken again object, log again.
func TestRejectionWarnedOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: x, namespace: shop}\nspec:\n  http: [{route: [{destination: {host: a.b}}]}]\n"
	write(t, dir, "x.yaml", bad)
	w := &warnLog{}
	s := New([]Dir{{Name: "d", Path: dir}}, slog.New(w))
	s.Reload()
	s.Reload()
	if got := w.take(); len(got) != 1 || !strings.Contains(got[0], "config object rejected") {
		t.Fatalf("two reloads of an unchanged bad object logged %q; want one WARN", got)
	}
	s.Reload()
	if got := w.take(); len(got) != 0 {
		t.Fatalf("third reload logged %q; want nothing", got)
	}

	// Another reason: a new WARN.
	write(t, dir, "x.yaml", strings.Replace(bad, "{host: a.b}", "{subset: v1}", 1)+"  hosts: [a.b]\n")
	s.Reload()
	s.Reload()
	if got := w.take(); len(got) != 1 || !strings.Contains(got[0], "destination.host: is required") {
		t.Fatalf("changed reason logged %q; want one WARN with the new reason", got)
	}

	// Fixed, then broken again: warned again.
	write(t, dir, "x.yaml", goodVS)
	s.Reload()
	if got := w.take(); len(got) != 0 {
		t.Fatalf("fixed object logged %q", got)
	}
	write(t, dir, "x.yaml", bad)
	s.Reload()
	s.Reload()
	if got := w.take(); len(got) != 1 {
		t.Fatalf("re-broken object logged %q; want one WARN", got)
	}
}
