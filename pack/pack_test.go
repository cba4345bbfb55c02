package pack

import (
	"strings"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

// TestStrings: the strings keep their values and end up in one allocation,
// one after the other, whatever they pointed to before.
func TestStrings(t *testing.T) { // not parallel: AllocsPerRun
	src := []byte("name-1 10.0.0.1 42")
	a, b, empty, c := string(src[:6]), string(src[7:15]), "", strings.Repeat("x", 3)
	Strings(&a, &b, &empty, &c)
	if a != "name-1" || b != "10.0.0.1" || empty != "" || c != "xxx" {
		t.Fatalf("values changed: %q %q %q %q", a, b, empty, c)
	}
	base := unsafe.StringData(a)
	if unsafe.StringData(b) != (*byte)(unsafe.Add(unsafe.Pointer(base), len(a))) ||
		unsafe.StringData(c) != (*byte)(unsafe.Add(unsafe.Pointer(base), len(a)+len(b))) {
		t.Error("the strings do not share one allocation in order")
	}
	x, y := strings.Repeat("a", 20), strings.Repeat("b", 30)
	if n := testing.AllocsPerRun(100, func() { x2, y2 := x, y; Strings(&x2, &y2) }); n != 1 {
		t.Errorf("Pack of two strings: %v allocations, want 1", n)
	}
	none := ""
	if n := testing.AllocsPerRun(100, func() { Strings(&none) }); n != 0 {
		t.Errorf("Pack of empty strings: %v allocations, want 0", n)
	}
}

// TestMessage: a message's strings, in fields, lists and nested messages,
// keep their values and end up in one allocation; its maps are left as
// they are (they may be shared).
func TestMessage(t *testing.T) {
	t.Parallel()
	labels := map[string]string{"version": "v1"}
	se := &networking.ServiceEntry{
		Hosts: []string{"a.example", "b.example"},
		Ports: []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}},
		Endpoints: []*networking.WorkloadEntry{
			{Address: "10.0.0.1", Labels: labels, Network: "net-1"},
			{Address: "10.0.0.2", Labels: labels},
		},
		Resolution: networking.ServiceEntry_STATIC,
	}
	want := proto.Clone(se)
	Message(se)
	if !proto.Equal(se, want) {
		t.Fatalf("packed = %v, want %v", se, want)
	}
	strs := []string{se.Hosts[0], se.Hosts[1], se.Ports[0].Name, se.Ports[0].Protocol, se.Endpoints[0].Address, se.Endpoints[0].Network, se.Endpoints[1].Address}
	lo, hi := uintptr(1<<63), uintptr(0)
	total := 0
	for _, s := range strs {
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		lo, hi = min(lo, p), max(hi, p+uintptr(len(s)))
		total += len(s)
	}
	if int(hi-lo) != total {
		t.Errorf("the strings span %d bytes, want one allocation of %d", hi-lo, total)
	}
	labels["version"] = "v2" // still the caller's map
	if se.Endpoints[0].Labels["version"] != "v2" || se.Endpoints[1].Labels["version"] != "v2" {
		t.Error("labels are no longer the map given")
	}
}
