package federation

import (
	"github.com/prometheus/client_golang/prometheus"
)

var restartsDesc = prometheus.NewDesc("meshfed_registry_restarts_total",
	"Times the supervisor restarted the registry after a failure.", []string{"registry"}, nil)

// restartsCollector exports the restart count of every registry, those of
// clusters.yaml and those started at runtime (Launch), read from their
// runners at scrape time: a registry removed at runtime leaves no series
// behind.
type restartsCollector struct{ g *Gateway }

func (c restartsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- restartsDesc }

func (c restartsCollector) Collect(ch chan<- prometheus.Metric) {
	c.g.dyn.mu.Lock()
	defer c.g.dyn.mu.Unlock()
	for name, e := range c.g.dyn.entries {
		if e.runner != nil {
			ch <- prometheus.MustNewConstMetric(restartsDesc, prometheus.CounterValue, float64(e.runner.Restarts()), name)
		}
	}
	for name, r := range c.g.dyn.runners {
		ch <- prometheus.MustNewConstMetric(restartsDesc, prometheus.CounterValue, float64(r.Restarts()), name)
	}
}
