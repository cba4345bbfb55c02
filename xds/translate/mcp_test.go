package translate

import (
	"bytes"
	cmpv "cmp"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	mcp "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/internal/testfixture"
)

var seOf = testfixture.ServiceEntryOf

func TestServiceEntryMapping(t *testing.T) {
	t.Parallel()
	svc := ordersSvc()
	svc.Ports = append(svc.Ports, model.Port{Name: "Bad_Name", Number: 9000, Protocol: model.ProtocolHTTP})
	svc.Endpoints[0].Labels = map[string]string{"version": "v1", "bad key!": "x"}
	svc.Endpoints = append(svc.Endpoints,
		model.Endpoint{Address: "10.0.0.8", Ports: map[string]uint32{"grpc": model.NotServed}}, // serves only one port
		svc.Endpoints[0]) // duplicate: served once
	md, se := seOf(t, serviceEntryResource(svc))
	if md.GetName() != "meshfed/orders.vm.internal" {
		t.Errorf("name = %q", md.GetName())
	}
	if got := md.GetLabels(); got[LabelRegistries] != "vms" || got[LabelRegistryPrefix+"vms"] != "true" || got[LabelManagedBy] != "meshfed" {
		t.Errorf("labels = %v", got)
	}
	if !slices.Equal(se.GetHosts(), []string{"orders.vm.internal"}) || se.GetResolution() != networking.ServiceEntry_STATIC ||
		se.GetLocation() != networking.ServiceEntry_MESH_INTERNAL || !slices.Equal(se.GetExportTo(), []string{"*"}) {
		t.Errorf("entry = %v", se)
	}
	var ports []string
	for _, p := range se.GetPorts() {
		ports = append(ports, p.GetName()+"/"+p.GetProtocol())
	}
	if want := []string{"grpc/GRPC", "http-9000/HTTP"}; !slices.Equal(ports, want) {
		t.Errorf("ports = %v, want %v", ports, want)
	}
	// Only 10.0.0.5 is healthy, serves every port and is not a duplicate.
	if n := len(se.GetEndpoints()); n != 1 {
		t.Fatalf("endpoints = %v, want only 10.0.0.5", se.GetEndpoints())
	}
	ep := se.GetEndpoints()[0]
	if ep.GetAddress() != "10.0.0.5" || ep.GetPorts()["grpc"] != 18080 || ep.GetWeight() != 2 ||
		ep.GetLocality() != "us-east/us-east-1a" || ep.GetLabels()["version"] != "v1" ||
		ep.GetLabels()[LabelRegistry] != "vms" || len(ep.GetLabels()) != 2 {
		t.Errorf("endpoint = %v", ep)
	}

	// The version changes exactly when the content does.
	again, _ := seOf(t, serviceEntryResource(svc))
	if again.GetVersion() != md.GetVersion() {
		t.Errorf("version changed on rebuild: %s → %s", md.GetVersion(), again.GetVersion())
	}
	svc.Endpoints[0].Weight = 3
	changed, _ := seOf(t, serviceEntryResource(svc))
	if changed.GetVersion() == md.GetVersion() {
		t.Error("version did not change with the content")
	}

	dns := &model.Service{Hostname: "api.ext.example", Resolution: model.ResolutionDNS,
		Ports: []model.Port{{Name: "https", Number: 443, Protocol: model.ProtocolHTTP2}}, Endpoints: []model.Endpoint{{Address: "api.example.com"}}}
	if _, se := seOf(t, serviceEntryResource(dns)); se.GetResolution() != networking.ServiceEntry_DNS || se.GetEndpoints()[0].GetAddress() != "api.example.com" {
		t.Errorf("DNS entry = %v", se)
	}
}

// seChange is how changed() lists a ServiceEntry added (op "+") or
// removed ("-"): once per collection version istiod may ask for.
func seChange(op, host string) []string {
	var out []string
	for range mcpByURL[ServiceEntryTypeURL].typeURLs {
		out = append(out, " ServiceEntry "+op+MCPNamespace+"/"+host)
	}
	return out
}

// configSnap parses YAML into a config snapshot, failing on rejections.
func configSnap(t *testing.T, version uint64, yaml string) *model.ConfigSnapshot {
	t.Helper()
	objs, rej := istioconfig.ParseObjects("test.yaml", []byte(yaml))
	if len(rej) > 0 {
		t.Fatalf("rejected: %v", rej)
	}
	return model.NewConfigSnapshot(version, objs)
}

const testDR = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders, namespace: shop}
spec:
  host: orders.vm.internal
  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]
`

const testVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders, namespace: shop}
spec:
  hosts: [orders.vm.internal]
  http:
  - route:
    - {destination: {host: orders.vm.internal, subset: v1}, weight: 90}
    - {destination: {host: orders.vm.internal, subset: v2}, weight: 10}
`

// TestMCPConfigObjects: VirtualServices and DestinationRules in force are
// served in every version of their MCP collection, named
// <namespace>/<name>, versioned by content; an unchanged object is not
// reported again and a removed one is removed.
func TestMCPConfigObjects(t *testing.T) {
	t.Parallel()
	tr := NewTranslator()
	snap := model.NewSnapshot(1, []*model.Service{ordersSvc()})
	snap.Config = configSnap(t, 1, testDR+"---\n"+testVS)
	ch := tr.Translate(snap)
	var firstVersion string
	for _, u := range gvks("networking.istio.io", "VirtualService", "v1", "v1beta1", "v1alpha3") {
		up, _ := ch.Names(Kind{TypeURL: u})
		if !slices.Equal(up, []string{"shop/orders"}) {
			t.Fatalf("%s updated %v, want shop/orders", u, up)
		}
		res := tr.Resources(Kind{TypeURL: u})["shop/orders"].(*mcp.Resource)
		vs := &networking.VirtualService{}
		if err := res.GetBody().UnmarshalTo(vs); err != nil {
			t.Fatal(err)
		}
		if w := vs.GetHttp()[0].GetRoute()[1].GetWeight(); w != 10 || vs.GetHosts()[0] != "orders.vm.internal" {
			t.Errorf("%s body = %v", u, vs)
		}
		firstVersion = res.GetMetadata().GetVersion()
	}
	if up, _ := ch.Names(Kind{TypeURL: "networking.istio.io/v1/DestinationRule"}); !slices.Equal(up, []string{"shop/orders"}) {
		t.Fatalf("DestinationRule updated %v", up)
	}

	// Same objects (new snapshot, same pointers): nothing changes.
	snap2 := model.NewSnapshot(2, snap.Services())
	snap2.Config = snap.Config
	if ch := tr.Translate(snap2); len(ch) != 0 {
		t.Errorf("unchanged config reported changes: %v", ch)
	}

	// The VirtualService shifts its weights; the DestinationRule goes.
	snap3 := model.NewSnapshot(3, snap.Services())
	snap3.Config = configSnap(t, 2, strings.Replace(strings.Replace(testVS, "weight: 90", "weight: 0", 1), "weight: 10", "weight: 100", 1))
	ch = tr.Translate(snap3)
	vsKind := Kind{TypeURL: "networking.istio.io/v1/VirtualService"}
	if up, _ := ch.Names(vsKind); !slices.Equal(up, []string{"shop/orders"}) {
		t.Errorf("VirtualService updated %v", up)
	}
	if v := tr.Resources(vsKind)["shop/orders"].(*mcp.Resource).GetMetadata().GetVersion(); v == firstVersion {
		t.Error("version did not change with the content")
	}
	if _, rm := ch.Names(Kind{TypeURL: "networking.istio.io/v1/DestinationRule"}); !slices.Equal(rm, []string{"shop/orders"}) {
		t.Errorf("DestinationRule removed %v", rm)
	}
}

// The regexes of Istio's name and label validation (pkg/config/labels),
// which validLabel and validPortName implement as byte loops.
var (
	refDNS1123Label = regexp.MustCompile(`^[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?$`)
	refLabelKey     = regexp.MustCompile(`^([a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?)*/)?((?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$`)
	refLabelValue   = regexp.MustCompile(`^((?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)
)

func refValidLabel(k, v string) bool {
	m := refLabelKey.FindStringSubmatch(k)
	if m == nil || len(m[2]) > 63 || (len(m[1]) > 0 && len(m[1])-1 > 253) {
		return false
	}
	return len(v) <= 63 && refLabelValue.MatchString(v)
}

var labelCases = []string{
	"", "a", "A", "0", "-", "a-", "-a", "a-b", "a_b", "a.b", "a..b", "_a", "a_", ".a", "a.",
	"app", "version", "Bad_Name", "bad key!", "meshfed.io/registry", "registry.meshfed.io/vms",
	"/a", "a/", "a/b/c", "a.-b/c", "a-.b/c", "A.B/c", "a b", "ä", "x/y_z.w", "k8s.io/", "héllo/x",
	strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a.", 126) + "a/b", strings.Repeat("a.", 127) + "a/b",
	strings.Repeat("b", 253) + "/x", strings.Repeat("b", 254) + "/x",
}

// TestLabelValidation: the byte loops agree with Istio's regexes.
func TestLabelValidation(t *testing.T) {
	t.Parallel()
	for _, k := range labelCases {
		if got, want := validPortName(k), len(k) <= 63 && refDNS1123Label.MatchString(k); got != want {
			t.Errorf("validPortName(%q) = %v, want %v", k, got, want)
		}
		for _, v := range labelCases {
			if got, want := validLabel(k, v), refValidLabel(k, v); got != want {
				t.Errorf("validLabel(%q, %q) = %v, want %v", k, v, got, want)
			}
		}
	}
}

func FuzzLabelValidation(f *testing.F) {
	for _, c := range labelCases {
		f.Add(c, c)
	}
	f.Fuzz(func(t *testing.T, k, v string) {
		if got, want := validLabel(k, v), refValidLabel(k, v); got != want {
			t.Errorf("validLabel(%q, %q) = %v, want %v", k, v, got, want)
		}
		if got, want := validPortName(k), len(k) <= 63 && refDNS1123Label.MatchString(k); got != want {
			t.Errorf("validPortName(%q) = %v, want %v", k, got, want)
		}
	})
}

// TestEnableMCP: ServiceEntries are built only once MCP is enabled; then
// every served service gets one at once (an invalid one none), and later
// changes keep them current.
func TestEnableMCP(t *testing.T) {
	t.Parallel()
	tr := NewTranslator()
	bad := &model.Service{Hostname: "bad host", Ports: []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}},
		Endpoints: []model.Endpoint{{Address: ""}}}
	svcs := append(fixture(), bad)
	ch := tr.Translate(model.NewSnapshot(1, svcs))
	for _, u := range mcpByURL[ServiceEntryTypeURL].typeURLs {
		if up, _ := ch.Names(Kind{TypeURL: u}); len(up) != 0 {
			t.Errorf("%s built before EnableMCP: %v", u, up)
		}
	}
	var want []string
	for _, s := range fixture() {
		want = append(want, MCPNamespace+"/"+s.Hostname)
	}
	slices.Sort(want)
	ch = tr.EnableMCP()
	for _, u := range mcpByURL[ServiceEntryTypeURL].typeURLs {
		if up, _ := ch.Names(Kind{TypeURL: u}); !slices.Equal(up, want) {
			t.Errorf("EnableMCP %s = %v, want %v", u, up, want)
		}
		if got := resourceNames(tr.Resources(Kind{TypeURL: u})); !slices.Equal(got, want) {
			t.Errorf("Resources(%s) = %v, want %v", u, got, want)
		}
	}
	if ch := tr.EnableMCP(); len(ch) != 0 {
		t.Errorf("second EnableMCP changed %v", changed(ch))
	}
	o := ordersSvc()
	o.Endpoints[1].Health = model.Healthy
	ch = tr.Translate(model.NewSnapshot(2, testfixture.Replace(svcs, "orders.vm.internal", o)))
	_, se := seOf(t, tr.Resources(Kind{TypeURL: ServiceEntryTypeURL})["meshfed/orders.vm.internal"])
	if up, _ := ch.Names(Kind{TypeURL: ServiceEntryTypeURL}); !slices.Equal(up, []string{"meshfed/orders.vm.internal"}) || len(se.GetEndpoints()) != 2 {
		t.Errorf("after an endpoint change: updated %v, endpoints %v", up, se.GetEndpoints())
	}
}

// serviceEntryReference builds the ServiceEntry of svc the straightforward
// way (as meshfed did before incremental ServiceEntries): the whole
// message, every endpoint converted, the first of each address, network
// and ports.
func serviceEntryReference(svc *model.Service) *networking.ServiceEntry {
	se := &networking.ServiceEntry{
		Hosts:    []string{svc.Hostname},
		Location: networking.ServiceEntry_MESH_INTERNAL,
		ExportTo: []string{"*"},
	}
	if svc.Resolution == model.ResolutionDNS {
		se.Resolution = networking.ServiceEntry_DNS
	} else {
		se.Resolution = networking.ServiceEntry_STATIC
	}
	ports := slices.Clone(svc.Ports)
	slices.SortFunc(ports, func(a, b model.Port) int { return cmpv.Compare(a.Number, b.Number) })
	ports = slices.CompactFunc(ports, func(a, b model.Port) bool { return a.Number == b.Number })
	names := make([]string, len(ports))
	used := map[string]bool{}
	for i, p := range ports {
		n := p.Name
		if !validPortName(n) || used[n] {
			n = strings.ToLower(string(cmpv.Or(p.Protocol, model.ProtocolTCP))) + "-" + strconv.FormatUint(uint64(p.Number), 10)
		}
		used[n] = true
		names[i] = n
		se.Ports = append(se.Ports, &networking.ServicePort{Number: p.Number, Protocol: string(cmpv.Or(p.Protocol, model.ProtocolTCP)), Name: n})
	}
	seen := map[string]bool{}
	for i := range svc.Endpoints {
		we := workloadEntry(&svc.Endpoints[i], ports, names)
		if we == nil {
			continue
		}
		key := we.GetAddress() + "|" + we.GetNetwork()
		for _, n := range names {
			key += "|" + strconv.FormatUint(uint64(we.GetPorts()[n]), 10)
		}
		if !seen[key] {
			seen[key] = true
			se.Endpoints = append(se.Endpoints, we)
		}
	}
	return se
}

// TestServiceEntryIncrementalEqualsFullBuild: under random endpoint
// changes, the incrementally built ServiceEntry is byte for byte the
// deterministic encoding of the reference build; its version changes
// exactly when the bytes do; an unchanged entry is the previous object.
func TestServiceEntryIncrementalEqualsFullBuild(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 12))
	svc := mutableService("mix.vm.internal")
	res, st := buildServiceEntry(svc, nil)
	for step := range 300 {
		next := *svc
		next.Endpoints = mutate(r, svc.Endpoints)
		switch step % 50 {
		case 24:
			next.Endpoints = svc.Endpoints // the same endpoints: nothing changes
		case 49:
			next.Ports = slices.Clone(next.Ports)
			next.Ports[0].Name = "web" // overrides of "http" no longer apply
		}
		svc = &next
		prevRes := res
		res, st = buildServiceEntry(svc, st)
		want, err := deterministic.Marshal(serviceEntryReference(svc))
		if err != nil {
			t.Fatal(err)
		}
		got := res.GetBody().GetValue()
		if !bytes.Equal(got, want) {
			_, gse := seOf(t, res)
			t.Fatalf("step %d: body differs from the reference build:\n%s", step, cmp.Diff(serviceEntryReference(svc), gse, protocmp.Transform()))
		}
		same := bytes.Equal(got, prevRes.GetBody().GetValue())
		if sameVersion := res.GetMetadata().GetVersion() == prevRes.GetMetadata().GetVersion(); sameVersion != same {
			t.Fatalf("step %d: version unchanged = %v, body unchanged = %v", step, sameVersion, same)
		}
		if step%50 == 24 && res != prevRes {
			t.Fatalf("step %d: unchanged endpoints built a new resource", step)
		}
	}
}

// TestServiceEntryExportTo: istiod gets a registry service's exportTo,
// "." as the service's own namespace (the entry lives in MCPNamespace),
// and "*" for a service that sets none.
func TestServiceEntryExportTo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		exportTo []string
		want     []string
	}{
		{"none", nil, []string{"*"}},
		{"own namespace", []string{"."}, []string{"shop"}},
		{"own and named, once", []string{".", "shop", "istio-system"}, []string{"shop", "istio-system"}},
		{"none at all", []string{"~"}, []string{"~"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			svc := ordersSvc()
			svc.Namespace, svc.ExportTo = "shop", tc.exportTo
			_, se := seOf(t, serviceEntryResource(svc))
			if !slices.Equal(se.GetExportTo(), tc.want) {
				t.Errorf("exportTo = %q, want %q", se.GetExportTo(), tc.want)
			}
		})
	}
	// An incremental build follows an exportTo change.
	svc := ordersSvc()
	_, st := buildServiceEntry(svc, nil)
	svc2 := ordersSvc()
	svc2.Namespace, svc2.ExportTo = "shop", []string{"."}
	res, _ := buildServiceEntry(svc2, st)
	if _, se := seOf(t, res); !slices.Equal(se.GetExportTo(), []string{"shop"}) {
		t.Errorf("rebuilt exportTo = %q", se.GetExportTo())
	}
}
