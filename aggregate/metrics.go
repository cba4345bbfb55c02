package aggregate

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/metric"
)

var (
	registryState        = metric.GaugeVec("meshfed_registry_state", "Registry state, one-hot: 1 for the registry's current state, 0 for the others.", "registry", "state")
	registryServices     = metric.GaugeVec("meshfed_registry_services", "Services served from the registry.", "registry")
	registryEndpoints    = metric.GaugeVec("meshfed_registry_endpoints", "Endpoints served from the registry.", "registry")
	conflictsGauge       = metric.GaugeVec("meshfed_conflicts", "Items rejected or quarantined, by category (as listed on /debug/conflictz).", "category")
	snapshotsTotal       = metric.Counter("meshfed_snapshots_total", "Snapshots published by the aggregator.")
	snapshotBuildSeconds = metric.Histogram("meshfed_snapshot_build_seconds", "Time to normalize, merge and build a snapshot after a debounced change.",
		prometheus.ExponentialBuckets(0.0001, 4, 10)) // 100µs .. ~26s
	holddownsTotal = metric.CounterVec("meshfed_holddowns_total", "Updates held back because they would drop more than maxDeleteRatio of a registry's endpoints.", "registry")
)

var allCategories = []string{CategoryInvalid, CategoryDuplicate, CategoryDomain, CategoryPortMismatch,
	CategoryResolutionMismatch, CategoryHoldDown, CategoryRegistry, CategoryScaled}

func init() { setConflictMetrics(nil) } // every category at 0 from the start

// Collectors returns the package's metrics, for the wiring to register once.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{registryState, registryServices, registryEndpoints, conflictsGauge,
		snapshotsTotal, snapshotBuildSeconds, holddownsTotal}
}

func setStateMetric(registry string, s State) {
	for _, st := range AllStates {
		v := 0.0
		if st == s {
			v = 1
		}
		registryState.WithLabelValues(registry, st.String()).Set(v)
	}
}

func deleteRegistryMetrics(registry string) {
	l := prometheus.Labels{"registry": registry}
	registryState.DeletePartialMatch(l)
	registryServices.DeletePartialMatch(l)
	registryEndpoints.DeletePartialMatch(l)
	holddownsTotal.DeletePartialMatch(l)
}

func setConflictMetrics(cs []Conflict) {
	n := make(map[string]int, len(allCategories))
	for _, c := range cs {
		n[c.Category]++
	}
	for _, cat := range allCategories {
		conflictsGauge.WithLabelValues(cat).Set(float64(n[cat]))
	}
}
