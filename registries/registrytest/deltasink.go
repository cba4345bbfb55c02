package registrytest

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// DeltaSink is a registries.DeltaSink for one registry: it takes deltas
// (Update.Delta) as the aggregator does, applies each state to the
// services it holds by hostname, and records what every state carried,
// so that a test can count what one change hands on. Safe for concurrent
// use.
type DeltaSink struct {
	mu       sync.Mutex
	services map[string]model.Service
	states   []string
	changed  chan struct{} // one token: a state was applied
}

// NewDeltaSink returns an empty DeltaSink.
func NewDeltaSink() *DeltaSink {
	return &DeltaSink{services: map[string]model.Service{}, changed: make(chan struct{}, 1)}
}

// Publish implements registries.Sink.
func (s *DeltaSink) Publish(_ model.ShardKey, u registries.Update) {
	if !u.HasState {
		return
	}
	kind := "full"
	if u.Delta {
		kind = "delta"
	}
	var b strings.Builder
	b.WriteString(kind)
	s.mu.Lock()
	if !u.Delta {
		clear(s.services)
	}
	for _, svc := range u.Services {
		s.services[svc.Hostname] = svc
		b.WriteString(" " + svc.Hostname)
	}
	for _, h := range u.Removed {
		delete(s.services, h)
		b.WriteString(" -" + h)
	}
	s.states = append(s.states, b.String())
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// TakesDelta implements registries.DeltaSink.
func (s *DeltaSink) TakesDelta() bool { return true }

// Take returns what each state published since the last call carried:
// "full" or "delta", then its services' hostnames, then "-host" for each
// hostname removed.
func (s *DeltaSink) Take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.states
	s.states = nil
	return st
}

// WaitFor waits until cond holds for the services held (by hostname; cond
// must not keep or modify the map), failing t after timeout.
func (s *DeltaSink) WaitFor(t testing.TB, timeout time.Duration, what string, cond func(map[string]model.Service) bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		ok := cond(s.services)
		s.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-s.changed:
		case <-deadline.C:
			t.Fatalf("%s not seen within %v", what, timeout)
			return
		}
	}
}
