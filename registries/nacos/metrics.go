package nacos

import "github.com/prometheus/client_golang/prometheus"

// Request kinds, the bounded "request" label.
const (
	reqList      = "list"      // ServiceListRequest, GET /ns/service/list
	reqSubscribe = "subscribe" // SubscribeServiceRequest
	reqInstances = "instances" // GET /ns/instance/list (http transport)
	reqConnect   = "connect"   // ServerCheckRequest + stream setup, login
)

var (
	requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshfed_nacos_requests_total",
		Help: "Requests to Nacos by kind (list, subscribe, instances, connect) and result (ok, error).",
	}, []string{"registry", "request", "result"})
	pushes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshfed_nacos_pushes_total",
		Help: "Service instance lists pushed by Nacos over the gRPC stream (NotifySubscriberRequest).",
	}, []string{"registry"})
	reconnects = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshfed_nacos_reconnects_total",
		Help: "Times the registry lost its connection to Nacos and connected again (to the same or the next server).",
	}, []string{"registry"})
	repairs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshfed_nacos_resync_repairs_total",
		Help: "Services whose instances the periodic resync (resyncInterval) found changed although no push had said so.",
	}, []string{"registry"})
	watched = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "meshfed_nacos_services",
		Help: "Nacos services a registry watches (subscribed or polled).",
	}, []string{"registry"})
	instancesGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "meshfed_nacos_instances",
		Help: "Nacos instances in a registry's state, malformed ones included.",
	}, []string{"registry"})
)

// Collectors returns the package's collectors; the wiring registers them
// once.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{requests, pushes, reconnects, repairs, watched, instancesGauge}
}

// metrics are the collectors curried with one registry's name.
type metrics struct {
	listOK, listErr, subOK, subErr, instOK, instErr, connOK, connErr prometheus.Counter
	pushes, reconnects, repairs                                      prometheus.Counter
	watched, instances                                               prometheus.Gauge
}

func newMetrics(registry string) metrics {
	return metrics{
		listOK:     requests.WithLabelValues(registry, reqList, "ok"),
		listErr:    requests.WithLabelValues(registry, reqList, "error"),
		subOK:      requests.WithLabelValues(registry, reqSubscribe, "ok"),
		subErr:     requests.WithLabelValues(registry, reqSubscribe, "error"),
		instOK:     requests.WithLabelValues(registry, reqInstances, "ok"),
		instErr:    requests.WithLabelValues(registry, reqInstances, "error"),
		connOK:     requests.WithLabelValues(registry, reqConnect, "ok"),
		connErr:    requests.WithLabelValues(registry, reqConnect, "error"),
		pushes:     pushes.WithLabelValues(registry),
		reconnects: reconnects.WithLabelValues(registry),
		repairs:    repairs.WithLabelValues(registry),
		watched:    watched.WithLabelValues(registry),
		instances:  instancesGauge.WithLabelValues(registry),
	}
}
