package kubeclienttest

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Catalog is a Kubernetes catalog as large clusters hold it, for tests and
// benchmarks against a real API server (issue #22): Services, each with
// one EndpointSlice of EndpointsPer endpoints backed by Pods on Nodes, the
// objects written the way controllers and kubectl write them (labels,
// annotations, owner references, full pod specs and statuses, node
// statuses with images), so that what an informer receives is what it
// receives in production.
type Catalog struct {
	Services     int
	EndpointsPer int // endpoints (pods) per service; default 10
	PerNamespace int // services per namespace; default 100
	// Nodes is the node count; default one per 100 pods (at least 3).
	Nodes int
	// PodStatus sets every pod's status (phase Running, conditions,
	// container statuses, IPs) with a second write per pod, as the kubelet
	// does; without it pods have no status.
	PodStatus bool
	// Workers write in parallel; default 32.
	Workers int
}

func (c *Catalog) defaults() {
	if c.EndpointsPer == 0 {
		c.EndpointsPer = 10
	}
	if c.PerNamespace == 0 {
		c.PerNamespace = 100
	}
	if c.Nodes == 0 {
		c.Nodes = max(3, c.Services*c.EndpointsPer/100)
	}
	if c.Workers == 0 {
		c.Workers = 32
	}
}

// Namespace is service i's namespace.
func (c Catalog) Namespace(i int) string {
	c.defaults()
	return "ns-" + strconv.Itoa(i/c.PerNamespace)
}

// Name is service i's name.
func (c Catalog) Name(i int) string { return "svc-" + strconv.Itoa(i) }

// Host is service i's hostname as the kube registry publishes it in
// domain (e.g. svc.cluster.local).
func (c Catalog) Host(i int, domain string) string {
	return c.Name(i) + "." + c.Namespace(i) + "." + domain
}

// Address is the address of endpoint j of service i: 10.0.0.0/8 (the API
// server rejects loopback addresses in EndpointSlices).
func Address(i, j, per int) string {
	n := i*per + j + 1
	return fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255)
}

// Endpoints is how many endpoints the catalog holds.
func (c Catalog) Endpoints() int {
	c.defaults()
	return c.Services * c.EndpointsPer
}

// Load writes the catalog into the cluster behind cs (which should allow
// a high request rate) and returns when every object exists. Objects that
// exist already are kept.
func (c Catalog) Load(ctx context.Context, cs kubernetes.Interface) error {
	c.defaults()
	namespaces := (c.Services + c.PerNamespace - 1) / c.PerNamespace
	var jobs []func() error
	for n := range namespaces {
		jobs = append(jobs, func() error {
			return ignoreExists(cs.CoreV1().Namespaces().Create(ctx, namespace(n), metav1.CreateOptions{}))
		})
	}
	for n := range c.Nodes {
		jobs = append(jobs, func() error { return ignoreExists(cs.CoreV1().Nodes().Create(ctx, node(n), metav1.CreateOptions{})) })
	}
	if err := parallel(ctx, c.Workers, jobs); err != nil {
		return err
	}
	jobs = jobs[:0]
	for i := range c.Services {
		jobs = append(jobs, func() error { return c.loadService(ctx, cs, i) })
	}
	return parallel(ctx, c.Workers, jobs)
}

func (c Catalog) loadService(ctx context.Context, cs kubernetes.Interface, i int) error {
	ns, name := c.Namespace(i), c.Name(i)
	if err := ignoreExists(cs.CoreV1().Services(ns).Create(ctx, service(ns, name), metav1.CreateOptions{})); err != nil {
		return err
	}
	slice := c.slice(ns, name)
	for j := range c.EndpointsPer {
		pod, nodeName := c.pod(ns, name, i, j)
		created, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(err):
			created, err = cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
		case err != nil:
			return err
		case c.PodStatus:
			created.Status = podStatus(created, Address(i, j, c.EndpointsPer), nodeAddress(c.node(i, j)))
			if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		slice.Endpoints = append(slice.Endpoints, c.endpoint(i, j, created, nodeName))
	}
	return ignoreExists(cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}))
}

// sliceSuffix ends the name of each service's EndpointSlice.
const sliceSuffix = "-x7k2p"

// SliceName is the name of service i's EndpointSlice.
func (c Catalog) SliceName(i int) string { return c.Name(i) + sliceSuffix }

func namespace(n int) *corev1.Namespace {
	name := "ns-" + strconv.Itoa(n)
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{"kubernetes.io/metadata.name": name, "team": "team-" + strconv.Itoa(n%7)}}}
}

// slice is service name's EndpointSlice, without endpoints, as the
// EndpointSlice controller writes it.
func (c Catalog) slice(ns, name string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + sliceSuffix,
			Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io",
				"app": name, "app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "shop"},
			Annotations:     map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2026-11-01T10:00:00Z"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: name, UID: "00000000-0000-0000-0000-000000000000", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)},
			{Name: ptr.To("grpc"), Port: ptr.To[int32](9090), Protocol: ptr.To(corev1.ProtocolTCP), AppProtocol: ptr.To("grpc")},
		},
	}
}

// endpoint is endpoint j of service i, backed by pod on nodeName.
func (c Catalog) endpoint(i, j int, pod *corev1.Pod, nodeName string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{Address(i, j, c.EndpointsPer)},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		NodeName:   ptr.To(nodeName),
		Zone:       ptr.To(zone(c.node(i, j))),
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
	}
}

// node is the node of endpoint j of service i.
func (c Catalog) node(i, j int) int { return (i*c.EndpointsPer + j) % c.Nodes }

func zone(n int) string { return "eu-west-1" + string(rune('a'+n%3)) }

func nodeAddress(n int) string { return fmt.Sprintf("172.16.%d.%d", n>>8&255, n&255) }

// service is a Service as `kubectl apply` leaves it.
func service(ns, name string) *corev1.Service {
	s := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{"app": name, "app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "shop",
				"app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": name + "-1.4.2"},
			Annotations: map[string]string{"meta.helm.sh/release-name": name, "meta.helm.sh/release-namespace": ns,
				"prometheus.io/scrape": "true", "prometheus.io/port": "9102"},
		},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 8080, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP},
				{Name: "grpc", Port: 9090, TargetPort: intstr.FromString("grpc"), Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("grpc")},
			},
			SessionAffinity: corev1.ServiceAffinityNone,
		},
	}
	applied, _ := json.Marshal(s)
	s.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = string(applied)
	return s
}

// PodName is the name of pod j of service i (in Namespace(i)).
func (c Catalog) PodName(i, j int) string { return podName(c.Name(i), j) }

func podName(svc string, j int) string { return fmt.Sprintf("%s-7d9f8b6c5-%05d", svc, j) }

// pod is pod j of service i, as a Deployment's ReplicaSet creates it.
func (c Catalog) pod(ns, svc string, i, j int) (*corev1.Pod, string) {
	nodeName := "node-" + strconv.Itoa(c.node(i, j))
	name := podName(svc, j)
	env := []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}
	for k := range 8 {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("APP_SETTING_%d", k), Value: fmt.Sprintf("value-%d-of-%s", k, svc)})
	}
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("http")}},
			InitialDelaySeconds: 5, PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3}
	}
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{"app": svc, "version": "v1", "pod-template-hash": "7d9f8b6c5",
				"app.kubernetes.io/name": svc, "app.kubernetes.io/part-of": "shop", "security.istio.io/tlsMode": "istio"},
			Annotations: map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "9102",
				"kubectl.kubernetes.io/restartedAt": "2026-11-01T09:00:00Z", "checksum/config": "3f2a9c1d0b8e7f6a5d4c3b2a1908f7e6d5c4b3a29180f7e6d5c4b3a291807f6e"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: svc + "-7d9f8b6c5",
				UID: "00000000-0000-0000-0000-000000000001", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{
			NodeName:           nodeName,
			ServiceAccountName: "default",
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.example.com/shop/" + svc + ":1.4.2", ImagePullPolicy: corev1.PullIfNotPresent,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
					{Name: "grpc", ContainerPort: 9090, Protocol: corev1.ProtocolTCP}, {Name: "metrics", ContainerPort: 9102, Protocol: corev1.ProtocolTCP}},
				Env: env, Resources: res, LivenessProbe: probe("/healthz"), ReadinessProbe: probe("/ready"),
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app", ReadOnly: true},
					{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
				TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: svc + "-config"}}}},
				{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				}}}},
			},
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
			},
		},
	}
	return p, nodeName
}

func podStatus(p *corev1.Pod, ip, hostIP string) corev1.PodStatus {
	at := metav1.NewTime(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	st := corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, HostIP: hostIP,
		HostIPs: []corev1.HostIP{{IP: hostIP}}, StartTime: &at, QOSClass: corev1.PodQOSBurstable}
	for _, c := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: c, Status: corev1.ConditionTrue, LastTransitionTime: at})
	}
	for _, c := range p.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Ready: true, Started: ptr.To(true),
			Image: c.Image, ImageID: "registry.example.com/shop@sha256:3f2a9c1d0b8e7f6a5d4c3b2a1908f7e6d5c4b3a29180f7e6d5c4b3a291807f6e",
			ContainerID: "containerd://" + fmt.Sprintf("%064x", len(p.Name)*7919),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}}})
	}
	return st
}

// node is a cloud node with the labels, annotations and status the
// kubelet and the cloud provider set.
func node(n int) *corev1.Node {
	name := "node-" + strconv.Itoa(n)
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi")}
	nd := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "m6i.2xlarge",
				"beta.kubernetes.io/instance-type": "m6i.2xlarge", "topology.kubernetes.io/region": "eu-west-1",
				"topology.kubernetes.io/zone": zone(n), "failure-domain.beta.kubernetes.io/region": "eu-west-1",
				"failure-domain.beta.kubernetes.io/zone": zone(n), "eks.amazonaws.com/nodegroup": "general", "eks.amazonaws.com/capacityType": "ON_DEMAND"},
			Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true",
				"csi.volume.kubernetes.io/nodeid": `{"ebs.csi.aws.com":"i-0` + fmt.Sprintf("%016x", n) + `"}`},
		},
		Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.%d.%d.0/24", 100+n>>8&127, n&255), ProviderID: fmt.Sprintf("aws:///%s/i-0%016x", zone(n), n)},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity,
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeAddress(n)}, {Type: corev1.NodeHostName, Address: name}},
			NodeInfo: corev1.NodeSystemInfo{MachineID: fmt.Sprintf("%032x", n), SystemUUID: fmt.Sprintf("%032x", n+1), BootID: fmt.Sprintf("%032x", n+2),
				KernelVersion: "6.1.112", OSImage: "Amazon Linux 2023", ContainerRuntimeVersion: "containerd://1.7.22",
				KubeletVersion: "v1.37.1", OperatingSystem: "linux", Architecture: "amd64"},
		},
	}
	for _, c := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeReady} {
		st := corev1.ConditionFalse
		if c == corev1.NodeReady {
			st = corev1.ConditionTrue
		}
		nd.Status.Conditions = append(nd.Status.Conditions, corev1.NodeCondition{Type: c, Status: st, Reason: "Kubelet" + string(c), Message: "kubelet reports " + string(c)})
	}
	for k := range 30 {
		nd.Status.Images = append(nd.Status.Images, corev1.ContainerImage{
			Names:     []string{fmt.Sprintf("registry.example.com/shop/svc-%d@sha256:%064x", k, k), fmt.Sprintf("registry.example.com/shop/svc-%d:1.4.2", k)},
			SizeBytes: int64(50_000_000 + k*1_000_000)})
	}
	return nd
}

func ignoreExists[T any](_ T, err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// parallel runs jobs on workers goroutines and returns the first error.
func parallel(ctx context.Context, workers int, jobs []func() error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range min(workers, len(jobs)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(jobs) {
					return
				}
				if err := jobs[i](); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		})
	}
	wg.Wait()
	return first
}
