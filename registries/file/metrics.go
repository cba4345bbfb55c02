package file

import "github.com/prometheus/client_golang/prometheus"

// reloads counts reads of services files by registry and result (ok or
// error); a read whose content did not change still counts as ok.
var reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "meshfed_file_reloads_total",
	Help: "Reads of a file registry's services file, by result (ok, error).",
}, []string{"registry", "result"})

// Collectors returns the package's metrics for the wiring to register once.
func Collectors() []prometheus.Collector { return []prometheus.Collector{reloads} }
