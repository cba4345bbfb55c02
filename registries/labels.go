package registries

import (
	"hash/maphash"
	"maps"
	"sync"

	"github.com/meshfed/meshfed/model"
)

// LabelSets shares equal label maps among a registry's endpoints. The
// instances of a service, and often of many services, carry the same
// labels (version, application, interface, zone...); a map per endpoint
// costs a few hundred bytes, which at 100,000 endpoints is most of what a
// registry holds. Share returns the map it holds equal to the one given,
// so a registry keeps one map per distinct set.
//
// The maps Share returns are shared: never modify one (the model's
// contract for every value a registry publishes). A LabelSets holds at
// most Max sets; when it is full it forgets them all and starts over
// (maps it handed out stay valid), so its own memory is bounded whatever
// the catalog. The zero value is ready to use (Max 65,536); it is safe
// for concurrent use.
type LabelSets struct {
	// Max bounds the sets held; 0 means 65,536.
	Max int

	mu   sync.Mutex
	seed maphash.Seed
	sets map[uint64][]map[string]string
	n    int
}

// Share returns the map held equal to m, or holds m and returns it. A nil
// or empty m returns nil.
func (s *LabelSets) Share(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sets == nil {
		s.seed = maphash.MakeSeed()
		s.sets = map[uint64][]map[string]string{}
	}
	// Order-independent: the sum of each pair's hash.
	var h maphash.Hash
	h.SetSeed(s.seed)
	var sum uint64
	for k, v := range m {
		h.Reset()
		h.WriteString(k)
		h.WriteByte(0)
		h.WriteString(v)
		sum += h.Sum64()
	}
	for _, held := range s.sets[sum] {
		if maps.Equal(held, m) {
			return held
		}
	}
	limit := s.Max
	if limit <= 0 {
		limit = 1 << 16
	}
	if s.n >= limit {
		clear(s.sets)
		s.n = 0
	}
	s.sets[sum] = append(s.sets[sum], m)
	s.n++
	return m
}

// ShareServices replaces the labels of every endpoint of services with
// the shared map equal to them. For services just converted, not yet
// handed out.
func (s *LabelSets) ShareServices(services []model.Service) {
	for i := range services {
		for j := range services[i].Endpoints {
			e := &services[i].Endpoints[j]
			e.Labels = s.Share(e.Labels)
		}
	}
}
