package statestore

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/metric"
)

var writes = metric.CounterVec("meshfed_state_writes_total", "Registry states written to state.dir, by result (ok, error).", "result")

// Collectors returns the package's metrics, for the wiring to register once.
func Collectors() []prometheus.Collector { return []prometheus.Collector{writes} }
