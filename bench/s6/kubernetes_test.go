package s6

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/kube"
	"github.com/meshfed/meshfed/test/servers"
)

// The kubernetes row (written with registries/kube): a real kube-apiserver
// (tools/testservers); each write updates one EndpointSlice with one more
// endpoint, as the EndpointSlice controller does when a pod becomes ready.
func init() {
	rows = append(rows, bench.S6Row{Name: "kubernetes", Goal: 50 * time.Millisecond, Setup: kubeSetup,
		Note: "informer watch on a real kube-apiserver; one EndpointSlice update per write"})
}

func kubeSetup(t testing.TB) bench.S6Target {
	api := servers.StartKubeClusters(t, 1).Servers[0]
	cs := api.Client(t, servers.AdminToken)
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "s6"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Services("s6").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s6"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	addr := func(i int) string { return fmt.Sprintf("10.77.%d.%d", i/250, i%250+1) }
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "s6-1", Labels: map[string]string{discoveryv1.LabelServiceName: "s6"}},
		AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{addr(0)}}}}
	slice, err := cs.DiscoveryV1().EndpointSlices("s6").Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := registries.Common{Name: "east", Kind: "kubernetes", Domain: "svc.cluster.local"}
	reg := newRegistry(t, &kube.Config{Kubeconfig: api.WriteKubeconfig(t, "east", servers.AdminToken)}, c)
	return bench.S6Target{Registry: reg, Common: c, Host: "s6.s6.svc.cluster.local",
		Write: func(ctx context.Context, n int) (bench.S6Change, error) {
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{addr(n)}})
			updated, err := cs.DiscoveryV1().EndpointSlices("s6").Update(ctx, slice, metav1.UpdateOptions{})
			if err == nil {
				slice = updated
			}
			return bench.S6Change{Host: "s6.s6.svc.cluster.local", Address: addr(n)}, err
		}}
}
