package aggregate

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

func portsOf(s *model.Service) []string {
	var out []string
	for _, p := range s.Ports {
		out = append(out, fmt.Sprintf("%s:%d/%s", p.Name, p.Number, p.Protocol))
	}
	return out
}

func conflictsOf(cs []Conflict) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Category+" "+c.Host+" "+c.Subject)
	}
	return out
}

func TestNormalizeQuarantinesEachBadItemAlone(t *testing.T) {
	t.Parallel()
	http80 := model.Port{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}
	ep := func(a string) model.Endpoint { return model.Endpoint{Address: a} }
	tests := []struct {
		name          string
		in            model.Service
		wantServed    bool
		wantPorts     []string
		wantAddrs     []string
		wantConflicts []string
	}{{
		name:       "valid service is served as is",
		in:         model.Service{Hostname: "a.vm", Ports: []model.Port{http80}, Endpoints: []model.Endpoint{ep("10.0.0.2"), ep("10.0.0.1")}},
		wantServed: true, wantPorts: []string{"http:80/HTTP"}, wantAddrs: []string{"10.0.0.1", "10.0.0.2"},
	}, {
		name:          "invalid hostname rejects the service",
		in:            model.Service{Hostname: "bad host.vm", Ports: []model.Port{http80}, Endpoints: []model.Endpoint{ep("10.0.0.1")}},
		wantConflicts: []string{"invalid bad host.vm bad host.vm"},
	}, {
		name:          "label starting with a dash rejects the service",
		in:            model.Service{Hostname: "-a.vm", Ports: []model.Port{http80}},
		wantConflicts: []string{"invalid -a.vm -a.vm"},
	}, {
		name:          "empty label rejects the service",
		in:            model.Service{Hostname: "a..vm", Ports: []model.Port{http80}},
		wantConflicts: []string{"invalid a..vm a..vm"},
	}, {
		name:          "label over 63 characters rejects the service",
		in:            model.Service{Hostname: strings.Repeat("x", 64) + ".vm", Ports: []model.Port{http80}},
		wantConflicts: []string{"invalid " + strings.Repeat("x", 64) + ".vm " + strings.Repeat("x", 64) + ".vm"},
	}, {
		name:       "underscores and digits are accepted",
		in:         model.Service{Hostname: "my_svc-2.vm", Ports: []model.Port{http80}},
		wantServed: true, wantPorts: []string{"http:80/HTTP"},
	}, {
		name:          "no ports rejects the service",
		in:            model.Service{Hostname: "a.vm", Endpoints: []model.Endpoint{ep("10.0.0.1")}},
		wantConflicts: []string{"invalid a.vm a.vm"},
	}, {
		name:          "hostname outside the domain is rejected",
		in:            model.Service{Hostname: "a.consul", Ports: []model.Port{http80}},
		wantConflicts: []string{"domain a.consul a.consul"},
	}, {
		name:          "domain suffix must follow a dot",
		in:            model.Service{Hostname: "evilvm", Ports: []model.Port{http80}},
		wantConflicts: []string{"domain evilvm evilvm"},
	}, {
		name:       "the domain itself is inside the domain",
		in:         model.Service{Hostname: "VM.", Ports: []model.Port{http80}},
		wantServed: true, wantPorts: []string{"http:80/HTTP"},
	}, {
		name: "bad port number is dropped alone",
		in: model.Service{Hostname: "a.vm", Ports: []model.Port{http80, {Name: "big", Number: 70000, Protocol: "TCP"}, {Name: "zero", Protocol: "TCP"}},
			Endpoints: []model.Endpoint{ep("10.0.0.1")}},
		wantServed: true, wantPorts: []string{"http:80/HTTP"}, wantAddrs: []string{"10.0.0.1"},
		wantConflicts: []string{"invalid a.vm port big:70000", "invalid a.vm port zero:0"},
	}, {
		name:       "unknown protocol drops the port; empty protocol is TCP; lowercase is accepted",
		in:         model.Service{Hostname: "a.vm", Ports: []model.Port{{Name: "x", Number: 1, Protocol: "SCTP"}, {Name: "db", Number: 5432}, {Name: "g", Number: 9090, Protocol: "grpc"}}},
		wantServed: true, wantPorts: []string{"db:5432/TCP", "g:9090/GRPC"}, wantConflicts: []string{"invalid a.vm port x:1"},
	}, {
		name:       "duplicate port name and number are dropped, first kept",
		in:         model.Service{Hostname: "a.vm", Ports: []model.Port{http80, {Name: "http", Number: 81}, {Name: "other", Number: 80}}},
		wantServed: true, wantPorts: []string{"http:80/HTTP"}, wantConflicts: []string{"duplicate a.vm port http:81", "duplicate a.vm port other:80"},
	}, {
		name:          "service whose ports are all bad is rejected",
		in:            model.Service{Hostname: "a.vm", Ports: []model.Port{{Name: "z", Number: 0}}, Endpoints: []model.Endpoint{ep("10.0.0.1")}},
		wantConflicts: []string{"invalid a.vm a.vm", "invalid a.vm port z:0"},
	}, {
		name: "invalid addresses are dropped alone",
		in: model.Service{Hostname: "a.vm", Ports: []model.Port{http80}, Endpoints: []model.Endpoint{
			ep("10.0.0.1"), ep("db.example"), ep("0.0.0.0"), ep("fe80::1%eth0"), ep("10.0.0.300"), ep(""), ep("::ffff:10.0.0.9")}},
		wantServed: true, wantPorts: []string{"http:80/HTTP"}, wantAddrs: []string{"10.0.0.1", "10.0.0.9"},
		wantConflicts: []string{"invalid a.vm ", "invalid a.vm 0.0.0.0", "invalid a.vm 10.0.0.300", "invalid a.vm db.example", "invalid a.vm fe80::1%eth0"},
	}, {
		name: "DNS services accept hostnames",
		in: model.Service{Hostname: "a.vm", Resolution: model.ResolutionDNS, Ports: []model.Port{http80},
			Endpoints: []model.Endpoint{ep("DB.Example."), ep("10.0.0.1"), ep("not a host")}},
		wantServed: true, wantPorts: []string{"http:80/HTTP"}, wantAddrs: []string{"10.0.0.1", "db.example"},
		wantConflicts: []string{"invalid a.vm not a host"},
	}, {
		name: "duplicate endpoint is dropped, first kept; other ports make it distinct",
		in: model.Service{Hostname: "a.vm", Ports: []model.Port{http80}, Endpoints: []model.Endpoint{
			{Address: "10.0.0.1", Origin: "first"}, {Address: "10.0.0.1", Origin: "second"},
			{Address: "10.0.0.1", Ports: map[string]uint32{"http": 80}, Origin: "same port spelled out"},
			{Address: "10.0.0.1", Ports: map[string]uint32{"http": 8080}, Origin: "other port"}}},
		wantServed: true, wantPorts: []string{"http:80/HTTP"}, wantAddrs: []string{"10.0.0.1", "10.0.0.1"},
		wantConflicts: []string{"duplicate a.vm 10.0.0.1 (same port spelled out)", "duplicate a.vm 10.0.0.1 (second)"},
	}, {
		name: "bad port overrides drop the endpoint alone",
		in: model.Service{Hostname: "a.vm", Ports: []model.Port{http80}, Endpoints: []model.Endpoint{
			{Address: "10.0.0.1", Ports: map[string]uint32{"grpc": 9000}}, {Address: "10.0.0.2", Ports: map[string]uint32{"http": 70000}}, ep("10.0.0.3")}},
		wantServed: true, wantPorts: []string{"http:80/HTTP"}, wantAddrs: []string{"10.0.0.3"},
		wantConflicts: []string{"invalid a.vm 10.0.0.1", "invalid a.vm 10.0.0.2"},
	}, {
		name: "override of a dropped port is ignored, not the endpoint",
		in: model.Service{Hostname: "a.vm", Ports: []model.Port{http80, {Name: "bad", Number: 0}},
			Endpoints: []model.Endpoint{{Address: "10.0.0.1", Ports: map[string]uint32{"bad": 9000}}}},
		wantServed: true, wantPorts: []string{"http:80/HTTP"}, wantAddrs: []string{"10.0.0.1"},
		wantConflicts: []string{"invalid a.vm port bad:0"},
	}, {
		name:       "unknown health drops the endpoint",
		in:         model.Service{Hostname: "a.vm", Ports: []model.Port{http80}, Endpoints: []model.Endpoint{{Address: "10.0.0.1", Health: 9}, ep("10.0.0.2")}},
		wantServed: true, wantPorts: []string{"http:80/HTTP"}, wantAddrs: []string{"10.0.0.2"},
		wantConflicts: []string{"invalid a.vm 10.0.0.1"},
	}, {
		name:          "unknown resolution rejects the service",
		in:            model.Service{Hostname: "a.vm", Resolution: 7, Ports: []model.Port{http80}},
		wantConflicts: []string{"invalid a.vm a.vm"},
	}}
	o := RegistryOptions{Common: registries.Common{Name: "vms", Kind: "file", Domain: "vm"}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := normalize(o, []model.Service{tt.in}, nil)
			var got *model.Service
			for _, s := range st.services {
				got = s
			}
			if (got != nil) != tt.wantServed {
				t.Fatalf("served = %v, want %v (conflicts %v)", got != nil, tt.wantServed, conflictsOf(st.conflicts))
			}
			if got != nil {
				if diff := cmp.Diff(tt.wantPorts, portsOf(got)); diff != "" {
					t.Errorf("ports (-want +got):\n%s", diff)
				}
				var gotAddrs []string
				for _, e := range got.Endpoints {
					gotAddrs = append(gotAddrs, e.Address)
				}
				if diff := cmp.Diff(tt.wantAddrs, gotAddrs); diff != "" {
					t.Errorf("endpoints (-want +got):\n%s", diff)
				}
				if st.endpoints != len(got.Endpoints) {
					t.Errorf("endpoint count %d, want %d", st.endpoints, len(got.Endpoints))
				}
			}
			gotC := conflictsOf(st.conflicts)
			slices.Sort(gotC)
			if diff := cmp.Diff(tt.wantConflicts, gotC); diff != "" {
				t.Errorf("conflicts (-want +got):\n%s", diff)
			}
			for _, c := range st.conflicts {
				if c.Registry != "vms" || c.Reason == "" {
					t.Errorf("conflict %+v: want registry vms and a reason", c)
				}
			}
		})
	}
}

func TestNormalizeFillsDefaults(t *testing.T) {
	t.Parallel()
	loc := model.Locality{Region: "eu", Zone: "eu-1"}
	o := RegistryOptions{Common: registries.Common{Name: "dc1", Kind: "consul", Domain: "consul", Locality: loc}}
	in := []model.Service{{
		Hostname: "Orders.Consul",
		Ports:    []model.Port{{Number: 9000}, {Name: "http", Number: 80, Protocol: "HTTP"}},
		Endpoints: []model.Endpoint{
			{Address: "10.0.0.2", Ports: map[string]uint32{"": 19000, "http": 0}, Labels: map[string]string{}},
			{Address: "10.0.0.1", Weight: 5, Locality: model.Locality{Region: "us"}, Source: model.Source{Cluster: "c", Network: "n"}},
		},
	}}
	rejected := []model.Rejection{{Host: "x.consul", Subject: "instance 7", Reason: "no address"}}
	st := normalize(o, in, rejected)
	got := st.services["orders.consul"]
	want := &model.Service{
		Hostname: "orders.consul",
		Ports:    []model.Port{{Name: "http", Number: 80, Protocol: "HTTP"}, {Name: "tcp-9000", Number: 9000, Protocol: "TCP"}},
		Endpoints: []model.Endpoint{
			{Address: "10.0.0.1", Weight: 5, Locality: model.Locality{Region: "us"}, Source: model.Source{Registry: "dc1", Cluster: "c", Network: "n"}},
			{Address: "10.0.0.2", Ports: map[string]uint32{"tcp-9000": 19000, "http": model.NotServed}, Weight: 1, Locality: loc, Source: model.Source{Registry: "dc1", Cluster: "dc1"}},
		},
		Sources:   []string{"dc1"},
		Namespace: "dc1", // a registry's services without one are in the registry's namespace
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("normalized service (-want +got):\n%s", diff)
	}
	wantC := []Conflict{{Rejection: model.Rejection{Registry: "dc1", Host: "x.consul", Subject: "instance 7", Reason: "no address"}, Category: CategoryRegistry}}
	if diff := cmp.Diff(wantC, st.conflicts); diff != "" {
		t.Errorf("conflicts (-want +got):\n%s", diff)
	}
	// The input is not modified.
	if in[0].Hostname != "Orders.Consul" || in[0].Endpoints[0].Ports[""] != 19000 || in[0].Endpoints[1].Source.Registry != "" {
		t.Errorf("normalize modified its input: %+v", in[0])
	}
}

func TestNormalizeDuplicateHostname(t *testing.T) {
	t.Parallel()
	o := reg("vms", "file", "vm")
	st := normalize(o, []model.Service{svc("a.vm", "10.0.0.1"), svc("A.vm", "10.0.0.2")}, nil)
	if got := addrs(model.NewSnapshot(1, []*model.Service{st.services["a.vm"]}), "a.vm"); !slices.Equal(got, []string{"10.0.0.1"}) {
		t.Errorf("served %v, want the first service only", got)
	}
	if len(st.conflicts) != 1 || st.conflicts[0].Category != CategoryDuplicate || !strings.Contains(st.conflicts[0].Reason, "twice") {
		t.Errorf("conflicts = %v, want one duplicate", st.conflicts)
	}
}

// TestNormalizeMemo: a Replace normalizes again only the services whose
// input changed; the others are the previous *model.Service, with their
// conflicts reported again; the result equals a normalization from scratch.
func TestNormalizeMemo(t *testing.T) {
	t.Parallel()
	o := reg("vms", "file", "vm")
	bad := svc("bad.vm", "10.0.0.9", "not-an-ip")
	first := []model.Service{svc("a.vm", "10.0.0.1"), svc("b.vm", "10.0.0.2"), bad}
	st1, memo := normalizeWith(o, first, nil, nil)

	for _, tt := range []struct {
		name string
		next func() []model.Service
		same []string // hostnames whose pointer must be kept
	}{
		{name: "same slices", next: func() []model.Service { return slices.Clone(first) }, same: []string{"a.vm", "b.vm", "bad.vm"}},
		{name: "fresh equal slices", next: func() []model.Service {
			return []model.Service{svc("a.vm", "10.0.0.1"), svc("b.vm", "10.0.0.2"), svc("bad.vm", "10.0.0.9", "not-an-ip")}
		}, same: []string{"a.vm", "b.vm", "bad.vm"}},
		{name: "one endpoint changed", next: func() []model.Service {
			n := slices.Clone(first)
			n[1].Endpoints = slices.Clone(n[1].Endpoints)
			n[1].Endpoints[0].Health = model.Draining
			return n
		}, same: []string{"a.vm", "bad.vm"}},
		{name: "a label changed", next: func() []model.Service {
			n := slices.Clone(first)
			n[0].Endpoints = slices.Clone(n[0].Endpoints)
			n[0].Endpoints[0].Labels = map[string]string{"v": "2"}
			return n
		}, same: []string{"b.vm", "bad.vm"}},
		{name: "published twice", next: func() []model.Service {
			return append(slices.Clone(first), svc("a.vm", "10.0.0.5"))
		}, same: []string{"a.vm", "b.vm", "bad.vm"}},
		{name: "service dropped", next: func() []model.Service { return first[1:] }, same: []string{"b.vm", "bad.vm"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Each case starts from a memo of first (the memo is updated in place).
			memo := &normMemo{gen: memo.gen, entries: maps.Clone(memo.entries)}
			in := tt.next()
			got, _ := normalizeWith(o, in, nil, memo)
			want := normalize(o, in, nil)
			if d := cmp.Diff(want, got, cmp.AllowUnexported(shardState{})); d != "" {
				t.Fatalf("memoized normalization differs from a fresh one (-fresh +memo):\n%s", d)
			}
			for h, s := range got.services {
				if kept := s == st1.services[h]; kept != slices.Contains(tt.same, h) {
					t.Errorf("%s: pointer kept = %v", h, kept)
				}
			}
		})
	}
}

// sameArray reports whether a and b are the same array, not only equal.
func sameArray[E any](a, b []E) bool {
	return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0]
}

// TestNormalizeSharesUnchangedEndpoints: the gate shares what it leaves
// unchanged (the model's slices are immutable): the ports, and the endpoint slice of a
// service whose endpoints already carry the defaults, are sorted and hold
// no duplicate, with their maps and address strings. Any change gives the
// service its own normalized slice, equal to what a fresh copy of the
// input normalizes to, and leaves the input as it was.
func TestNormalizeSharesUnchangedEndpoints(t *testing.T) {
	t.Parallel()
	loc := model.Locality{Region: "eu"}
	o := RegistryOptions{Common: registries.Common{Name: "vms", Kind: "file", Domain: "vm", Locality: loc}}
	ports := []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}, {Name: "grpc", Number: 90, Protocol: model.ProtocolGRPC}}
	base := func() []model.Endpoint {
		return o.FillDefaults([]model.Endpoint{
			{Address: "10.0.0.1", Labels: map[string]string{"v": "1"}, Origin: "a"},
			{Address: "10.0.0.2", Ports: map[string]uint32{"grpc": 9090}, Origin: "b"},
			{Address: "10.0.0.2", Ports: map[string]uint32{"grpc": 9091}, Weight: 3, Origin: "c"},
		})
	}
	for _, tt := range []struct {
		name   string
		mut    func(eps []model.Endpoint, s *model.Service) // nil: unchanged
		wantCs int                                          // conflicts
	}{
		{name: "defaults filled, sorted, no duplicate"},
		{name: "weight 0", mut: func(e []model.Endpoint, _ *model.Service) { e[1].Weight = 0 }},
		{name: "no source", mut: func(e []model.Endpoint, _ *model.Service) { e[0].Source = model.Source{} }},
		{name: "no locality", mut: func(e []model.Endpoint, _ *model.Service) { e[2].Locality = model.Locality{} }},
		{name: "empty labels", mut: func(e []model.Endpoint, _ *model.Service) { e[1].Labels = map[string]string{} }},
		{name: "not sorted", mut: func(e []model.Endpoint, _ *model.Service) { e[0], e[1] = e[1], e[0] }},
		{name: "duplicate", mut: func(e []model.Endpoint, _ *model.Service) { e[2].Ports = e[1].Ports }, wantCs: 1},
		{name: "address not canonical", mut: func(e []model.Endpoint, _ *model.Service) { e[0].Address = "::ffff:10.0.0.1" }},
		{name: "bad address", mut: func(e []model.Endpoint, _ *model.Service) { e[0].Address = "not-an-ip" }, wantCs: 1},
		{name: "label dropped", mut: func(e []model.Endpoint, _ *model.Service) { e[0].Labels = map[string]string{"v": "\xff"} }, wantCs: 1},
		{name: "override of an unnamed port", mut: func(e []model.Endpoint, s *model.Service) {
			s.Ports[1].Name = ""
			e[1].Ports, e[2].Ports = map[string]uint32{"": 9090}, map[string]uint32{"": 9091}
		}},
		{name: "override of a dropped port", mut: func(e []model.Endpoint, s *model.Service) {
			s.Ports = append(s.Ports, model.Port{Name: "bad", Number: 70000})
			e[0].Ports = map[string]uint32{"bad": 1}
		}, wantCs: 1},
		{name: "weights overflow", mut: func(e []model.Endpoint, _ *model.Service) {
			e[0].Weight, e[1].Weight = math.MaxUint32, math.MaxUint32
		}, wantCs: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := model.Service{Hostname: "a.vm", Ports: slices.Clone(ports), Endpoints: base()}
			if tt.mut != nil {
				tt.mut(s.Endpoints, &s)
			}
			before := registrytest.CloneServices([]model.Service{s})
			st := normalize(o, []model.Service{s}, nil)
			got := st.services["a.vm"]
			if got == nil {
				t.Fatalf("a.vm not served: %v", st.conflicts)
			}
			if len(st.conflicts) != tt.wantCs {
				t.Errorf("conflicts %v, want %d", conflictsOf(st.conflicts), tt.wantCs)
			}
			// The input is not modified, whatever was shared.
			if d := cmp.Diff(before[0], s); d != "" {
				t.Errorf("normalize modified its input (-before +after):\n%s", d)
			}
			// The result is what a deep copy of the input normalizes to.
			fresh := normalize(o, registrytest.CloneServices([]model.Service{s}), nil).services["a.vm"]
			if d := cmp.Diff(fresh, got); d != "" {
				t.Errorf("result differs from a copy's (-copy +shared):\n%s", d)
			}
			shared := sameArray(got.Endpoints, s.Endpoints)
			if shared != (tt.mut == nil) {
				t.Fatalf("endpoint slice shared = %v, want %v", shared, tt.mut == nil)
			}
			if !shared {
				return
			}
			if !sameArray(got.Ports, s.Ports) || cap(got.Ports) != len(got.Ports) {
				t.Errorf("ports %v copied or not clipped, though valid and sorted", got.Ports)
			}
			if cap(got.Endpoints) != len(got.Endpoints) {
				t.Errorf("shared slice has cap %d > len %d: an append could write into the registry's array", cap(got.Endpoints), len(got.Endpoints))
			}
			for i := range got.Endpoints {
				g, in := &got.Endpoints[i], &s.Endpoints[i]
				if unsafe.StringData(g.Address) != unsafe.StringData(in.Address) {
					t.Errorf("endpoint %d: address copied", i)
				}
			}
		})
	}
}

// TestNormalizeSharesCanonicalParts: a changed endpoint slice still shares
// the address strings and maps normalization leaves as they are.
func TestNormalizeSharesCanonicalParts(t *testing.T) {
	t.Parallel()
	o := reg("vms", "file", "vm")
	labels := map[string]string{"v": "1"}
	overrides := map[string]uint32{"http": 8080}
	addr := strings.Clone("10.0.0.1")
	in := []model.Service{{Hostname: "a.vm", Ports: []model.Port{{Name: "http", Number: 80}}, Endpoints: []model.Endpoint{
		{Address: addr, Ports: overrides, Labels: labels}, // weight 0: the slice is copied
	}}}
	got := normalize(o, in, nil).services["a.vm"]
	if sameArray(got.Endpoints, in[0].Endpoints) {
		t.Fatal("endpoint slice shared though its weight was filled in")
	}
	e := got.Endpoints[0]
	if e.Weight != 1 || unsafe.StringData(e.Address) != unsafe.StringData(addr) ||
		reflect.ValueOf(e.Ports).UnsafePointer() != reflect.ValueOf(overrides).UnsafePointer() ||
		reflect.ValueOf(e.Labels).UnsafePointer() != reflect.ValueOf(labels).UnsafePointer() {
		t.Errorf("normalized endpoint %+v: want weight 1 with the input's address, ports and labels shared", e)
	}
}

// TestMergeDoesNotWriteSharedEndpoints: merging a multicluster set sorts
// and scales weights in a slice of its own; the registries' endpoints,
// shared by their normalized services, keep their order and weights.
func TestMergeDoesNotWriteSharedEndpoints(t *testing.T) {
	t.Parallel()
	var states []shardState
	var ins []model.Service
	for _, name := range []string{"west", "east"} {
		o := RegistryOptions{Common: registries.Common{Name: name, Kind: "kubernetes", Domain: "svc.cluster.local"}, Multicluster: true}
		in := model.Service{Hostname: "a.ns.svc.cluster.local", Ports: []model.Port{{Name: "http", Number: 80}},
			Endpoints: o.FillDefaults([]model.Endpoint{{Address: "10.0.0.9", Weight: math.MaxUint32}})}
		if name == "east" {
			in.Endpoints = o.FillDefaults([]model.Endpoint{{Address: "10.0.0.1", Weight: math.MaxUint32}})
		}
		st := normalize(o, []model.Service{in}, nil)
		if !sameArray(st.services[in.Hostname].Endpoints, in.Endpoints) {
			t.Fatalf("%s: endpoints not shared", name)
		}
		states, ins = append(states, st), append(ins, in)
	}
	before := registrytest.CloneServices(ins)
	var cs []contribution
	for i, name := range []string{"east", "west"} {
		cs = append(cs, contribution{name: name, kind: "kubernetes", domain: "svc.cluster.local", multicluster: true,
			svc: states[1-i].services["a.ns.svc.cluster.local"]})
	}
	merged, conflicts := mergeHost("a.ns.svc.cluster.local", cs, nil)
	if len(merged.Endpoints) != 2 || merged.Endpoints[0].Weight == math.MaxUint32 || len(conflicts) != 1 {
		t.Fatalf("merged %+v, conflicts %v: want two endpoints scaled down", merged.Endpoints, conflicts)
	}
	if d := cmp.Diff(before, ins); d != "" {
		t.Errorf("merge wrote into a registry's endpoints (-before +after):\n%s", d)
	}
}

// TestPublishedEndpointsAreServedShared: through a registries.Publisher
// (which fills the endpoints' defaults) into a running Aggregator, the
// snapshot serves the very endpoint slices the Publisher holds, full state
// or delta: each endpoint is held once.
func TestPublishedEndpointsAreServedShared(t *testing.T) {
	t.Parallel()
	o := reg("vms", "file", "vm")
	a := newRunning(t, newFakeClock(), o)
	p := registries.NewPublisher(o.Common, a, nil, registries.PublisherOptions[string]{Compare: strings.Compare})
	p.Set("a", registries.One(svc("a.vm", "10.0.0.1", "10.0.0.2"), true, nil))
	p.Set("b", registries.One(svc("b.vm", "10.0.0.3"), true, nil))
	p.Flush(registries.Condition{})
	snap := waitVersion(t, a, 1)
	check := func(step string, snap *model.Snapshot) {
		t.Helper()
		held, _ := p.State()
		for _, h := range held {
			s, ok := snap.Service(h.Hostname)
			if !ok || !sameArray(s.Endpoints, h.Endpoints) {
				t.Errorf("%s: %s served %v, not the Publisher's slice", step, h.Hostname, s)
			}
			if h.Endpoints[0].Weight != 1 || h.Endpoints[0].Source.Registry != "vms" {
				t.Errorf("%s: %s held without its defaults: %+v", step, h.Hostname, h.Endpoints[0])
			}
		}
	}
	check("full state", snap)
	p.Set("b", registries.One(svc("b.vm", "10.0.0.4"), true, nil))
	p.Flush(registries.Condition{})
	snap = waitVersion(t, a, snap.Version+1)
	if got := addrs(snap, "b.vm"); !slices.Equal(got, []string{"10.0.0.4"}) {
		t.Fatalf("b.vm serves %v after the change", got)
	}
	check("delta", snap)
}
