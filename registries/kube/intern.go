package kube

import (
	"hash/maphash"
	"slices"
	"strconv"
	"sync"
	"unique"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// Interning: the informers' transform makes values that repeat across
// cached objects share their memory. Cached objects are never modified,
// and neither are published model values (package model's contract), so
// converted endpoints share them too.

// interning is the tables the transform shares values through (its
// method slim). The watches that run at a time share one (clusters alike
// share label sets and ports), which is dropped when the last of them
// stops: a stopped registry leaves nothing in it.
type interning struct {
	labels  labelSets
	strings stringPointers
	ports   portLists
}

func newInterning() *interning {
	return &interning{labels: labelSets{seed: maphash.MakeSeed()}}
}

// interned is the interning in use and how many hold it.
var interned struct {
	mu    sync.Mutex
	users int
	cur   *interning
}

// acquireInterning returns the interning in use, made if there is none;
// each call must be followed by one releaseInterning once the informers
// that use it stopped.
func acquireInterning() *interning {
	interned.mu.Lock()
	defer interned.mu.Unlock()
	if interned.cur == nil {
		interned.cur = newInterning()
	}
	interned.users++
	return interned.cur
}

// releaseInterning drops the interning in use after its last user.
func releaseInterning() {
	interned.mu.Lock()
	defer interned.mu.Unlock()
	if interned.users--; interned.users == 0 {
		interned.cur = nil
	}
}

// internString returns the canonical copy of s (package unique): the
// namespace of 100,000 pods, their label keys and values, held once.
func internString(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// labelSets hands out one map per distinct label set: the pods of a
// ReplicaSet share one map in the cache, and the endpoints converted from
// them share it too. It remembers the sets it handed out in two
// generations of at most labelSetsGeneration sets each, so that abandoned
// sets (the pod-template-hash of an old rollout) are forgotten; a set
// forgotten while in use only costs a duplicate map.
type labelSets struct {
	mu        sync.Mutex
	seed      maphash.Seed
	cur, prev map[uint64][]map[string]string // by hash of the set
}

const labelSetsGeneration = 1 << 16

// get returns the shared map holding the labels of src that keep accepts
// (nil: all), nil if none. The result must not be modified.
func (s *labelSets) get(src map[string]string, keep func(string) bool) map[string]string {
	var h uint64 // order-independent: the sum of the entries' hashes
	n := 0
	for k, v := range src {
		if keep == nil || keep(k) {
			h += maphash.String(s.seed, k) ^ (maphash.String(s.seed, v) * 0x9e3779b97f4a7c15)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := findSet(s.cur[h], src, keep, n); m != nil {
		return m
	}
	m := findSet(s.prev[h], src, keep, n)
	if m == nil {
		m = make(map[string]string, n)
		for k, v := range src {
			if keep == nil || keep(k) {
				m[internString(k)] = internString(v)
			}
		}
	}
	if s.cur == nil || len(s.cur) >= labelSetsGeneration {
		s.prev, s.cur = s.cur, map[uint64][]map[string]string{}
	}
	s.cur[h] = append(s.cur[h], m)
	return m
}

// findSet returns the map among candidates equal to the n labels of src that
// keep accepts.
func findSet(candidates []map[string]string, src map[string]string, keep func(string) bool, n int) map[string]string {
next:
	for _, m := range candidates {
		if len(m) != n {
			continue
		}
		for k, v := range src {
			if keep != nil && !keep(k) {
				continue
			}
			if w, ok := m[k]; !ok || w != v {
				continue next
			}
		}
		return m
	}
	return nil
}

// stringPointers hands out one *string per value (node names and zones:
// few values, each held by many cached endpoints). It forgets everything
// once it holds maxStringPointers values (nodes come and go).
type stringPointers struct {
	mu sync.Mutex
	m  map[string]*string
}

const maxStringPointers = 1 << 14

// get returns the shared pointer to a copy of *s; nil for nil.
func (p *stringPointers) get(s *string) *string {
	if s == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if v, ok := p.m[*s]; ok {
		return v
	}
	if p.m == nil || len(p.m) >= maxStringPointers {
		p.m = map[string]*string{}
	}
	v := internString(*s)
	p.m[v] = &v
	return &v
}

// portLists hands out one copy per distinct list of EndpointSlice ports
// (the slices of services alike list the same ports). It forgets
// everything once it holds maxPortLists lists.
type portLists struct {
	mu sync.Mutex
	m  map[string][]discoveryv1.EndpointPort // by portsKey
}

const maxPortLists = 1 << 14

// get returns the shared copy of ports (nil for none), its names shared
// through strs; it must not be modified.
func (p *portLists) get(ports []discoveryv1.EndpointPort, strs *stringPointers) []discoveryv1.EndpointPort {
	if len(ports) == 0 {
		return nil
	}
	k := portsKey(ports)
	p.mu.Lock()
	defer p.mu.Unlock()
	if v, ok := p.m[k]; ok {
		return v
	}
	if p.m == nil || len(p.m) >= maxPortLists {
		p.m = map[string][]discoveryv1.EndpointPort{}
	}
	v := slices.Clone(ports)
	for i := range v {
		v[i].Name = strs.get(v[i].Name)
		v[i].AppProtocol = strs.get(v[i].AppProtocol)
		if v[i].Protocol != nil {
			proto := *v[i].Protocol
			v[i].Protocol = &proto
		}
		if v[i].Port != nil {
			n := *v[i].Port
			v[i].Port = &n
		}
	}
	p.m[k] = v
	return v
}

// portsKey renders ports, nil pointers apart from empty values.
func portsKey(ports []discoveryv1.EndpointPort) string {
	var b []byte
	str := func(s *string) {
		if s == nil {
			b = append(b, 0)
			return
		}
		b = append(b, 1)
		b = strconv.AppendQuote(b, *s)
	}
	for _, p := range ports {
		str(p.Name)
		if p.Protocol == nil {
			str(nil)
		} else {
			proto := string(*p.Protocol)
			str(&proto)
		}
		if p.Port == nil {
			b = append(b, 0)
		} else {
			b = strconv.AppendInt(append(b, 1), int64(*p.Port), 10)
		}
		str(p.AppProtocol)
		b = append(b, ';')
	}
	return string(b)
}
