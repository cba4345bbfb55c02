package istioconfig

import "github.com/prometheus/client_golang/prometheus"

var (
	objectsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "meshfed_config_objects",
		Help: "Traffic config objects after the last read of the config sources, by kind and state (in_force, rejected; kind unknown for documents that could not be read as an object).",
	}, []string{"kind", "state"})
	snapshotsTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "meshfed_config_snapshots_total",
		Help: "Config snapshots published: reads that changed what is in force.",
	})
)

// Collectors returns the package's metrics, for the gateway's registry.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{objectsGauge, snapshotsTotal}
}

// setObjectMetrics sets meshfed_config_objects from one read.
func setObjectMetrics(inForce map[string]int, rejected map[string]int) {
	for _, k := range []string{KindVirtualService, KindDestinationRule, "unknown"} {
		objectsGauge.WithLabelValues(k, "in_force").Set(float64(inForce[k]))
		objectsGauge.WithLabelValues(k, "rejected").Set(float64(rejected[k]))
	}
}
