package bench

import (
	"fmt"
	"strconv"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/translate"
)

// Fixture shape: every service has one HTTP port; the registry is one shard.
const (
	Domain   = "bench.local"
	Port     = 8080
	Registry = "bench"
	Kind     = "bench"
	// SeqLabel is the endpoint label that carries the sequence number of the
	// last churn event that touched the endpoint.
	SeqLabel = "bench-seq"
)

// Shard is the shard the bench registry publishes.
var Shard = model.ShardKey{Kind: Kind, Name: Registry}

// Host is the hostname of service i.
func Host(i int) string { return fmt.Sprintf("s%04d.%s", i, Domain) }

// ClusterName is the xDS cluster (and CLA) name of service i.
func ClusterName(i int) string { return translate.ClusterName(Host(i), Port) }

// endpointAddr is the address of slot j of service i in generation gen.
// Within a service, addresses of different slots never collide.
func endpointAddr(i, j, gen int) string {
	return fmt.Sprintf("10.%d.%d.%d", 16+i>>8, i&255, (j+10*gen)%250+1)
}

func endpoint(i, j, gen int, seq int64) model.Endpoint {
	labels := map[string]string{"app": fmt.Sprintf("s%04d", i), "version": "v1"}
	if seq > 0 {
		labels[SeqLabel] = strconv.FormatInt(seq, 10)
	}
	return model.Endpoint{
		Address:  endpointAddr(i, j, gen),
		Labels:   labels,
		Locality: model.Locality{Region: "bench", Zone: fmt.Sprintf("z%d", j%3)},
		Weight:   1,
		Source:   model.Source{Registry: Registry, Cluster: Registry},
	}
}

// Service builds service i with eps endpoints, all healthy, generation 0.
func Service(i, eps int) model.Service {
	s := model.Service{
		Hostname: Host(i),
		Ports:    []model.Port{{Name: "http", Number: Port, Protocol: model.ProtocolHTTP}},
	}
	for j := range eps {
		s.Endpoints = append(s.Endpoints, endpoint(i, j, 0, 0))
	}
	return s
}

// BigService is a service with n endpoints spread over three zones (S3a).
func BigService(n int) model.Service {
	s := model.Service{
		Hostname: "big." + Domain,
		Ports:    []model.Port{{Name: "http", Number: Port, Protocol: model.ProtocolHTTP}},
	}
	for j := range n {
		s.Endpoints = append(s.Endpoints, model.Endpoint{
			Address:  fmt.Sprintf("10.%d.%d.%d", 100+j>>16, (j>>8)&255, j&255),
			Labels:   map[string]string{"app": "big", "version": "v1"},
			Locality: model.Locality{Region: "bench", Zone: fmt.Sprintf("z%d", j%3)},
			Weight:   1,
			Source:   model.Source{Registry: Registry, Cluster: Registry},
		})
	}
	return s
}

// State is the bench registry's full state and its churn. Every method
// returns a fresh top-level slice (published slices are never modified).
// Not safe for concurrent use.
type State struct {
	eps      int
	services []model.Service
	gens     [][]int // per service, per endpoint slot: generation
	seq      int64
	rollSvc  int // rolling deploy cursor
	rollSlot int
	rollFrom int
}

// NewState returns n services of eps endpoints each.
func NewState(n, eps int) *State {
	st := &State{eps: eps}
	for i := range n {
		st.services = append(st.services, Service(i, eps))
		st.gens = append(st.gens, make([]int, eps))
	}
	return st
}

// Services returns the current state, to publish.
func (st *State) Services() []model.Service {
	return append([]model.Service(nil), st.services...)
}

// Len is the number of services.
func (st *State) Len() int { return len(st.services) }

// Seq is the sequence number of the last event.
func (st *State) Seq() int64 { return st.seq }

// withEndpoint replaces service i's endpoint j (copying the service).
func (st *State) withEndpoint(i, j int, e model.Endpoint) {
	s := st.services[i]
	s.Endpoints = append([]model.Endpoint(nil), s.Endpoints...)
	s.Endpoints[j] = e
	st.services[i] = s
}

// Flip toggles the health of one endpoint of service i (the next slot in
// turn) and returns the event's sequence number.
func (st *State) Flip(i int) int64 {
	st.seq++
	j := int(st.seq % int64(st.eps))
	e := endpoint(i, j, st.gens[i][j], st.seq)
	if st.services[i].Endpoints[j].Health == model.Healthy {
		e.Health = model.Unhealthy
	}
	st.withEndpoint(i, j, e)
	return st.seq
}

// SetRollFrom makes the rolling deploy start at service from (services
// below it, e.g. the ones every stream watches, are left alone).
func (st *State) SetRollFrom(from int) { st.rollFrom, st.rollSvc = from, from }

// Roll is one rolling-deploy step: the next endpoint slot of the service
// being deployed gets a new pod (a new address); after the last slot the
// deploy moves to the next service. It returns the service and seq.
func (st *State) Roll() (svc int, seq int64) {
	st.seq++
	i, j := st.rollSvc, st.rollSlot
	st.gens[i][j]++
	st.withEndpoint(i, j, endpoint(i, j, st.gens[i][j], st.seq))
	st.rollSlot++
	if st.rollSlot == st.eps {
		st.rollSlot = 0
		st.rollSvc++
		if st.rollSvc >= len(st.services) {
			st.rollSvc = st.rollFrom
		}
	}
	return i, st.seq
}

// Watched returns the service indexes stream s watches: the first common
// services (watched by every stream) and per-common more, spread so that
// every other service is watched by about the same number of streams.
func Watched(s, services, per, common int) []int {
	if per >= services {
		out := make([]int, services)
		for i := range out {
			out[i] = i
		}
		return out
	}
	common = min(common, per)
	out := make([]int, 0, per)
	for i := range common {
		out = append(out, i)
	}
	rest := services - common
	k := per - common
	if rest <= 0 || k <= 0 {
		return out
	}
	// Stream s takes a contiguous run of k services starting at s*k,
	// wrapping: with S streams each service is watched by ≈ S*k/rest.
	start := (s * k) % rest
	for x := range k {
		out = append(out, common+(start+x)%rest)
	}
	return out
}
