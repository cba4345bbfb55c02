// Package metric declares meshfed's Prometheus metrics one line each:
// name, help and labels stay where the metric is declared, the option
// structs are built here. Nothing is registered: each package returns its
// collectors from its Collectors function and the wiring registers them
// once, with the gateway's registry.
package metric

import "github.com/prometheus/client_golang/prometheus"

// Counter is a counter without labels.
func Counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// CounterVec is a counter with labels.
func CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// Gauge is a gauge without labels.
func Gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// GaugeVec is a gauge with labels.
func GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

// HistogramVec is a histogram with buckets and labels.
func HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}

// Histogram is a histogram with buckets, without labels.
func Histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}

// Outcomes are the two series of a counter counted by outcome: its last
// label "ok" or "error".
type Outcomes struct{ OK, Err prometheus.Counter }

// OutcomesOf curries vec with labels, then "ok" and "error" for its last
// label.
func OutcomesOf(vec *prometheus.CounterVec, labels ...string) Outcomes {
	with := func(outcome string) prometheus.Counter {
		return vec.WithLabelValues(append(labels[:len(labels):len(labels)], outcome)...)
	}
	return Outcomes{OK: with("ok"), Err: with("error")}
}
