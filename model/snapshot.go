package model

import (
	"slices"
	"strings"
	"time"
)

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
	services   []*Service // sorted by hostname; Service searches it
}

// NewSnapshot builds a snapshot. It sorts services by hostname and takes
// ownership of the slice; callers must not change it or its services later.
func NewSnapshot(version uint64, services []*Service) *Snapshot {
	slices.SortFunc(services, func(a, b *Service) int { return strings.Compare(a.Hostname, b.Hostname) })
	return NewSortedSnapshot(version, services)
}

// NewSortedSnapshot is NewSnapshot for services already sorted by
// hostname (not checked): it costs no more than the allocation of the
// Snapshot, whatever the number of services.
func NewSortedSnapshot(version uint64, services []*Service) *Snapshot {
	return &Snapshot{Version: version, services: services}
}

// Services returns every service, sorted by hostname. Do not modify.
func (s *Snapshot) Services() []*Service {
	if s == nil {
		return nil
	}
	return s.services
}

// Service returns the service with the given hostname.
func (s *Snapshot) Service(host string) (*Service, bool) {
	if s == nil {
		return nil, false
	}
	i, ok := slices.BinarySearchFunc(s.services, host, func(s *Service, h string) int { return strings.Compare(s.Hostname, h) })
	if !ok {
		return nil, false
	}
	return s.services[i], true
}

// Len is the number of services.
func (s *Snapshot) Len() int {
	if s == nil {
		return 0
	}
	return len(s.services)
}
