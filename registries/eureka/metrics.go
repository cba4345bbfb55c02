package eureka

import "github.com/prometheus/client_golang/prometheus"

// Fetch types, the bounded "type" label.
const (
	fetchFull  = "full"  // GET /apps
	fetchDelta = "delta" // GET /apps/delta
)

var (
	fetches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshfed_eureka_fetches_total",
		Help: "Registry fetches from Eureka by type (full = /apps, delta = /apps/delta) and result (ok, error); an error counts once after every URL failed.",
	}, []string{"registry", "type", "result"})
	hashMismatches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshfed_eureka_hashcode_mismatches_total",
		Help: "Deltas after which the merged local state did not match the server's apps__hashcode; each one leads to a full fetch.",
	}, []string{"registry"})
	failovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshfed_eureka_url_failovers_total",
		Help: "Requests that failed on one Eureka URL and moved on to the next.",
	}, []string{"registry"})
	instances = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "meshfed_eureka_instances",
		Help: "Eureka instances in a registry's merged state, malformed ones included.",
	}, []string{"registry"})
)

// Collectors returns the package's collectors; the wiring registers them
// once.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{fetches, hashMismatches, failovers, instances}
}

// metrics are the collectors curried with one registry's name.
type metrics struct {
	fullOK, fullErr, deltaOK, deltaErr prometheus.Counter
	mismatches                         prometheus.Counter
	failovers                          prometheus.Counter
	instances                          prometheus.Gauge
}

func newMetrics(registry string) metrics {
	return metrics{
		fullOK:     fetches.WithLabelValues(registry, fetchFull, "ok"),
		fullErr:    fetches.WithLabelValues(registry, fetchFull, "error"),
		deltaOK:    fetches.WithLabelValues(registry, fetchDelta, "ok"),
		deltaErr:   fetches.WithLabelValues(registry, fetchDelta, "error"),
		mismatches: hashMismatches.WithLabelValues(registry),
		failovers:  failovers.WithLabelValues(registry),
		instances:  instances.WithLabelValues(registry),
	}
}
