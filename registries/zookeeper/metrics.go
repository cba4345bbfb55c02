package zookeeper

import "github.com/prometheus/client_golang/prometheus"

// Collectors of the package; the wiring registers them once (Collectors).
// Every series carries the registry name from clusters.yaml.
var (
	watchEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshfed_zookeeper_watch_events_total",
		Help: "ZooKeeper watch events received, by event type (created, deleted, data_changed, children_changed, not_watching).",
	}, []string{"registry", "type"})
	resyncs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshfed_zookeeper_resyncs_total",
		Help: "Full reads of the ZooKeeper tree: the first one and one after every (re)connection or session expiry.",
	}, []string{"registry"})
	sessionExpirations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshfed_zookeeper_session_expirations_total",
		Help: "ZooKeeper sessions that expired while disconnected (each forces a resync with new watches).",
	}, []string{"registry"})
	quarantinedInstances = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "meshfed_zookeeper_quarantined_instances",
		Help: "Instance znodes not served in the last published state because their data is bad (listed on /debug/conflictz).",
	}, []string{"registry"})
	connected = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "meshfed_zookeeper_connected",
		Help: "1 while the registry has a ZooKeeper session, else 0.",
	}, []string{"registry"})
)

// Collectors returns the package's Prometheus collectors.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{watchEvents, resyncs, sessionExpirations, quarantinedInstances, connected}
}

// metrics are the collectors curried for one registry.
type metrics struct {
	events      map[string]prometheus.Counter
	resyncs     prometheus.Counter
	expirations prometheus.Counter
	quarantined prometheus.Gauge
	connected   prometheus.Gauge
}

var eventTypes = []string{"created", "deleted", "data_changed", "children_changed", "not_watching"}

func newMetrics(registry string) *metrics {
	m := &metrics{
		events:      map[string]prometheus.Counter{},
		resyncs:     resyncs.WithLabelValues(registry),
		expirations: sessionExpirations.WithLabelValues(registry),
		quarantined: quarantinedInstances.WithLabelValues(registry),
		connected:   connected.WithLabelValues(registry),
	}
	for _, t := range eventTypes {
		m.events[t] = watchEvents.WithLabelValues(registry, t)
	}
	return m
}
