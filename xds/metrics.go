package xds

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/metric"
	"github.com/meshfed/meshfed/xds/ads"
	"github.com/meshfed/meshfed/xds/translate"
)

var (
	pushesTotal = metric.CounterVec("meshfed_xds_pushes_total", "Cache updates pushed per xDS type (CDS, EDS, LDS, RDS); one per snapshot that changed the type.", "type")
	pushSeconds = metric.Histogram("meshfed_xds_push_seconds", "Time from a snapshot handed to the xDS server to its caches being updated.",
		prometheus.ExponentialBuckets(0.0001, 4, 10))
	resourcesGauge = metric.GaugeVec("meshfed_xds_resources", "Resources served, per client class and xDS type (endpoints are shared: class \"all\").", "class", "type")
)

// Series of every served type exist from the start (at zero), so rate()
// and alerts see a counter's first increase.
func init() {
	var labels []string
	for _, u := range translate.TypeURLs {
		t := translate.TypeLabel(u)
		pushesTotal.WithLabelValues(t)
		labels = append(labels, t)
	}
	ads.InitSeries([]translate.Class{translate.ClassEnvoy, translate.ClassGRPC}, labels)
}

// Collectors returns the Prometheus collectors of xds and its packages;
// the wiring registers them once.
func Collectors() []prometheus.Collector {
	return append([]prometheus.Collector{pushesTotal, pushSeconds, resourcesGauge}, ads.Collectors()...)
}

func classLabel(c translate.Class) string {
	if c == "" {
		return "all"
	}
	return string(c)
}
