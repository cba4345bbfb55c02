package aggregate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// start runs a's Serve until the test ends.
func start(t *testing.T, a *Aggregator) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Serve returned %v, want context.Canceled", err)
		}
	})
}

// newRunning builds an aggregator with a fake clock and no debounce, and
// runs it.
func newRunning(t *testing.T, clock *fakeClock, regs ...RegistryOptions) *Aggregator {
	t.Helper()
	a := New(Options{Registries: regs, Now: clock.Now})
	start(t, a)
	return a
}

// advance moves the fake clock and makes the Serve loop look at it.
func advance(a *Aggregator, c *fakeClock, d time.Duration) {
	c.Advance(d)
	a.wake()
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func waitVersion(t *testing.T, a *Aggregator, v uint64) *model.Snapshot {
	t.Helper()
	eventually(t, fmt.Sprintf("snapshot version %d", v), func() bool { return a.Snapshot().Version >= v })
	return a.Snapshot()
}

func waitState(t *testing.T, a *Aggregator, name string, want State) RegistryStatus {
	t.Helper()
	var st RegistryStatus
	eventually(t, fmt.Sprintf("registry %s %s", name, want), func() bool {
		st, _ = a.Registry(name)
		return st.State == want
	})
	return st
}

// reg is a registry's options; kubernetes is a multicluster kind, as its
// registries.Kind declares.
func reg(name, kind, domain string) RegistryOptions {
	return RegistryOptions{Common: registries.Common{Name: name, Kind: kind, Domain: domain}, Multicluster: kind == "kubernetes"}
}

func shard(o RegistryOptions) model.ShardKey { return o.Shard() }

// svc builds a service with one HTTP port 80 and an endpoint per address.
func svc(host string, addrs ...string) model.Service {
	s := model.Service{Hostname: host, Ports: []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}}}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, model.Endpoint{Address: a})
	}
	return s
}

// addrs lists the endpoint addresses of host in snap ("" entries for a
// missing host are not possible: missing gives nil).
func addrs(snap *model.Snapshot, host string) []string {
	s, ok := snap.Service(host)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(s.Endpoints))
	for _, e := range s.Endpoints {
		out = append(out, e.Address)
	}
	return out
}

func ips(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.0.0.%d", i+1)
	}
	return out
}

func hasConflict(cs []Conflict, category, subjectOrHost string) bool {
	for _, c := range cs {
		if c.Category == category && (subjectOrHost == "" || c.Subject == subjectOrHost || c.Host == subjectOrHost) {
			return true
		}
	}
	return false
}

// status is a registry's condition in the terms the tests were written
// in: Synced (healthy), Degraded (failing, Invalid or not) or Failed (the
// Run ended with a Permanent error).
type status struct {
	State   State
	Err     string
	Invalid bool
}

// update is the registries.Update a registry publishes for st, without a
// state.
func (st status) update() registries.Update {
	u := registries.Update{Condition: registries.Condition{Err: st.Err, Invalid: st.Invalid}}
	if st.State == Failed {
		u.Ended, u.Permanent = true, true
	}
	return u
}

// replace publishes a complete state with a healthy backend.
func replace(s registries.Sink, shard model.ShardKey, services []model.Service, rejected []model.Rejection) {
	s.Publish(shard, registries.FullState(services, rejected))
}

// replaceStatus publishes a complete state with st's condition.
func replaceStatus(s registries.Sink, shard model.ShardKey, services []model.Service, rejected []model.Rejection, st status) {
	u := st.update()
	u.HasState, u.Services, u.Rejected, u.Complete = true, services, rejected, true
	s.Publish(shard, u)
}

// report publishes st without a state.
func report(s registries.Sink, shard model.ShardKey, st status) { s.Publish(shard, st.update()) }

// inputOf is the registry's input not yet taken by a Serve loop (nil if
// none): with no loop running, the latest state applied.
func (a *Aggregator) inputOf(name string) *input {
	a.mu.Lock()
	defer a.mu.Unlock()
	if rs := a.regs[name]; rs != nil {
		return rs.pending
	}
	return nil
}
