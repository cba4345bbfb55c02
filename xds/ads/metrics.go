package ads

import "github.com/prometheus/client_golang/prometheus"

var (
	connectedProxies = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "meshfed_xds_connected_proxies",
		Help: "xDS streams open, by client class (envoy, grpc).",
	}, []string{"class"})
	nacksTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshfed_xds_nacks_total",
		Help: "Responses rejected by proxies, per xDS type.",
	}, []string{"type"})
	responsesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshfed_xds_responses_total",
		Help: "Responses sent to proxies, per xDS type (CDS, EDS, LDS, RDS).",
	}, []string{"type"})
	convergenceSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "meshfed_xds_convergence_seconds",
		Help:    "Time from the aggregator receiving a registry update to a connected proxy ACKing the first response that carries it, per xDS type; one observation per proxy and type.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16), // 1ms .. ~33s
	}, []string{"type"})
	limitExceeded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshfed_xds_stream_limit_exceeded_total",
		Help: "ADS streams ended with ResourceExhausted, per limit (typeURLs, names, nameBytes).",
	}, []string{"limit"})
	unknownTypes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "meshfed_xds_unknown_type_requests_total",
		Help: "ADS subscriptions to type URLs meshfed does not serve (answered with an empty response).",
	})
	oversizedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshfed_xds_oversized_total",
		Help: "Response size protection (xds.limits.maxResponseBytes), per xDS type and action: split (a response cut at the limit, the rest sent after the ACK), rejected (a resource larger than the limit alone, not sent), sent (a response above the limit sent whole).",
	}, []string{"type", "action"})
	subscribedNames = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "meshfed_xds_subscribed_names",
		Help: "Resource names subscribed by name, summed over every stream and type URL.",
	})
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
		responsesTotal, convergenceSeconds, limitExceeded, unknownTypes, subscribedNames, oversizedTotal}
}
