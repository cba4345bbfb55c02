// Package registrytest helps test registries: a Sink that records every
// Publish (no policy: what the aggregator makes of updates is tested in
// aggregate) and that tests wait on, comparisons of service lists that ignore order, and Conformance,
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

// Status is what one Publish said about the backend, as the registry (or
// its Runner) said it: no policy is applied (the aggregator derives what
// a registry shows from these).
type Status struct {
	Err     string // the backend fails: why ("" when healthy)
	Invalid bool   // with Err: the backend answered with invalid data
	// Ended and Permanent: the Runner said the Run ended (Permanent: with
	// an error marked registries.Permanent).
	Ended, Permanent bool
}

// Failing reports whether the update said the backend fails.
func (s Status) Failing() bool { return s.Err != "" }

// StatusOf is the Status an update says.
func StatusOf(u registries.Update) Status {
	return Status{Err: u.Err, Invalid: u.Invalid, Ended: u.Ended, Permanent: u.Permanent}
}

// State is what a Sink recorded for one shard.
type State struct {
	Shard model.ShardKey
	// Services and Rejected are those of the last Publish with a state;
	// both nil before the first.
	Services []model.Service
	Rejected []model.Rejection
	// Complete is the last state's Update.Complete.
	Complete bool
	// Replaces counts Publish calls with a state.
	Replaces int
	// Reports is the Status of every Publish other than a state with a
	// healthy backend (every condition-only update, and every state
	// published while the backend fails), oldest first.
	Reports []Status
	// Status is what the last Publish said (zero before the first).
	Status Status
	// History is the Status of every Publish, oldest first.
	History []Status
	// Updates is every Publish, oldest first, as received.
	Updates []registries.Update
}

// Synced reports whether a state was published at least once.
func (s State) Synced() bool { return s.Replaces > 0 }

// Healthy reports whether something was published and the last Publish
// said the backend is healthy.
func (s State) Healthy() bool { return len(s.History) > 0 && !s.Status.Failing() }

// Failing reports whether the last Publish said the backend fails, not
// for good (a Degraded registry, as the aggregator shows it).
func (s State) Failing() bool { return s.Status.Failing() && !s.Status.Permanent }

// Failed reports whether the last Publish said the Run ended with a
// Permanent error.
func (s State) Failed() bool { return s.Status.Permanent }

// Sink is a registries.Sink that records every Publish, and nothing else:
// it applies no policy. It is safe for concurrent use; the zero value is
// not usable, call NewSink.
type Sink struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every call
	shards  map[model.ShardKey]*shardRecord
	order   []model.ShardKey
}

type shardRecord struct {
	State
	// published keeps each state's slices with a deep copy taken at the
	// time, to detect a registry that changes what it already published.
	published []published
	nilLists  int // states whose services slice was nil
	// contract violations of the Update's own rules
	misuse []string
}

type published struct {
	services, servicesCopy []model.Service
	rejected, rejectedCopy []model.Rejection
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

// Publish implements registries.Sink: it records u.
func (s *Sink) Publish(shard model.ShardKey, u registries.Update) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.record(shard)
	st := StatusOf(u)
	r.Updates = append(r.Updates, u)
	r.Status = st
	r.History = append(r.History, st)
	if !u.HasState || st.Failing() {
		r.Reports = append(r.Reports, st)
	}
	n := len(r.Updates)
	switch {
	case u.Invalid && u.Err == "":
		r.misuse = append(r.misuse, fmt.Sprintf("update #%d is Invalid without an Err", n))
	case u.Permanent && !u.Ended:
		r.misuse = append(r.misuse, fmt.Sprintf("update #%d is Permanent without Ended", n))
	case !u.HasState && (u.Complete || u.Services != nil || u.Rejected != nil):
		r.misuse = append(r.misuse, fmt.Sprintf("update #%d carries state fields without HasState", n))
	}
	if u.HasState {
		r.Services, r.Rejected, r.Complete = u.Services, u.Rejected, u.Complete
		r.Replaces++
		if u.Services == nil {
			r.nilLists++
		}
		r.published = append(r.published, published{
			services: u.Services, servicesCopy: CloneServices(u.Services),
			rejected: u.Rejected, rejectedCopy: slices.Clone(u.Rejected),
		})
	}
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
	st.Updates = slices.Clone(st.Updates)
	return st
}

// Last returns the services and rejections of shard's last state, and
// whether there was one.
func (s *Sink) Last(shard model.ShardKey) ([]model.Service, []model.Rejection, bool) {
	st := s.State(shard)
	return st.Services, st.Rejected, st.Synced()
}

// Statuses returns shard's Reports (see State), oldest first.
func (s *Sink) Statuses(shard model.ShardKey) []Status {
	return s.State(shard).Reports
}

// Replaced returns the services of every state published for shard,
// oldest first, as copied when it was published: Replaced(shard)[i] is
// the services of state number i+1 (State.Replaces counts them), so
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

// Replaces counts the states published for shard.
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
// WaitForShard then). cond is re-evaluated after every Publish,
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
	return fmt.Sprintf("shard %s: status %+v, %d replaces (last complete %v), %d services, %d rejected, reports %v",
		s.Shard, s.Status, s.Replaces, s.Complete, len(s.Services), len(s.Rejected), s.Reports)
}

// Problems lists contract violations the sink saw: a state with a nil
// services slice, published slices changed afterwards, and updates that
// break registries.Update's rules (Invalid without Err, Permanent without
// Ended, state fields without HasState). Conformance
// checks it; other tests may too.
func (s *Sink) Problems() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, shard := range s.order {
		r := s.shards[shard]
		if r.nilLists > 0 {
			out = append(out, fmt.Sprintf("%s: %d states passed a nil services slice; pass an empty one for none", shard, r.nilLists))
		}
		for i, p := range r.published {
			if !reflect.DeepEqual(p.services, p.servicesCopy) || !reflect.DeepEqual(p.rejected, p.rejectedCopy) {
				out = append(out, fmt.Sprintf("%s: the slices of state #%d were modified after publishing", shard, i+1))
			}
		}
		for _, m := range r.misuse {
			out = append(out, fmt.Sprintf("%s: %s", shard, m))
		}
	}
	return out
}

// ChangedSince returns a channel closed at the next Publish;
// useful to wait for "something happened" with a select of one's own.
func (s *Sink) ChangedSince() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}
