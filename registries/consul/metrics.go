package consul

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/metric"
)

// Query kinds, the bounded "query" label.
const (
	queryCatalog = "catalog" // /v1/catalog/services
	queryHealth  = "health"  // /v1/health/service/<name>
	queryChecks  = "checks"  // /v1/health/state/{critical,warning} (health hints)
)

var (
	inFlight        = metric.GaugeVec("meshfed_consul_blocking_queries_in_flight", "Blocking queries a Consul registry has open against its agent.", "registry")
	queries         = metric.CounterVec("meshfed_consul_queries_total", "Blocking queries that returned without error; changed=true when the index moved.", "registry", "query", "changed")
	queryErrors     = metric.CounterVec("meshfed_consul_query_errors_total", "Consul queries that failed.", "registry", "query")
	watchedServices = metric.GaugeVec("meshfed_consul_watched_services", "Consul services a registry watches.", "registry")
	httpRequests    = metric.CounterVec("meshfed_consul_http_requests_total", "HTTP requests a Consul registry sent to its agent.", "registry")
	httpRespBytes   = metric.CounterVec("meshfed_consul_http_response_bytes_total", "Bytes of response bodies a Consul registry read from its agent.", "registry")
	watchBudgetG    = metric.GaugeVec("meshfed_consul_max_concurrent_watches", "Connections a Consul registry's service queries may hold: maxConcurrentWatches, or when unset 64 % of the agent's limits.http_max_conns_per_client.", "registry")
	subscriptions   = metric.GaugeVec("meshfed_consul_subscriptions", "Event streams a Consul registry has open to the servers (services served from the event stream, docs/registries/consul.md).", "registry")
	streamEvents    = metric.CounterVec("meshfed_consul_stream_events_total", "Events a Consul registry read from the servers' event streams.", "registry")
	healthHints     = metric.CounterVec("meshfed_consul_health_hints_total", "Services a Consul registry asked ahead of their turn because a check of theirs entered or left critical or warning (plain HTTP, services taking turns).", "registry")
)

// Collectors returns the package's collectors; the wiring registers them
// once.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{inFlight, queries, queryErrors, watchedServices, httpRequests, httpRespBytes, healthHints, watchBudgetG, subscriptions, streamEvents}
}

// metrics are the collectors curried with one registry's name.
type metrics struct {
	inFlight                    prometheus.Gauge
	catalogChanged, catalogSame prometheus.Counter
	healthChanged, healthSame   prometheus.Counter
	catalogErrors, healthErrors prometheus.Counter
	checksErrors                prometheus.Counter
	watched                     prometheus.Gauge
	requests, respBytes         prometheus.Counter
	hinted                      prometheus.Counter
	budget                      prometheus.Gauge
	subscriptions               prometheus.Gauge
	streamEvents                prometheus.Counter
}

func newMetrics(registry string) metrics {
	return metrics{
		inFlight:       inFlight.WithLabelValues(registry),
		catalogChanged: queries.WithLabelValues(registry, queryCatalog, "true"),
		catalogSame:    queries.WithLabelValues(registry, queryCatalog, "false"),
		healthChanged:  queries.WithLabelValues(registry, queryHealth, "true"),
		healthSame:     queries.WithLabelValues(registry, queryHealth, "false"),
		catalogErrors:  queryErrors.WithLabelValues(registry, queryCatalog),
		healthErrors:   queryErrors.WithLabelValues(registry, queryHealth),
		checksErrors:   queryErrors.WithLabelValues(registry, queryChecks),
		watched:        watchedServices.WithLabelValues(registry),
		requests:       httpRequests.WithLabelValues(registry),
		respBytes:      httpRespBytes.WithLabelValues(registry),
		hinted:         healthHints.WithLabelValues(registry),
		budget:         watchBudgetG.WithLabelValues(registry),
		subscriptions:  subscriptions.WithLabelValues(registry),
		streamEvents:   streamEvents.WithLabelValues(registry),
	}
}
