package aggregate

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

var gateOpts = RegistryOptions{Common: registries.Common{Name: "vms", Kind: "file", Domain: "vm"}}

func gatePort() []model.Port {
	return []model.Port{{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}}
}

// served returns the one served service of st, failing the test if there is none.
func servedOne(t *testing.T, st shardState, host string) *model.Service {
	t.Helper()
	s := st.services[host]
	if s == nil {
		t.Fatalf("%s not served; conflicts %v", host, st.conflicts)
	}
	return s
}

func weightSum(eps []model.Endpoint) uint64 {
	var sum uint64
	for _, e := range eps {
		sum += uint64(max(e.Weight, 1))
	}
	return sum
}

// Observation 1: two endpoints in one locality with the documented maximum
// weight passed the gate, and grpc-go NACKed the CLA ("sum of weights of
// endpoints in the same locality exceeds maximum value 4294967295").
func TestGateScalesWeightsThatOverflowALocality(t *testing.T) {
	t.Parallel()
	loc := model.Locality{Region: "r1", Zone: "z1"}
	in := model.Service{Hostname: "a.vm", Ports: gatePort(), Endpoints: []model.Endpoint{
		{Address: "10.0.0.1", Weight: math.MaxUint32, Locality: loc},
		{Address: "10.0.0.2", Weight: math.MaxUint32, Locality: loc},
		{Address: "10.0.0.3", Weight: math.MaxUint32 / 2, Locality: model.Locality{Region: "r2"}},
		{Address: "10.0.0.4", Weight: 1, Locality: loc},
	}}
	st := normalize(gateOpts, []model.Service{in}, nil)
	s := servedOne(t, st, "a.vm")
	if len(s.Endpoints) != 4 {
		t.Fatalf("served %d endpoints, want all 4", len(s.Endpoints))
	}
	if sum := weightSum(s.Endpoints); sum > math.MaxUint32 {
		t.Errorf("weights sum to %d after the gate, over %d", sum, uint64(math.MaxUint32))
	}
	w := map[string]uint32{}
	for _, e := range s.Endpoints {
		w[e.Address] = e.Weight
	}
	if w["10.0.0.1"] != w["10.0.0.2"] {
		t.Errorf("equal weights became %d and %d", w["10.0.0.1"], w["10.0.0.2"])
	}
	// Proportions are kept (not clipped): 2:1 stays 2:1 within rounding.
	if r := float64(w["10.0.0.1"]) / float64(w["10.0.0.3"]); r < 1.999 || r > 2.001 {
		t.Errorf("weight ratio 10.0.0.1/10.0.0.3 = %.4f, want 2 (weights %v)", r, w)
	}
	if w["10.0.0.4"] != 1 {
		t.Errorf("a weight that scales below 1 is %d, want 1", w["10.0.0.4"])
	}
	var scaled []Conflict
	for _, c := range st.conflicts {
		if c.Category == CategoryScaled {
			scaled = append(scaled, c)
		}
	}
	if len(scaled) != 1 || scaled[0].Host != "a.vm" || !strings.Contains(scaled[0].Reason, "4294967295") {
		t.Errorf("want one %q conflict naming a.vm and the bound, got %v", CategoryScaled, st.conflicts)
	}

	// Weights that fit are left alone and reported nowhere.
	in.Endpoints = []model.Endpoint{{Address: "10.0.0.1", Weight: 7}, {Address: "10.0.0.2", Weight: math.MaxUint32 - 7}}
	st = normalize(gateOpts, []model.Service{in}, nil)
	s = servedOne(t, st, "a.vm")
	if s.Endpoints[0].Weight != 7 || s.Endpoints[1].Weight != math.MaxUint32-7 || len(st.conflicts) != 0 {
		t.Errorf("weights that fit were changed: %+v, conflicts %v", s.Endpoints, st.conflicts)
	}
}

func TestScaleWeightsBoundsAndProportions(t *testing.T) {
	t.Parallel()
	for _, ws := range [][]uint32{
		{math.MaxUint32, math.MaxUint32},
		{math.MaxUint32, 1, 1, 1, 1},
		slices.Repeat([]uint32{math.MaxUint32}, 1000),
		append(slices.Repeat([]uint32{1}, 5000), math.MaxUint32),
		{0, math.MaxUint32, 3},
	} {
		eps := make([]model.Endpoint, len(ws))
		for i, w := range ws {
			eps[i].Weight = w
		}
		before := weightSum(eps)
		_, scaled := scaleWeights(eps)
		if !scaled {
			t.Fatalf("%d weights summing to %d were not scaled", len(ws), before)
		}
		if sum := weightSum(eps); sum > math.MaxUint32 {
			t.Errorf("%d weights: sum %d after scaling", len(ws), sum)
		}
		for i := range eps {
			if eps[i].Weight == 0 {
				t.Fatalf("weight %d scaled to 0", i)
			}
			for j := range eps {
				if max(ws[i], 1) > max(ws[j], 1) && eps[i].Weight < eps[j].Weight {
					t.Fatalf("order of weights %d > %d not kept: %d < %d", ws[i], ws[j], eps[i].Weight, eps[j].Weight)
				}
			}
		}
	}
}

// Merged registries each fit, their concatenation may not.
func TestMergeScalesWeightsOfTheUnion(t *testing.T) {
	t.Parallel()
	mk := func(name, addr string) contribution {
		return contribution{name: name, kind: "kubernetes", multicluster: true, domain: "svc", svc: &model.Service{
			Hostname: "a.svc", Ports: gatePort(),
			Endpoints: []model.Endpoint{{Address: addr, Weight: math.MaxUint32, Source: model.Source{Registry: name}}},
		}}
	}
	got, cs := mergeHost("a.svc", []contribution{mk("east", "10.0.0.1"), mk("west", "10.0.0.2")}, nil)
	if sum := weightSum(got.Endpoints); len(got.Endpoints) != 2 || sum > math.MaxUint32 {
		t.Errorf("merged %d endpoints summing to %d", len(got.Endpoints), sum)
	}
	if len(cs) != 1 || cs[0].Category != CategoryScaled {
		t.Errorf("conflicts = %v, want one %q", cs, CategoryScaled)
	}
}

// Observation 1: a label that is not valid UTF-8 (a %FF in a Dubbo URL
// parameter) failed proto validation and withdrew the whole service.
func TestGateDropsBadLabelsAlone(t *testing.T) {
	t.Parallel()
	in := model.Service{Hostname: "a.vm", Ports: gatePort(), Endpoints: []model.Endpoint{
		{Address: "10.0.0.1", Origin: "/dubbo/x", Labels: map[string]string{"side": "provider", "bad": "v\xff1", "k\xfe": "v",
			"big": strings.Repeat("x", maxLabelValue+1), strings.Repeat("k", maxLabelKey+1): "v"}},
		{Address: "10.0.0.2", Labels: map[string]string{"side": "provider"}},
	}}
	st := normalize(gateOpts, []model.Service{in}, nil)
	s := servedOne(t, st, "a.vm")
	if len(s.Endpoints) != 2 {
		t.Fatalf("served %d endpoints, want both", len(s.Endpoints))
	}
	if got := s.Endpoints[0].Labels; len(got) != 1 || got["side"] != "provider" {
		t.Errorf("labels served = %q, want only side=provider", got)
	}
	if in.Endpoints[0].Labels["bad"] != "v\xff1" {
		t.Errorf("the registry's label map was modified")
	}
	var subjects []string
	for _, c := range st.conflicts {
		if c.Category != CategoryInvalid || c.Host != "a.vm" || !strings.HasPrefix(c.Reason, "label dropped: ") {
			t.Errorf("unexpected conflict %+v", c)
		}
		subjects = append(subjects, c.Subject)
	}
	want := []string{`10.0.0.1 (/dubbo/x) label "bad"`, `10.0.0.1 (/dubbo/x) label "big"`,
		`10.0.0.1 (/dubbo/x) label "` + strings.Repeat("k", maxLabelKey+1) + `"`, `10.0.0.1 (/dubbo/x) label "k\xfe"`}
	if !slices.Equal(subjects, want) {
		t.Errorf("conflict subjects = %q, want %q", subjects, want)
	}

	// Too many labels: the first maxLabels by key are kept.
	many := map[string]string{}
	for i := range maxLabels + 3 {
		many[string(rune('a'+i/26))+string(rune('a'+i%26))] = "v"
	}
	in.Endpoints = []model.Endpoint{{Address: "10.0.0.1", Labels: many}}
	st = normalize(gateOpts, []model.Service{in}, nil)
	if got := servedOne(t, st, "a.vm").Endpoints[0].Labels; len(got) != maxLabels || got["aa"] == "" {
		t.Errorf("served %d labels, want the first %d", len(got), maxLabels)
	}
	if len(st.conflicts) != 3 {
		t.Errorf("conflicts = %v, want 3 labels dropped", st.conflicts)
	}
}

func TestGateDropsEndpointsWithBadStrings(t *testing.T) {
	t.Parallel()
	in := model.Service{Hostname: "a.vm", Ports: gatePort(), Endpoints: []model.Endpoint{
		{Address: "10.0.0.1", Locality: model.Locality{Region: "r\xff"}},
		{Address: "10.0.0.2", Source: model.Source{Network: "n\xff"}},
		{Address: "10.0.0.3"},
	}}
	st := normalize(gateOpts, []model.Service{in}, nil)
	s := servedOne(t, st, "a.vm")
	if len(s.Endpoints) != 1 || s.Endpoints[0].Address != "10.0.0.3" {
		t.Errorf("served %+v, want only 10.0.0.3", s.Endpoints)
	}
	if len(st.conflicts) != 2 || !strings.Contains(st.conflicts[0].Reason, "not valid UTF-8") {
		t.Errorf("conflicts = %v", st.conflicts)
	}
}

// Observation 2: addresses no proxy can use were served as HEALTHY.
func TestGateDropsAddressesNoProxyCanUse(t *testing.T) {
	t.Parallel()
	bad := map[string]string{
		"255.255.255.255":  "broadcast",
		"224.0.0.1":        "multicast",
		"239.1.2.3":        "multicast",
		"ff02::1":          "multicast",
		"ff05::2":          "multicast",
		"169.254.1.1":      "link-local",
		"fe80::1":          "link-local",
		"fe80::1%eth0":     "zone",
		"0.0.0.0":          "unspecified",
		"::":               "unspecified",
		"0.1.2.3":          "0.0.0.0/8",
		"::ffff:224.0.0.1": "multicast",
	}
	for _, res := range []model.Resolution{model.ResolutionEDS, model.ResolutionDNS} {
		in := model.Service{Hostname: "a.vm", Ports: gatePort(), Resolution: res,
			Endpoints: []model.Endpoint{{Address: "10.0.0.1"}, {Address: "fd00::1"}}}
		for a := range bad {
			in.Endpoints = append(in.Endpoints, model.Endpoint{Address: a})
		}
		st := normalize(gateOpts, []model.Service{in}, nil)
		s := servedOne(t, st, "a.vm")
		var addrs []string
		for _, e := range s.Endpoints {
			addrs = append(addrs, e.Address)
		}
		if !slices.Equal(addrs, []string{"10.0.0.1", "fd00::1"}) {
			t.Errorf("%s: served %v, want only the usable siblings", res, addrs)
		}
		got := map[string]string{}
		for _, c := range st.conflicts {
			got[c.Subject] = c.Reason
		}
		for a, why := range bad {
			if r, ok := got[a]; !ok || !strings.Contains(r, why) || !strings.Contains(r, a) {
				t.Errorf("%s: %s: conflict reason %q, want it to name the address and say %q", res, a, r, why)
			}
		}
	}
}
