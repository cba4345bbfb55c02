package istioconfig

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/metric"
)

var (
	objectsGauge   = metric.GaugeVec("meshfed_config_objects", "Traffic config objects after the last read of the config sources, by kind and state (in_force, rejected; kind unknown for documents that could not be read as an object).", "kind", "state")
	snapshotsTotal = metric.Counter("meshfed_config_snapshots_total", "Config snapshots published: reads that changed what is in force.")
	sourceState    = metric.GaugeVec("meshfed_config_source_state", "One-hot state of each config source as of the last read (cluster: the registry name of a Kubernetes source's cluster, \"\" for a directory); states Starting, Synced, Degraded, Failed.", "source", "cluster", "state")
)

// Collectors returns the package's metrics, for the gateway's registry.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{objectsGauge, snapshotsTotal, sourceState}
}

// setObjectMetrics sets meshfed_config_objects from one read.
func setObjectMetrics(inForce map[string]int, rejected map[string]int) {
	for _, k := range []string{KindVirtualService, KindDestinationRule, KindSidecar, "unknown"} {
		objectsGauge.WithLabelValues(k, "in_force").Set(float64(inForce[k]))
		objectsGauge.WithLabelValues(k, "rejected").Set(float64(rejected[k]))
	}
}

// setSourceMetrics sets meshfed_config_source_state from one read.
func setSourceMetrics(states []SourceState) {
	for _, st := range states {
		for _, s := range []string{StateStarting, StateSynced, StateDegraded, StateFailed} {
			v := 0.0
			if s == st.State {
				v = 1
			}
			sourceState.WithLabelValues(st.Name, st.Cluster, s).Set(v)
		}
	}
}
