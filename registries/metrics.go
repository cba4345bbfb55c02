package registries

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/metric"
)

// ingestLatency is every registry's ingest latency, observed by the shared
// publishing tail (Publisher.Flush). Labels are bounded: registry names
// come from clusters.yaml (and secretDiscovery), kinds from the registered
// kinds.
var ingestLatency = metric.HistogramVec("meshfed_registry_ingest_latency_seconds", "Time from the backend announcing a change (an answer, push, watch or file event) to the registry handing the full state that includes it to the aggregator.",
	prometheus.ExponentialBuckets(0.0005, 4, 10), "registry", "kind")

// Collectors returns the metrics of the shared registry machinery (not
// those of the kinds: KindCollectors); the wiring registers them once.
func Collectors() []prometheus.Collector { return []prometheus.Collector{ingestLatency} }

// ForgetMetrics drops the series of the registry called name (a remote
// cluster that was removed), so that they do not linger.
func ForgetMetrics(name string) {
	ingestLatency.DeletePartialMatch(prometheus.Labels{"registry": name})
}
