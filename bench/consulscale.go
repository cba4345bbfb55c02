package bench

// ConsulScaleResult is one mode of the Consul scale run (issues #16, #22):
// a real Consul agent with Services services of Instances instances each,
// watched by the consul registry over HTTP/1.1 or HTTP/2 (Proto) with
// MaxConcurrentWatches Budget and blocking wait WaitTime (ns). bench/s6's
// TestConsulScale writes them as JSON for benchreport.
type ConsulScaleResult struct {
	Mode      string `json:"mode"`
	Proto     string `json:"proto"`
	Services  int    `json:"services"`
	Instances int    `json:"instances"`
	Budget    int    `json:"budget"`
	// BudgetSet: maxConcurrentWatches was set in the config (else sized
	// from AgentLimit, the agent's limits.http_max_conns_per_client).
	BudgetSet bool `json:"budgetSet"`
	// Streams is how many services followed the servers' event stream
	// (meshfed_consul_subscriptions after the sync); 0: blocking queries.
	Streams    int   `json:"streams"`
	AgentLimit int   `json:"agentLimit"`
	WaitTime   int64 `json:"waitTime"`
	// Register is how long loading the fixture into the agent took (ms),
	// before the registry starts.
	Register float64 `json:"register"`
	// Sync is registry start → the first Sink.Publish holding every
	// service (ms).
	Sync float64 `json:"sync"`
	// Memory is the growth of the registry process's live heap and
	// goroutine stacks (MB, after two GCs) from before the registry starts
	// to the end of the idle window after the first full state: the
	// registry's state and its queries in flight.
	Memory float64 `json:"memory"`
	// Change is an agent registration of one more instance → the
	// registry's Sink.Publish holding it (ms).
	Change Summary `json:"change"`
	Lost   int     `json:"lost"` // changes not seen within the timeout
	// Health is a check of one instance turning critical → the registry's
	// Sink.Publish showing that endpoint UNHEALTHY (ms), one change at a
	// time; HealthLost of them not seen within the timeout.
	Health     Summary `json:"health"`
	HealthLost int     `json:"healthLost"`
	// Concurrent: the changes were made at once on different services
	// (else one after another).
	Concurrent bool `json:"concurrent"`
	// Idle and Churn are the load on the agent: with nothing changing, and
	// with ChurnRate registrations per second (Churn.Change their
	// latencies).
	Idle      Load    `json:"idle"`
	ChurnRate float64 `json:"churnRate"`
	Churn     Load    `json:"churn"`
	// LoadAvg is /proc/loadavg when the mode started.
	LoadAvg string `json:"loadavg"`
}

// Load is what a registry costs over a window: its requests and response
// bytes per second to the agent, the agent's CPU and the registry
// process's CPU (each in cores, 1 = one core busy).
type Load struct {
	Seconds     float64 `json:"seconds"`
	ReqPerSec   float64 `json:"reqPerSec"`
	BytesPerSec float64 `json:"bytesPerSec"`
	// EventsPerSec is the events read from the servers' event streams.
	EventsPerSec float64 `json:"eventsPerSec"`
	AgentCPU     float64 `json:"agentCPU"`
	MeshfedCPU   float64 `json:"meshfedCPU"`
	Change       Summary `json:"change"`
	Lost         int     `json:"lost"`
}
