package kube

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset(ordersFixture()...)
	sink := startFake(t, "metrics-east", Config{}, cs)
	sink.WaitFor(t, waitTimeout, registrytest.State.Synced)
	waitFor(t, func() bool { return testutil.ToFloat64(clusterSynced.WithLabelValues("metrics-east")) == 1 })
	if got := testutil.ToFloat64(informerEvents.WithLabelValues("metrics-east", resService, evAdd)); got != 1 {
		t.Errorf("service add events = %v, want 1", got)
	}
	if _, err := cs.DiscoveryV1().EndpointSlices("shop").Update(t.Context(), sliceObj("shop", "orders-1", "orders",
		discoveryv1.AddressTypeIPv4, map[string]int32{"grpc": 18080}, epSpec{addr: "192.0.2.7", ready: ptr.To(true)}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, waitTimeout, hasAddrs("orders.shop.svc.cluster.local", "192.0.2.7=HEALTHY"))
	if got := testutil.ToFloat64(informerEvents.WithLabelValues("metrics-east", resEndpointSlice, evUpdate)); got != 1 {
		t.Errorf("endpointslice update events = %v, want 1", got)
	}
	waitFor(t, func() bool { return histogramCount(t, "metrics-east") >= 1 })

	for _, c := range Collectors() {
		if n := testutil.CollectAndCount(c); n == 0 && c != watchErrors && c != remoteClusters {
			t.Errorf("collector %T has no series", c)
		}
	}
}

func histogramCount(t *testing.T, registry string) uint64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(registries.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "registry" && l.GetValue() == registry {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}
