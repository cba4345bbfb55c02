package xds

import (
	"slices"
	"testing"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/internal/testfixture"
	"github.com/meshfed/meshfed/xds/translate"
)

var seOf = testfixture.ServiceEntryOf

// TestMCPOverADS: a SotW client (as istiod) gets every collection it asks
// for answered, empty or full; a delta client gets only the ServiceEntries
// that changed.
func TestMCPOverADS(t *testing.T) {
	t.Parallel()
	srv := NewServer(Options{})
	first, changed, _ := fixtureSnapshots()
	srv.Update(first)
	addr := startServer(t, srv)
	// ServiceEntries are built once an MCP client subscribes (S3a).
	if n := len(srv.Resources(translate.KindOf(translate.ClassEnvoy, translate.ServiceEntryTypeURL))); n != 0 {
		t.Errorf("%d ServiceEntries built before any MCP client subscribed", n)
	}
	var all []string // one per service
	for _, svc := range first.Services() {
		all = append(all, translate.MCPNamespace+"/"+svc.Hostname)
	}
	slices.Sort(all)

	sotw := dialADS(t, addr, envoyNode("istiod"), false)
	for _, u := range []string{translate.ServiceEntryTypeURL, "networking.istio.io/v1/VirtualService", "core/v1alpha1/MeshConfig"} {
		sotw.subscribe(u)
	}
	got := map[string]int{}
	for len(got) < 3 {
		m := sotw.step(nil)
		got[m.typeURL] = len(m.resources)
	}
	if got[translate.ServiceEntryTypeURL] != len(all) || got["networking.istio.io/v1/VirtualService"] != 0 || got["core/v1alpha1/MeshConfig"] != 0 {
		t.Errorf("first responses: %v", got)
	}

	delta := dialADS(t, addr, envoyNode("delta"), true)
	delta.subscribe("networking.istio.io/v1alpha3/ServiceEntry")
	m := delta.step(nil)
	if !slices.Equal(m.names(), all) {
		t.Fatalf("delta first response %v, want %v", m.names(), all)
	}

	srv.Update(changed) // one orders endpoint changed
	m = delta.step(nil)
	if want := []string{"meshfed/orders.vm.internal"}; !slices.Equal(m.names(), want) || len(m.removed) != 0 {
		t.Errorf("delta update %v removed %v, want only %v", m.names(), m.removed, want)
	}
	// SotW carries the full set again (absence would mean removal).
	m = sotw.step(nil)
	if m.typeURL != translate.ServiceEntryTypeURL || !slices.Equal(m.names(), all) {
		t.Errorf("SotW update %s %v, want the full set", m.typeURL, m.names())
	}
	_, se := seOf(t, m.resources["meshfed/orders.vm.internal"])
	if n := len(se.GetEndpoints()); n != 2 {
		t.Errorf("orders endpoints %v, want the two healthy ones", se.GetEndpoints())
	}

	srv.Update(model.NewSnapshot(9, slices.DeleteFunc(slices.Clone(changed.Services()), func(s *model.Service) bool {
		return s.Hostname == "orders.vm.internal"
	})))
	m = delta.step(nil)
	if len(m.resources) != 0 || !slices.Equal(m.removed, []string{"meshfed/orders.vm.internal"}) {
		t.Errorf("delta removal: resources %v removed %v", m.names(), m.removed)
	}
}
