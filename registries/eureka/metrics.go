package eureka

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/metric"
)

// Fetch types, the bounded "type" label.
const (
	fetchFull  = "full"  // GET /apps
	fetchDelta = "delta" // GET /apps/delta
)

var (
	fetches        = metric.CounterVec("meshfed_eureka_fetches_total", "Registry fetches from Eureka by type (full = /apps, delta = /apps/delta) and result (ok, error); an error counts once after every URL failed.", "registry", "type", "result")
	hashMismatches = metric.CounterVec("meshfed_eureka_hashcode_mismatches_total", "Deltas after which the merged local state did not match the server's apps__hashcode; each one leads to a full fetch.", "registry")
	failovers      = metric.CounterVec("meshfed_eureka_url_failovers_total", "Requests that failed on one Eureka URL and moved on to the next.", "registry")
	instances      = metric.GaugeVec("meshfed_eureka_instances", "Eureka instances in a registry's merged state, malformed ones included.", "registry")
)

// Collectors returns the package's collectors; the wiring registers them
// once.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{fetches, hashMismatches, failovers, instances}
}

// metrics are the collectors curried with one registry's name.
type metrics struct {
	full, delta metric.Outcomes
	mismatches  prometheus.Counter
	failovers   prometheus.Counter
	instances   prometheus.Gauge
}

func newMetrics(registry string) metrics {
	return metrics{
		full:       metric.OutcomesOf(fetches, registry, fetchFull),
		delta:      metric.OutcomesOf(fetches, registry, fetchDelta),
		mismatches: hashMismatches.WithLabelValues(registry),
		failovers:  failovers.WithLabelValues(registry),
		instances:  instances.WithLabelValues(registry),
	}
}
