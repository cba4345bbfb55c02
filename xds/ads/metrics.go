package ads

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/metric"
)

var (
	connectedProxies   = metric.GaugeVec("meshfed_xds_connected_proxies", "xDS streams open, by client class (envoy, grpc).", "class")
	nacksTotal         = metric.CounterVec("meshfed_xds_nacks_total", "Responses rejected by proxies, per xDS type.", "type")
	responsesTotal     = metric.CounterVec("meshfed_xds_responses_total", "Responses sent to proxies, per xDS type (CDS, EDS, LDS, RDS).", "type")
	convergenceSeconds = metric.HistogramVec("meshfed_xds_convergence_seconds", "Time from the aggregator receiving a registry update to a connected proxy ACKing the first response that carries it, per xDS type; one observation per proxy and type.",
		prometheus.ExponentialBuckets(0.001, 2, 16), "type") // 1ms .. ~33s
	limitExceeded   = metric.CounterVec("meshfed_xds_stream_limit_exceeded_total", "ADS streams ended with ResourceExhausted, per limit (typeURLs, names, nameBytes).", "limit")
	unknownTypes    = metric.Counter("meshfed_xds_unknown_type_requests_total", "ADS subscriptions to type URLs meshfed does not serve (answered with an empty response).")
	oversizedTotal  = metric.CounterVec("meshfed_xds_oversized_total", "Response size protection (xds.limits.maxResponseBytes), per xDS type and action: split (a response cut at the limit, the rest sent after the ACK), rejected (a resource larger than the limit alone, not sent), sent (a response above the limit sent whole).", "type", "action")
	subscribedNames = metric.Gauge("meshfed_xds_subscribed_names", "Resource names subscribed by name, summed over every stream and type URL.")
)

// InitSeries makes the series of classes and type labels exist from the
// start (at zero), so rate() and alerts see a counter's first increase.
func InitSeries(classes []Class, typeLabels []string) {
	for _, t := range typeLabels {
		nacksTotal.WithLabelValues(t)
		responsesTotal.WithLabelValues(t)
		convergenceSeconds.WithLabelValues(t)
		for _, a := range []string{oversizedSplit, oversizedRejected, oversizedSent} {
			oversizedTotal.WithLabelValues(t, a)
		}
	}
	for _, c := range classes {
		connectedProxies.WithLabelValues(string(c))
	}
}

// Collectors returns the package's Prometheus collectors; the wiring
// registers them once.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{connectedProxies, nacksTotal,
		responsesTotal, convergenceSeconds, limitExceeded, unknownTypes, subscribedNames, oversizedTotal,
		restoreHeld, restoreHeldTotal}
}
