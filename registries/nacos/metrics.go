package nacos

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/metric"
)

// Request kinds, the bounded "request" label.
const (
	reqList      = "list"      // ServiceListRequest, GET /ns/service/list
	reqSubscribe = "subscribe" // SubscribeServiceRequest
	reqInstances = "instances" // GET /ns/instance/list (http transport)
	reqConnect   = "connect"   // ServerCheckRequest + stream setup, login
)

var (
	requests       = metric.CounterVec("meshfed_nacos_requests_total", "Requests to Nacos by kind (list, subscribe, instances, connect) and result (ok, error).", "registry", "request", "result")
	pushes         = metric.CounterVec("meshfed_nacos_pushes_total", "Service instance lists pushed by Nacos over the gRPC stream (NotifySubscriberRequest).", "registry")
	reconnects     = metric.CounterVec("meshfed_nacos_reconnects_total", "Times the registry lost its connection to Nacos and connected again (to the same or the next server).", "registry")
	repairs        = metric.CounterVec("meshfed_nacos_resync_repairs_total", "Services whose instances the periodic resync (resyncInterval) found changed although no push had said so.", "registry")
	watched        = metric.GaugeVec("meshfed_nacos_services", "Nacos services a registry watches (subscribed or polled).", "registry")
	instancesGauge = metric.GaugeVec("meshfed_nacos_instances", "Nacos instances in a registry's state, malformed ones included.", "registry")
)

// Collectors returns the package's collectors; the wiring registers them
// once.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{requests, pushes, reconnects, repairs, watched, instancesGauge}
}

// metrics are the collectors curried with one registry's name.
type metrics struct {
	list, sub, inst, conn       metric.Outcomes
	pushes, reconnects, repairs prometheus.Counter
	watched, instances          prometheus.Gauge
}

func newMetrics(registry string) metrics {
	return metrics{
		list:       metric.OutcomesOf(requests, registry, reqList),
		sub:        metric.OutcomesOf(requests, registry, reqSubscribe),
		inst:       metric.OutcomesOf(requests, registry, reqInstances),
		conn:       metric.OutcomesOf(requests, registry, reqConnect),
		pushes:     pushes.WithLabelValues(registry),
		reconnects: reconnects.WithLabelValues(registry),
		repairs:    repairs.WithLabelValues(registry),
		watched:    watched.WithLabelValues(registry),
		instances:  instancesGauge.WithLabelValues(registry),
	}
}
