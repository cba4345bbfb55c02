package chaos

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// kubeKind is one Kubernetes cluster of a multicluster set: both clusters
// serve the same Services (domain svc.cluster.local, namespace chaos), so
// their endpoints merge into one host. Each instance is an EndpointSlice
// of its own (no controller manager runs: the churn writes the slices, as
// the e2e tests do); health is the endpoint's ready condition.
type kubeKind struct {
	name       string
	kubeconfig string
	client     kubernetes.Interface
}

const kubeNamespace = "chaos"

func (k *kubeKind) Name() string { return k.name }
func (k *kubeKind) Entry() string {
	return fmt.Sprintf("{name: %s, kind: kubernetes, domain: svc.cluster.local, kubernetes: {kubeconfig: %q, context: %s, network: %s-net}}",
		k.name, k.kubeconfig, k.name, k.name)
}
func (k *kubeKind) Host(svc int) string {
	return fmt.Sprintf("k%d.%s.svc.cluster.local", svc, kubeNamespace)
}
func (k *kubeKind) Port(svc int) int { return 8500 + svc }

// Bounds: informers see a change at once (a watch event) and the registry
// publishes it through the debounce; Push 10s is that with slack. Heal adds
// client-go's relist after the API server comes back (its reflector
// backs off up to ~30s) and the registry's resync.
func (k *kubeKind) Bounds() Bounds { return Bounds{Push: 10 * time.Second, Heal: 60 * time.Second} }

// setup creates the namespace and the Services.
func (k *kubeKind) setup(ctx context.Context) error {
	_, err := k.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kubeNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for svc := range churnServices {
		_, err := k.client.CoreV1().Services(kubeNamespace).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: kubeNamespace, Name: fmt.Sprintf("k%d", svc)},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: int32(k.Port(svc)), Protocol: corev1.ProtocolTCP}}},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

func (k *kubeKind) slice(in Instance) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: kubeNamespace, Name: fmt.Sprintf("k%d-%d", in.Svc, in.ID),
			Labels: map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("k%d", in.Svc)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To(int32(in.Port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{in.IP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(in.Healthy), Serving: ptr.To(in.Healthy), Terminating: ptr.To(false)},
		}},
	}
}

func (k *kubeKind) put(ctx context.Context, in Instance) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s := k.slice(in)
	api := k.client.DiscoveryV1().EndpointSlices(kubeNamespace)
	old, err := api.Get(ctx, s.Name, metav1.GetOptions{})
	switch {
	case err == nil:
		s.ResourceVersion = old.ResourceVersion
		_, err = api.Update(ctx, s, metav1.UpdateOptions{})
	case apierrors.IsNotFound(err):
		_, err = api.Create(ctx, s, metav1.CreateOptions{})
	}
	return err
}

func (k *kubeKind) Add(ctx context.Context, in Instance) error       { return k.put(ctx, in) }
func (k *kubeKind) SetHealth(ctx context.Context, in Instance) error { return k.put(ctx, in) }
func (k *kubeKind) Remove(ctx context.Context, in Instance) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := k.client.DiscoveryV1().EndpointSlices(kubeNamespace).Delete(ctx, fmt.Sprintf("k%d-%d", in.Svc, in.ID), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
