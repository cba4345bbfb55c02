package kube

import (
	"context"
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshfed/meshfed/kubeclient/kubeclienttest"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries/registrytest"
	"github.com/meshfed/meshfed/test/servers"
)

// TestRealOneChangeConvertsOneService: against a real API server holding
// many services (pods with full specs and statuses), the first sync
// converts each service once, and one EndpointSlice change, one pod's
// label change or one Service change converts and compares that one
// service (counted, not timed): nothing per event is O(catalog).
func TestRealOneChangeConvertsOneService(t *testing.T) {
	t.Parallel()
	kc := servers.StartKubeClusters(t, 1)
	api := kc.Servers[0]
	cs := api.Client(t, servers.AdminToken)
	cat := kubeclienttest.Catalog{Services: 120, EndpointsPer: 3, PerNamespace: 40, PodStatus: true, Workers: 8}
	ctx := context.Background()
	if err := cat.LoadDirect(ctx, cs, kc.Etcd.URL, api.Prefix); err != nil {
		t.Fatal(err)
	}
	all, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	services := len(all.Items) // the catalog's and the API server's own (default/kubernetes)
	reg := registryFor(t, "east", api.WriteKubeconfig(t, "east", servers.AdminToken), nil).(*Registry)
	sink := registrytest.NewSink()
	registrytest.Start(t, reg, sink)
	sink.WaitFor(t, realTimeout, func(st registrytest.State) bool {
		return st.Synced() && len(st.Services) == services && endpoints(st.Services) == cat.Endpoints()
	})
	if got := reg.conversions.Load(); got != uint64(services) {
		t.Errorf("first sync of %d services: %d conversions, want %d", services, got, services)
	}

	endpointOf := func(i int, match func(model.Endpoint) bool) func(registrytest.State) bool {
		return func(st registrytest.State) bool {
			s, ok := registrytest.Find(st.Services, cat.Host(i, "svc.cluster.local"))
			return ok && slices.ContainsFunc(s.Endpoints, match)
		}
	}
	step := func(what string, do func() error, want func(registrytest.State) bool) {
		t.Helper()
		before := reg.conversions.Load()
		if err := do(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		sink.WaitFor(t, realTimeout, want)
		if got := reg.conversions.Load() - before; got != 1 {
			t.Errorf("%s among %d services: %d services converted, want 1", what, services, got)
		}
	}
	step("one endpoint's address changed in its EndpointSlice", func() error {
		_, err := cs.DiscoveryV1().EndpointSlices(cat.Namespace(17)).Patch(ctx, cat.SliceName(17), types.JSONPatchType,
			[]byte(`[{"op":"replace","path":"/endpoints/0/addresses/0","value":"10.250.0.17"}]`), metav1.PatchOptions{})
		return err
	}, endpointOf(17, func(e model.Endpoint) bool { return e.Address == "10.250.0.17" }))
	step("one pod's labels changed", func() error {
		_, err := cs.CoreV1().Pods(cat.Namespace(23)).Patch(ctx, cat.PodName(23, 1), types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"version":"v2"}}}`), metav1.PatchOptions{})
		return err
	}, endpointOf(23, func(e model.Endpoint) bool { return e.Labels["version"] == "v2" }))
	step("one Service's exportTo changed", func() error {
		_, err := cs.CoreV1().Services(cat.Namespace(31)).Patch(ctx, cat.Name(31), types.MergePatchType,
			[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"."}}}`, annotationExportTo)), metav1.PatchOptions{})
		return err
	}, func(st registrytest.State) bool {
		s, ok := registrytest.Find(st.Services, cat.Host(31, "svc.cluster.local"))
		return ok && slices.Equal(s.ExportTo, []string{"."})
	})
}
