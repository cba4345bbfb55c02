package statestore

import "github.com/prometheus/client_golang/prometheus"

var writes = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "meshfed_state_writes_total",
	Help: "Registry states written to state.dir, by result (ok, error).",
}, []string{"result"})

// Collectors returns the package's metrics, for the wiring to register once.
func Collectors() []prometheus.Collector { return []prometheus.Collector{writes} }
