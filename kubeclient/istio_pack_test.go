package kubeclient

import (
	"testing"
	"unsafe"
)

// TestPackMeta: the cached object's namespace, name, resource version and
// source keep their values and share one allocation.
func TestPackMeta(t *testing.T) {
	t.Parallel()
	o := Object{Namespace: "shop", Name: "orders", ResourceVersion: "42", Source: "shop/orders (east)"}
	packMeta(&o)
	if o.Namespace != "shop" || o.Name != "orders" || o.ResourceVersion != "42" || o.Source != "shop/orders (east)" {
		t.Fatalf("values changed: %+v", o)
	}
	base := uintptr(unsafe.Pointer(unsafe.StringData(o.Source)))
	for _, s := range []string{o.Namespace, o.Name, o.ResourceVersion} {
		if p := uintptr(unsafe.Pointer(unsafe.StringData(s))); p < base || p >= base+uintptr(len(o.Source)+len(o.ResourceVersion)) {
			t.Errorf("%q is not in the pack", s)
		}
	}
	// A source of another form leaves namespace and name as they are.
	o = Object{Namespace: "shop", Name: "orders", Source: "elsewhere"}
	packMeta(&o)
	if o.Namespace != "shop" || o.Name != "orders" || o.Source != "elsewhere" {
		t.Errorf("values changed: %+v", o)
	}
}
