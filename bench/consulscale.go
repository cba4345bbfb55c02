package bench

// ConsulScaleResult is one watch-budget mode of the Consul scale run
// (issue #16): a real Consul agent with Services services, watched by the
// consul registry with MaxConcurrentWatches Budget and blocking wait
// WaitTime (ns). bench/s6's TestConsulScale writes them as JSON for
// benchreport.
type ConsulScaleResult struct {
	Mode     string `json:"mode"`
	Services int    `json:"services"`
	Budget   int    `json:"budget"`
	WaitTime int64  `json:"waitTime"`
	// Register is how long the catalog registrations took (ms).
	Register float64 `json:"register"`
	// Sync is registry start → the first Sink.Publish holding every
	// service (ms).
	Sync float64 `json:"sync"`
	// Change is an agent registration of one more instance → the
	// registry's Sink.Publish holding it (ms).
	Change Summary `json:"change"`
	Lost   int     `json:"lost"` // changes not seen within the timeout
	// Concurrent: the changes were made at once on different services
	// (else one after another).
	Concurrent bool `json:"concurrent"`
}
