package registrytest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// Timeouts Conformance waits with. SyncTimeout bounds the first sync and
// each mutation (raise it for slow backends before calling Conformance);
// StopTimeout bounds how long Run may take to return after its context
// ends.
var (
	SyncTimeout = 30 * time.Second
	StopTimeout = 5 * time.Second
)

// Mutation is a change to the backend a registry watches, for Conformance.
type Mutation struct {
	Name string
	// Apply changes the backend (edit the file, register an instance...).
	Apply func(t *testing.T)
	// Want reports whether a published list reflects the change.
	Want func(services []model.Service) bool
}

// Conformance checks the registries.Registry contract. newRegistry is
// called once per subtest and must return a registry over the same,
// already populated backend (it should hold at least one service).
// Mutations run in order against one running registry, after the other
// subtests.
//
// It checks that Run
//   - publishes a full state after start, with a non-nil services slice and
//     consistent services (non-empty unique hostnames, non-zero unique port
//     numbers with known protocols, endpoint port names that name a service
//     port, endpoint Source.Registry equal to the shard name);
//   - never says its Run ended (Update.Ended, Permanent: the Runner says
//     that) nor breaks registries.Update's rules (see Sink.Problems);
//   - returns ctx.Err() within StopTimeout after cancel, before and after
//     the first sync;
//   - can be called again on the same value after it returned (supervisors
//     restart a registry by calling Run again) and publishes the same state;
//   - republishes after each mutation;
//   - never modifies a slice after publishing it.
func Conformance(t *testing.T, newRegistry func(t *testing.T) registries.Registry, mutations ...Mutation) {
	t.Helper()

	t.Run("PublishesFullStateAfterStart", func(t *testing.T) {
		sink := NewSink()
		stop := Start(t, newRegistry(t), sink)
		st := sink.WaitFor(t, SyncTimeout, State.Synced)
		checkState(t, sink)
		if len(st.Services) == 0 {
			t.Errorf("first state published no service; Conformance needs a backend with at least one")
		}
		stop()
	})

	t.Run("ReturnsPromptlyWhenCancelledBeforeSync", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		reg := newRegistry(t)
		go func() { done <- reg.Run(ctx, NewSink()) }()
		cancel()
		waitStopped(t, done)
	})

	t.Run("RunsAgainOnTheSameValue", func(t *testing.T) {
		reg := newRegistry(t)
		first := NewSink()
		stop := Start(t, reg, first)
		want := first.WaitFor(t, SyncTimeout, State.Synced).Services
		stop()

		second := NewSink()
		stop = Start(t, reg, second)
		got := second.WaitFor(t, SyncTimeout, State.Synced).Services
		if d := DiffServices(want, got); d != "" {
			t.Errorf("second Run published a different state (-first +second):\n%s", d)
		}
		checkState(t, second)
		stop()
	})

	if len(mutations) == 0 {
		return
	}
	t.Run("RepublishesOnChange", func(t *testing.T) {
		sink := NewSink()
		stop := Start(t, newRegistry(t), sink)
		sink.WaitFor(t, SyncTimeout, State.Synced)
		for _, m := range mutations {
			t.Logf("mutation %q", m.Name)
			m.Apply(t)
			sink.WaitFor(t, SyncTimeout, func(s State) bool { return m.Want(s.Services) })
		}
		checkState(t, sink)
		stop()
	})
}

// Start runs reg.Run(ctx, sink) in a goroutine and returns stop, which
// cancels ctx and fails t unless Run returns ctx.Err() within StopTimeout.
// stop is also registered with t.Cleanup; calling it twice is harmless.
func Start(t testing.TB, reg registries.Registry, sink registries.Sink) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- reg.Run(ctx, sink) }()
	stopped := false
	stop = func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		waitStopped(t, done)
	}
	t.Cleanup(stop)
	return stop
}

func waitStopped(t testing.TB, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v after cancel, want context.Canceled", err)
		}
	case <-time.After(StopTimeout):
		t.Fatalf("Run did not return within %v after its context was cancelled", StopTimeout)
	}
}

// checkState checks every call sink recorded against the contract.
func checkState(t testing.TB, sink *Sink) {
	t.Helper()
	for _, p := range sink.Problems() {
		t.Error(p)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for _, shard := range sink.order {
		r := sink.shards[shard]
		for i, u := range r.Updates {
			if u.Ended || u.Permanent {
				t.Errorf("%s: update #%d says the Run ended; only the Runner says so, a registry returns from Run", shard, i+1)
			}
		}
		for i, p := range r.published {
			for _, err := range CheckServices(shard, p.services) {
				t.Errorf("%s: state #%d: %v", shard, i+1, err)
			}
		}
	}
}

// CheckServices returns what is inconsistent in a list a registry
// publishes under shard (see Conformance).
func CheckServices(shard model.ShardKey, services []model.Service) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	hosts := map[string]bool{}
	for _, s := range services {
		if s.Hostname == "" {
			bad("a service has no hostname")
		}
		if hosts[s.Hostname] {
			bad("%s: published twice", s.Hostname)
		}
		hosts[s.Hostname] = true
		names := map[string]bool{}
		numbers := map[uint32]bool{}
		for _, p := range s.Ports {
			if p.Number == 0 {
				bad("%s: port %q has number 0", s.Hostname, p.Name)
			}
			if numbers[p.Number] {
				bad("%s: port %d declared twice", s.Hostname, p.Number)
			}
			numbers[p.Number] = true
			if names[p.Name] && p.Name != "" {
				bad("%s: port name %q declared twice", s.Hostname, p.Name)
			}
			names[p.Name] = true
			if _, err := model.ParseProtocol(string(p.Protocol)); err != nil {
				bad("%s: port %d: %v", s.Hostname, p.Number, err)
			}
		}
		for _, e := range s.Endpoints {
			for name := range e.Ports {
				if !names[name] {
					bad("%s: endpoint %s: port %q is not a service port", s.Hostname, e.Address, name)
				}
			}
			if e.Source.Registry != shard.Name {
				bad("%s: endpoint %s: Source.Registry is %q, want %q", s.Hostname, e.Address, e.Source.Registry, shard.Name)
			}
		}
	}
	return errs
}
