package kube

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/metric"
	"github.com/meshfed/meshfed/registries"
)

// Resources, the bounded "resource" label.
const (
	resService       = "service"
	resEndpointSlice = "endpointslice"
	resPod           = "pod"
	resNode          = "node"
	resNamespace     = "namespace"
	resSecret        = "secret"
)

// Informer events, the bounded "event" label.
const (
	evAdd    = "add"
	evUpdate = "update"
	evDelete = "delete"
)

var (
	informerEvents = metric.CounterVec("meshfed_kube_informer_events_total", "Events the Kubernetes informers delivered, by cluster registry, resource and event.", "registry", "resource", "event")
	watchErrors    = metric.CounterVec("meshfed_kube_watch_errors_total", "Failed list or watch calls and dropped watches of the Kubernetes informers.", "registry", "resource")
	clusterSynced  = metric.GaugeVec("meshfed_kube_cluster_synced", "1 while a cluster registry's informers are synced and its API server answers, else 0.", "registry")
	remoteClusters = metric.GaugeVec("meshfed_kube_remote_clusters", "Remote cluster registries a registry with secretDiscovery runs.", "registry")
)

// Collectors returns the package's collectors; the wiring registers them
// once.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{informerEvents, watchErrors, clusterSynced, remoteClusters}
}

// metrics are the collectors curried with one registry's name.
type metrics struct {
	registry string
	synced   prometheus.Gauge
	remotes  prometheus.Gauge
}

func newMetrics(registry string) metrics {
	return metrics{
		registry: registry,
		synced:   clusterSynced.WithLabelValues(registry),
		remotes:  remoteClusters.WithLabelValues(registry),
	}
}

func (m metrics) event(resource, event string) {
	informerEvents.WithLabelValues(m.registry, resource, event).Inc()
}

func (m metrics) watchError(resource string) {
	watchErrors.WithLabelValues(m.registry, resource).Inc()
}

// forget drops the registry's series (a removed remote cluster).
func (m metrics) forget() {
	l := prometheus.Labels{"registry": m.registry}
	for _, v := range []*prometheus.MetricVec{informerEvents.MetricVec, watchErrors.MetricVec, clusterSynced.MetricVec, remoteClusters.MetricVec} {
		v.DeletePartialMatch(l)
	}
	registries.ForgetMetrics(m.registry)
}
