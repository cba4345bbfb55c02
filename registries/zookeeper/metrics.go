package zookeeper

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/metric"
)

// Collectors of the package; the wiring registers them once (Collectors).
// Every series carries the registry name from clusters.yaml.
var (
	watchEvents          = metric.CounterVec("meshfed_zookeeper_watch_events_total", "ZooKeeper watch events received, by event type (created, deleted, data_changed, children_changed, not_watching).", "registry", "type")
	resyncs              = metric.CounterVec("meshfed_zookeeper_resyncs_total", "Full reads of the ZooKeeper tree: the first one and one after every (re)connection or session expiry.", "registry")
	sessionExpirations   = metric.CounterVec("meshfed_zookeeper_session_expirations_total", "ZooKeeper sessions that expired while disconnected (each forces a resync with new watches).", "registry")
	quarantinedInstances = metric.GaugeVec("meshfed_zookeeper_quarantined_instances", "Instance znodes not served in the last published state because their data is bad (listed on /debug/conflictz).", "registry")
	connected            = metric.GaugeVec("meshfed_zookeeper_connected", "1 while the registry has a ZooKeeper session, else 0.", "registry")
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
