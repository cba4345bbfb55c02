package pack

import (
	"strings"
	"testing"
	"unsafe"
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
