// Package kube is the registry of kind kubernetes: it watches one
// Kubernetes cluster with client-go informers and publishes its Services
// as <name>.<namespace>.<domain> (domain is svc.<clusterDomain>, e.g.
// svc.cluster.local).
//
// # What becomes what
//
//   - A Service of type ClusterIP, NodePort or LoadBalancer, with or
//     without a selector: EDS. Its endpoints are the addresses of its
//     EndpointSlices (discovery.k8s.io/v1, IPv4 and IPv6; the first address
//     of each endpoint), with the slice's port numbers for the service's
//     port names (targetPort), the pod's labels (for subsets), the locality
//     of its node (topology.kubernetes.io/region and /zone, the endpoint's
//     own zone first, topology.istio.io/subzone), the entry's network and
//     the registry's name as cluster.
//   - A headless Service (clusterIP: None) with ports: EDS as well, with
//     the pod addresses as endpoints, so proxies and gRPC clients balance
//     over pods as they would with DNS. Without ports: nothing (listed on
//     /debug/conflictz).
//   - An ExternalName Service with ports: DNS, one endpoint whose address
//     is the external name. Without ports: nothing (listed).
//   - UDP and SCTP ports are not served (listed); a Service left without
//     a port is not published. FQDN EndpointSlices are ignored (listed).
//
// Endpoint health from the slice's conditions: ready → HEALTHY; serving
// and terminating → DRAINING; anything else → UNHEALTHY. Port protocol
// from appProtocol, else the port name's prefix (grpc, http, http2, tcp,
// as Istio reads them), else TCP.
//
// # Informers
//
// Services, EndpointSlices and Pods (per listed namespace, or cluster
// wide), Nodes, and Namespaces when a namespace selector is set. Pods,
// Nodes and Namespaces are read for their labels only and are listed and
// watched through client-go's metadata client: the API server sends
// PartialObjectMetadata, not whole objects (with 100,000 pods the whole
// pods were most of the first sync's bytes and decoding). The clients
// speak protobuf. Objects are slimmed by a transform (client-go
// SetTransform) before they are cached and are never modified afterwards:
// a Service keeps its name, type, cluster IP, external name and ports; an
// EndpointSlice its service-name label, address type, ports and per
// endpoint the first address, conditions, node, zone and target pod; Pods,
// Nodes and Namespaces become a labelled (namespace, name, resource
// version and labels; Nodes only the locality labels). The strings an
// object keeps are packed into one allocation (pack.Strings: the decoded
// strings kept one by one left most of the heap's spans they sat in
// empty). Values that repeat are shared (intern.go): EndpointSlices with
// the same ports share them,
// pods with the same labels share one map, which the endpoints converted
// from them share too (model values are immutable), namespaces, label
// strings, node names and zones are held once. The tables that share them
// are held by the registries that run and dropped when the last one stops
// (TestStoppedRegistriesLeaveNoInterning). TestRealTransformMemory
// measures the informers' heap with and without the transform;
// TestRealTransformKeepsWhatConversionReads checks that the transform
// keeps every field conversion reads. A registry built by NewForClient
// (a fake clientset) lists Pods, Nodes and Namespaces in full and the
// transform slims them the same way.
//
// Event handlers only enqueue the key of the affected Service (a pod's
// services from podIndex, a node's from the slices' node index); workers
// recompute that service from the listers and the full state is handed
// to the sink. One EndpointSlice, pod or Service change converts one
// service (TestRealOneChangeConvertsOneService counts them). Nothing is
// published before every informer synced; the adds of the informers'
// initial lists are not enqueued (the first state converts every Service
// from the caches), so after the first publish a change waits for its own
// Service only.
//
// # Outages
//
// Every list and watch call goes through a tracker: a failing call, or a
// watch dropped with an error (the reflector's watch error handler), makes
// the registry Degraded with the last published state kept; the informers
// retry with client-go's backoff, and once every informer's list or watch
// succeeds again the registry reports Synced. Changes made meanwhile arrive
// as events (or a relist) and are published as usual.
//
// # Files
//
// kube.go builds and runs a Registry; informers.go holds one connection to
// a cluster (the informers, the work queue, the publish loop); handlers.go
// turns informer events into keys of affected Services, with podIndex
// (podindex.go); convert.go turns a Service and its EndpointSlices into a
// model.Service and holds the transform, intern.go what it shares; remote.go is
// secretDiscovery; shared.go is Config.Connect, what other packages reach
// the cluster with. Connecting, the tracking of every list and watch
// call, and the checks of remote kubeconfigs are package kubeclient's.
//
// # Remote clusters
//
// With secretDiscovery, the registry also watches Secrets holding remote
// kubeconfigs (istioctl create-remote-secret's format) and runs one
// registry per remote cluster through a Launcher (the gateway): a new
// Secret starts one, a changed kubeconfig is swapped make-before-break (the
// new connection syncs before the old one stops, meanwhile the old state is
// served), a deleted Secret stops it and its endpoints leave.
package kube

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/meshfed/meshfed/kubeclient"
	"github.com/meshfed/meshfed/registries"
)

// workers recompute services from the listers.
const workers = 2

// Indexes on the EndpointSlice informers.
const (
	idxService = "service" // namespace/service-name label
	idxNode    = "node"    // node names
)

// Registry watches one Kubernetes cluster. Build it with Config.New or
// NewForClient. Run may be called again after it returned.
type Registry struct {
	common registries.Common
	cfg    Config
	log    *slog.Logger
	m      metrics

	creds  func() (*rest.Config, error) // static clusters
	client kubernetes.Interface         // NewForClient: used instead of creds
	remote *remoteSource                // a remote cluster found by secretDiscovery

	// clientFor connects with a kubeconfig from a Secret; tests replace it.
	clientFor func(kubeconfig []byte) (clients, func(), error)

	disc discovery // secretDiscovery state; outlives Run

	// conversions counts the services converted (and compared with their
	// last state) by this registry's watches: tests count what one event
	// costs.
	conversions atomic.Uint64

	// raw: the informers cache objects as listed, without the transform
	// (interning.slim); tests compare with them.
	raw bool
}

var _ registries.Registry = (*Registry)(nil)

func newRegistry(common registries.Common, cfg Config, creds func() (*rest.Config, error), log *slog.Logger) *Registry {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.ApplyDefaults()
	r := &Registry{
		common: common,
		cfg:    cfg,
		log:    log, // the caller's child logger carries the registry key
		m:      newMetrics(common.Name),
		creds:  creds,
	}
	r.clientFor = r.connectKubeconfig
	return r
}

// NewForClient returns a registry that watches the cluster behind client
// (for example client-go's fake clientset, in tests and benchmarks)
// instead of one named by a kubeconfig. cfg's Kubeconfig and Context are
// ignored; defaults are applied.
func NewForClient(common registries.Common, cfg Config, client kubernetes.Interface, log *slog.Logger) *Registry {
	r := newRegistry(common, cfg.clone(), nil, log)
	r.client = client
	return r
}

// clients are one connection's API clients.
type clients struct {
	kube kubernetes.Interface
	// meta lists Pods, Nodes and Namespaces as metadata only; nil with a
	// clientset from NewForClient (they are then listed in full and
	// slimmed by the transform).
	meta metadata.Interface
}

// connect builds the clients from rc with a dialer of their own, so that
// close ends every connection they opened (client-go would otherwise
// share and keep transports process-wide). They speak protobuf: every
// kind the registry reads is built in, and protobuf is several times
// cheaper to decode than JSON.
func (r *Registry) connect(rc *rest.Config) (clients, func(), error) {
	rc, closeAll := kubeclient.OwnConnections(rc, r.cfg.QPS, r.cfg.Burst)
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		closeAll()
		return clients{}, nil, err
	}
	mc, err := metadata.NewForConfig(rc)
	if err != nil {
		closeAll()
		return clients{}, nil, err
	}
	return clients{kube: kc, meta: mc}, closeAll, nil
}

// Run implements registries.Registry.
func (r *Registry) Run(ctx context.Context, sink registries.Sink) error {
	if r.remote != nil {
		return r.runRemote(ctx, sink)
	}
	c, closeClient := clients{kube: r.client}, func() {}
	if c.kube == nil {
		rc, err := r.creds()
		if err != nil {
			return registries.Permanent(err)
		}
		if c, closeClient, err = r.connect(rc); err != nil {
			return registries.Permanent(err)
		}
	}
	defer closeClient()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	if sd := r.cfg.SecretDiscovery; sd != nil {
		wg.Go(func() { r.discoverSecrets(ctx, c.kube) })
	}
	err := newWatch(r, c, r.clusterInfo(r.cfg.Network)).run(ctx, sink)
	cancel()
	wg.Wait()
	return err
}

func (r *Registry) clusterInfo(network string) clusterInfo {
	return clusterInfo{registry: r.common.Name, cluster: r.common.Name, network: network, domain: r.common.Domain}
}

// svcKey names a Service.
type svcKey struct{ ns, name string }

func (k svcKey) String() string { return k.ns + "/" + k.name }

var errNoLauncher = errors.New("secretDiscovery needs a launcher (the gateway); remote clusters are not started")
