package aggregate

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	registryState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "meshfed_registry_state",
		Help: "Registry state, one-hot: 1 for the registry's current state, 0 for the others.",
	}, []string{"registry", "state"})
	registryServices = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "meshfed_registry_services",
		Help: "Services served from the registry.",
	}, []string{"registry"})
	registryEndpoints = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "meshfed_registry_endpoints",
		Help: "Endpoints served from the registry.",
	}, []string{"registry"})
	conflictsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "meshfed_conflicts",
		Help: "Items rejected or quarantined, by category (as listed on /debug/conflictz).",
	}, []string{"category"})
	snapshotsTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "meshfed_snapshots_total",
		Help: "Snapshots published by the aggregator.",
	})
	snapshotBuildSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "meshfed_snapshot_build_seconds",
		Help:    "Time to normalize, merge and build a snapshot after a debounced change.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10), // 100µs .. ~26s
	})
	holddownsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshfed_holddowns_total",
		Help: "Updates held back because they would drop more than maxDeleteRatio of a registry's endpoints.",
	}, []string{"registry"})
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
