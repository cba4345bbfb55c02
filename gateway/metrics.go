package gateway

import (
	"runtime"

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
	for name, l := range c.g.dyn.launched {
		ch <- prometheus.MustNewConstMetric(restartsDesc, prometheus.CounterValue, float64(l.runner.Restarts()), name)
	}
}

// buildInfoGauge is meshfed_build_info{version,revision,goversion} = 1.
func buildInfoGauge(version, revision string) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "meshfed_build_info",
		Help:        "Always 1; the labels say which build runs.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": runtime.Version()},
	}, func() float64 { return 1 })
}

var (
	digestDesc = prometheus.NewDesc("meshfed_snapshot_digest",
		"First 48 bits of the content digest of what one registry contributes to the served snapshot (/debug/digestz); replicas on the same registries have equal values.",
		[]string{"registry"}, nil)
	digestOverallDesc = prometheus.NewDesc("meshfed_snapshot_digest_overall",
		"First 48 bits of the content digest of the whole served snapshot (/debug/digestz).", nil, nil)
)

// digestCollector exports the snapshot digests at scrape time, one series
// per registry (names from clusters.yaml and runtime registries).
type digestCollector struct{ g *Gateway }

func (c digestCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- digestDesc
	ch <- digestOverallDesc
}

func (c digestCollector) Collect(ch chan<- prometheus.Metric) {
	d := c.g.Digest()
	ch <- prometheus.MustNewConstMetric(digestOverallDesc, prometheus.GaugeValue, digestValue(d.Overall))
	for name, h := range d.Registries {
		ch <- prometheus.MustNewConstMetric(digestDesc, prometheus.GaugeValue, digestValue(h), name)
	}
}
