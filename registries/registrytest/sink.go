// Package registrytest helps test registries: a recording Sink that tests
// wait on, comparisons of service lists that ignore order, and Conformance,
// the checks every Registry must pass.
package registrytest

import (
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// State is what a Sink recorded for one shard.
type State struct {
	Shard model.ShardKey
	// Services and Rejected are the arguments of the last Replace; both nil
	// before the first Replace.
	Services []model.Service
	Rejected []model.Rejection
	// Replaces counts Replace and ReplaceStatus calls.
	Replaces int
	// Reports is every Report, and the status of every ReplaceStatus
	// that was not Synced, oldest first.
	Reports []registries.Status
	// Status is the shard's status as the aggregator derives it: Starting
	// before anything happened, Synced after a Replace, else the last
	// Report or ReplaceStatus.
	Status registries.Status
	// History is every Status the shard passed through, oldest first: one
	// per Replace (Synced), ReplaceStatus and Report. A Replace followed
	// by a Report of Degraded shows as a brief Synced here.
	History []registries.Status
}

// Synced reports whether the shard was replaced at least once.
func (s State) Synced() bool { return s.Replaces > 0 }

// Sink is a registries.Sink that records every call. It is safe for
// concurrent use; the zero value is not usable, call NewSink.
type Sink struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every call
	shards  map[model.ShardKey]*shardRecord
	order   []model.ShardKey
}

type shardRecord struct {
	State
	// published keeps each Replace's slices with a deep copy taken at the
	// time, to detect a registry that changes what it already published.
	published []published
	nilLists  int // Replace calls whose services slice was nil
	seeded    bool
}

type published struct {
	services, servicesCopy []model.Service
	rejected, rejectedCopy []model.Rejection
}

var _ registries.ServingSink = (*Sink)(nil)

// Serving implements registries.ServingSink as the aggregator does: a
// shard is served once it had a Replace (an earlier Run's state) or was
// seeded (a state restored from disk), so a registry's partial first
// state is held back; a fresh shard is not served.
func (s *Sink) Serving(shard model.ShardKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.shards[shard]
	return ok && (r.Replaces > 0 || r.seeded)
}

// Seed marks shard as served without recording a Replace, as a state
// restored from state.dir is: the next Run's partial first state is held.
func (s *Sink) Seed(shard model.ShardKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record(shard).seeded = true
}

// NewSink returns an empty recording sink.
func NewSink() *Sink {
	return &Sink{changed: make(chan struct{}), shards: map[model.ShardKey]*shardRecord{}}
}

func (s *Sink) record(shard model.ShardKey) *shardRecord {
	r, ok := s.shards[shard]
	if !ok {
		r = &shardRecord{State: State{Shard: shard}}
		s.shards[shard] = r
		s.order = append(s.order, shard)
	}
	return r
}

func (s *Sink) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Replace implements registries.Sink.
func (s *Sink) Replace(shard model.ShardKey, services []model.Service, rejected []model.Rejection) {
	s.ReplaceStatus(shard, services, rejected, registries.Status{State: registries.Synced})
}

// ReplaceStatus implements registries.Sink. A status other than Synced is
// recorded like a Report (in Reports and Status) of a Degraded status.
func (s *Sink) ReplaceStatus(shard model.ShardKey, services []model.Service, rejected []model.Rejection, status registries.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.record(shard)
	r.Services, r.Rejected = services, rejected
	r.Replaces++
	r.Status = registries.Status{State: registries.Synced}
	if status.State != registries.Synced {
		status.State = registries.Degraded
		r.Status = status
		r.Reports = append(r.Reports, status)
	}
	r.History = append(r.History, r.Status)
	if services == nil {
		r.nilLists++
	}
	r.published = append(r.published, published{
		services: services, servicesCopy: CloneServices(services),
		rejected: rejected, rejectedCopy: slices.Clone(rejected),
	})
	s.notify()
}

// Report implements registries.Sink.
func (s *Sink) Report(shard model.ShardKey, status registries.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.record(shard)
	r.Reports = append(r.Reports, status)
	r.Status = status
	r.History = append(r.History, status)
	s.notify()
}

// Shards lists the shards the sink heard of, in order of first call.
func (s *Sink) Shards() []model.ShardKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.order)
}

// State returns a copy of what was recorded for shard (a zero State with
// Shard set if nothing was).
func (s *Sink) State(shard model.ShardKey) State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stateLocked(shard)
}

func (s *Sink) stateLocked(shard model.ShardKey) State {
	r, ok := s.shards[shard]
	if !ok {
		return State{Shard: shard}
	}
	st := r.State
	st.Reports = slices.Clone(st.Reports)
	st.History = slices.Clone(st.History)
	return st
}

// Last returns the services and rejections of shard's last Replace, and
// whether there was one.
func (s *Sink) Last(shard model.ShardKey) ([]model.Service, []model.Rejection, bool) {
	st := s.State(shard)
	return st.Services, st.Rejected, st.Synced()
}

// Statuses returns every status reported for shard, oldest first.
func (s *Sink) Statuses(shard model.ShardKey) []registries.Status {
	return s.State(shard).Reports
}

// Replaced returns what every Replace and ReplaceStatus of shard
// published, oldest first, as copied when it was called: Replaced(shard)[i]
// is the services of Replace number i+1 (State.Replaces counts them), so
// Replaced(shard)[before.Replaces:] is everything published since a State
// before was taken.
func (s *Sink) Replaced(shard model.ShardKey) [][]model.Service {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.shards[shard]
	if !ok {
		return nil
	}
	out := make([][]model.Service, len(r.published))
	for i, p := range r.published {
		out[i] = p.servicesCopy
	}
	return out
}

// Replaces counts the Replace calls for shard.
func (s *Sink) Replaces(shard model.ShardKey) int { return s.State(shard).Replaces }

// only returns the state of the sink's one shard (zero before any call);
// ok is false if the sink heard of more than one shard.
func (s *Sink) only() (State, bool) {
	switch len(s.order) {
	case 0:
		return State{}, true
	case 1:
		return s.stateLocked(s.order[0]), true
	}
	return State{}, false
}

// WaitFor waits until cond holds for the sink's only shard and returns the
// state it held for. Before the first call cond sees a zero State. It fails
// t if timeout passes first, or if the sink heard of several shards (use
// WaitForShard then). cond is re-evaluated after every Replace and Report,
// never on a timer.
func (s *Sink) WaitFor(t testing.TB, timeout time.Duration, cond func(State) bool) State {
	t.Helper()
	return s.wait(t, timeout, cond, func() (State, error) {
		st, ok := s.only()
		if !ok {
			return st, fmt.Errorf("sink heard of several shards %v; use WaitForShard", s.order)
		}
		return st, nil
	})
}

// WaitForShard is WaitFor for one shard of a sink that hears of several.
func (s *Sink) WaitForShard(t testing.TB, shard model.ShardKey, timeout time.Duration, cond func(State) bool) State {
	t.Helper()
	return s.wait(t, timeout, cond, func() (State, error) { return s.stateLocked(shard), nil })
}

func (s *Sink) wait(t testing.TB, timeout time.Duration, cond func(State) bool, get func() (State, error)) State {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		st, err := get()
		changed := s.changed
		s.mu.Unlock()
		if err != nil {
			t.Fatalf("registrytest: %v", err)
			return st
		}
		if cond(st) {
			return st
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("registrytest: condition not met within %v; last state: %s", timeout, st)
			return st
		}
	}
}

// String summarizes the state for failure messages.
func (s State) String() string {
	return fmt.Sprintf("shard %s: status %s %q, %d replaces, %d services, %d rejected, reports %v",
		s.Shard, s.Status.State, s.Status.Err, s.Replaces, len(s.Services), len(s.Rejected), s.Reports)
}

// Problems lists contract violations the sink saw: Replace with a nil
// services slice, and published slices changed after Replace. Conformance
// checks it; other tests may too.
func (s *Sink) Problems() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, shard := range s.order {
		r := s.shards[shard]
		if r.nilLists > 0 {
			out = append(out, fmt.Sprintf("%s: %d Replace calls passed a nil services slice; pass an empty one for none", shard, r.nilLists))
		}
		for i, p := range r.published {
			if !reflect.DeepEqual(p.services, p.servicesCopy) || !reflect.DeepEqual(p.rejected, p.rejectedCopy) {
				out = append(out, fmt.Sprintf("%s: the slices of Replace #%d were modified after publishing", shard, i+1))
			}
		}
	}
	return out
}

// ChangedSince returns a channel closed at the next Replace or Report;
// useful to wait for "something happened" with a select of one's own.
func (s *Sink) ChangedSince() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}
