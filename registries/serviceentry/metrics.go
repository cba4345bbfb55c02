package serviceentry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/metric"
)

var (
	// reloads counts reads of a registry's files by result (ok, or error:
	// missing, unreadable, or not YAML).
	reloads = metric.CounterVec("meshfed_serviceentry_reloads_total", "Reads of a serviceentry registry's files, by result (ok, error).", "registry", "result")
	// objects is the number of ServiceEntries and WorkloadEntries of a
	// registry by kind and state: in_force (served, including a last good
	// version kept) or rejected (invalid or a duplicate, as last read).
	objects = metric.GaugeVec("meshfed_serviceentry_objects", "ServiceEntries and WorkloadEntries of a serviceentry registry, by kind and state (in_force, rejected).", "registry", "kind", "state")
)

// Collectors returns the package's metrics for the wiring to register once.
func Collectors() []prometheus.Collector { return []prometheus.Collector{reloads, objects} }

// setObjects sets the objects gauge of registry.
func setObjects(registry string, inForce, rejected map[string]int) {
	for kind := range kinds {
		objects.WithLabelValues(registry, kind, "in_force").Set(float64(inForce[kind]))
		objects.WithLabelValues(registry, kind, "rejected").Set(float64(rejected[kind]))
	}
}
