package file

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/metric"
)

// reloads counts reads of services files by registry and result (ok or
// error); a read whose content did not change still counts as ok.
var reloads = metric.CounterVec("meshfed_file_reloads_total", "Reads of a file registry's services file, by result (ok, error).", "registry", "result")

// Collectors returns the package's metrics for the wiring to register once.
func Collectors() []prometheus.Collector { return []prometheus.Collector{reloads} }
