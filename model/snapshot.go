package model

import (
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// chunkSize is how many services a run of a snapshot's list holds when
// NewSortedSnapshot cuts it; Next cuts a run that grew past twice that.
const chunkSize = 256

// Snapshot is an immutable, versioned view of every merged service.
//
// Between two snapshots from the same aggregator, a service that did not
// change is the same *Service pointer; translation relies on that to reuse
// resources it already built.
type Snapshot struct {
	// Version increases with every snapshot an aggregator publishes.
	Version uint64
	// Config is the user traffic configuration in force (nil: none). It
	// flows beside the services through the aggregator's debounce.
	Config *ConfigSnapshot
	// Changed is when the aggregator received the oldest registry update
	// this snapshot is the first to include (for a snapshot that a timer
	// caused, such as a hold-down or outage expiry, when that fired). The
	// xDS server measures convergence from it. Zero when unknown.
	Changed time.Time
	// Restored names the registries whose served state was restored from
	// the state directory and not yet superseded by their own (sorted;
	// nil when none). The xDS server holds reconnecting clients while it
	// is not empty (docs/architecture.md §3.4.1).
	Restored []string
	// DeltaFrom and DeltaHosts, when DeltaFrom is not 0: the services of
	// this snapshot are those of version DeltaFrom (by pointer) except
	// at DeltaHosts (sorted hostnames; one absent from this snapshot was
	// removed). A consumer that holds version DeltaFrom may look at those
	// hosts only (xds/translate does). Zero DeltaFrom: not known.
	DeltaFrom  uint64
	DeltaHosts []string
	// The services sorted by hostname, in runs (none empty) that Next
	// shares with the snapshot it makes: a change copies the runs it
	// touches and the list of runs, not every service.
	chunks [][]*Service
	n      int
	flat   atomic.Pointer[[]*Service] // Services, once asked for
}

// NewSnapshot builds a snapshot. It sorts services by hostname and takes
// ownership of the slice; callers must not change it or its services later.
func NewSnapshot(version uint64, services []*Service) *Snapshot {
	slices.SortFunc(services, func(a, b *Service) int { return strings.Compare(a.Hostname, b.Hostname) })
	return NewSortedSnapshot(version, services)
}

// NewSortedSnapshot is NewSnapshot for services already sorted by
// hostname (not checked); it takes ownership of the slice.
func NewSortedSnapshot(version uint64, services []*Service) *Snapshot {
	s := &Snapshot{Version: version, n: len(services)}
	s.chunks = cut(nil, services)
	s.flat.Store(&services)
	return s
}

// cut appends services to chunks in runs of chunkSize (capacity-limited,
// so that no run's append reaches the next).
func cut(chunks [][]*Service, services []*Service) [][]*Service {
	for i := 0; i < len(services); i += chunkSize {
		j := min(i+chunkSize, len(services))
		chunks = append(chunks, services[i:j:j])
	}
	return chunks
}

// Next returns the snapshot of version whose services are those of s
// except at the hostnames of changed (sorted, distinct): each is
// lookup's service for it, or absent when lookup returns nil. It copies
// the runs of the list that hold a changed hostname and the list of runs
// (about n/256 entries), so a change of k hostnames costs
// O(k·256 + n/256), not a copy of every service. Fields other than the
// services are left zero.
func (s *Snapshot) Next(version uint64, changed []string, lookup func(host string) *Service) *Snapshot {
	out := &Snapshot{Version: version, n: s.Len()}
	var old [][]*Service
	if s != nil {
		old = s.chunks
	}
	if len(changed) == 0 {
		out.chunks = old
		if s != nil {
			out.flat.Store(s.flat.Load())
		}
		return out
	}
	chunks := make([][]*Service, 0, len(old)+1)
	ci, k := 0, 0
	for k < len(changed) {
		// The run a hostname belongs to: the first whose last hostname is
		// not smaller; past the last, the last.
		i := ci + sort.Search(len(old)-ci, func(i int) bool {
			c := old[ci+i]
			return c[len(c)-1].Hostname >= changed[k]
		})
		if i == len(old) && i > 0 {
			i--
		}
		chunks = append(chunks, old[ci:min(i, len(old))]...)
		var run []*Service
		end := len(changed)
		if i < len(old) {
			run = old[i]
			if i < len(old)-1 {
				end = k + sort.SearchStrings(changed[k:], run[len(run)-1].Hostname)
				if end < len(changed) && changed[end] == run[len(run)-1].Hostname {
					end++
				}
			}
		}
		merged := mergeRun(run, changed[k:end], lookup)
		out.n += len(merged) - len(run)
		if len(merged) > 2*chunkSize {
			chunks = cut(chunks, merged)
		} else if len(merged) > 0 {
			chunks = append(chunks, merged)
		}
		ci, k = min(i+1, len(old)), end
	}
	out.chunks = append(chunks, old[ci:]...)
	return out
}

// mergeRun is run with the hostnames of hosts (sorted) replaced, dropped
// or inserted as lookup says.
func mergeRun(run []*Service, hosts []string, lookup func(string) *Service) []*Service {
	out := make([]*Service, 0, len(run)+len(hosts))
	i := 0
	for _, h := range hosts {
		j, found := slices.BinarySearchFunc(run[i:], h, func(s *Service, h string) int { return strings.Compare(s.Hostname, h) })
		out = append(out, run[i:i+j]...)
		i += j
		if found {
			i++
		}
		if m := lookup(h); m != nil {
			out = append(out, m)
		}
	}
	return append(out, run[i:]...)
}

// Services returns every service, sorted by hostname. Do not modify. The
// first call on a snapshot made by Next copies the list (O(n)).
func (s *Snapshot) Services() []*Service {
	if s == nil {
		return nil
	}
	if p := s.flat.Load(); p != nil {
		return *p
	}
	out := make([]*Service, 0, s.n)
	for _, c := range s.chunks {
		out = append(out, c...)
	}
	s.flat.Store(&out) // another caller may store an equal list first
	return out
}

// Service returns the service with the given hostname.
func (s *Snapshot) Service(host string) (*Service, bool) {
	if s == nil {
		return nil, false
	}
	i := sort.Search(len(s.chunks), func(i int) bool {
		c := s.chunks[i]
		return c[len(c)-1].Hostname >= host
	})
	if i == len(s.chunks) {
		return nil, false
	}
	c := s.chunks[i]
	j, ok := slices.BinarySearchFunc(c, host, func(s *Service, h string) int { return strings.Compare(s.Hostname, h) })
	if !ok {
		return nil, false
	}
	return c[j], true
}

// Len is the number of services.
func (s *Snapshot) Len() int {
	if s == nil {
		return 0
	}
	return s.n
}
