package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// memRegistry is an in-memory registry for the KS harness's own test: it
// publishes its services once at the start and again after every change,
// and for odd changes before the change call returns (as an informer may).
type memRegistry struct {
	mu       sync.Mutex
	services []model.Service
	changes  chan struct{}
}

func (m *memRegistry) state() []model.Service {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := slices.Clone(m.services)
	for i := range out {
		out[i].Endpoints = slices.Clone(out[i].Endpoints)
	}
	return out
}

func (m *memRegistry) Run(ctx context.Context, sink registries.Sink) error {
	shard := model.ShardKey{Kind: "mem", Name: "mem"}
	sink.Publish(shard, registries.FullState(m.state(), nil))
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.changes:
			sink.Publish(shard, registries.FullState(m.state(), nil))
		}
	}
}

func TestRunKindScale(t *testing.T) {
	t.Parallel()
	const services = 30
	row := KindScaleRow{Kind: "mem", Goal: time.Second, Setup: func(t testing.TB, n int) KindScaleTarget {
		m := &memRegistry{changes: make(chan struct{})}
		for i := range n {
			m.services = append(m.services, model.Service{Hostname: fmt.Sprintf("s%d.mem", i), Ports: []model.Port{{Name: "http", Number: 80}},
				Endpoints: []model.Endpoint{{Address: "10.0.0.1"}, {Address: "10.0.0.2"}}})
		}
		return KindScaleTarget{Services: n, Endpoints: 2 * n, Run: RegistryRun(m),
			Change: func(ctx context.Context, c int) (ScaleChange, error) {
				i, addr := c%n, fmt.Sprintf("10.1.0.%d", c)
				m.mu.Lock()
				m.services[i].Endpoints = append(m.services[i].Endpoints, model.Endpoint{Address: addr})
				m.mu.Unlock()
				if c%2 == 1 {
					m.changes <- struct{}{} // published before Change returns
				} else {
					go func() { m.changes <- struct{}{} }()
				}
				return ScaleChange{Host: m.services[i].Hostname, Value: addr}, nil
			}}
	}}
	res := RunKindScale(t, row, services, KindScaleOptions{Changes: 6, SyncTimeout: time.Minute, ChangeTimeout: time.Minute})
	if res.Services != services || res.Endpoints != 2*services || res.Lost != 0 || res.Change.N != 6 || res.Publishes != 6 {
		t.Errorf("result %+v: want %d services, %d endpoints, 6 changes seen in 6 publishes", res, services, 2*services)
	}
}

// TestKindScaleObserved: with an observer, the row reports the server's
// delay and the measured code's own part change by change, and its goal
// becomes the server's p99 + OwnGoal.
func TestKindScaleObserved(t *testing.T) {
	t.Parallel()
	const delay = 100 * time.Millisecond
	m := &memRegistry{changes: make(chan struct{})}
	for i := range 5 {
		m.services = append(m.services, model.Service{Hostname: fmt.Sprintf("s%d.mem", i), Ports: []model.Port{{Name: "http", Number: 80}},
			Endpoints: []model.Endpoint{{Address: "10.0.0.1"}}})
	}
	var mu sync.Mutex
	seen := map[string]time.Time{} // when each change was made
	row := KindScaleRow{Kind: "mem", Goal: time.Hour, OwnGoal: 50 * time.Millisecond, Setup: func(t testing.TB, n int) KindScaleTarget {
		return KindScaleTarget{Services: n, Endpoints: n, Run: RegistryRun(m),
			Change: func(ctx context.Context, c int) (ScaleChange, error) {
				i, addr := c%n, fmt.Sprintf("10.1.0.%d", c)
				at := time.Now()
				mu.Lock()
				seen[addr] = at
				mu.Unlock()
				m.mu.Lock()
				m.services[i].Endpoints = append(m.services[i].Endpoints, model.Endpoint{Address: addr})
				m.mu.Unlock()
				m.changes <- struct{}{}
				return ScaleChange{Host: m.services[i].Hostname, Value: addr, Stamp: at}, nil
			},
			// The "server" shows each change delay after it was made,
			// but change 2 never.
			Observed: func(c ScaleChange) (time.Time, bool) {
				mu.Lock()
				defer mu.Unlock()
				at, ok := seen[c.Value]
				return at.Add(delay), ok && c.Value != "10.1.0.2"
			}}
	}}
	res := RunKindScale(t, row, 5, KindScaleOptions{Changes: 4, SyncTimeout: time.Minute, ChangeTimeout: time.Minute})
	if res.Change.N != 4 || res.Server.N != 3 || res.Own.N != 3 || res.Unobserved != 1 {
		t.Fatalf("result %+v: want 4 changes seen, 3 observed, 1 not", res)
	}
	if res.Server.P50 != ms(delay) || res.Server.P99 != ms(delay) {
		t.Errorf("server delay %+v, want %v every time", res.Server, delay)
	}
	// Published at once, the changes reach the sink before the "server"
	// shows them: the own part is negative, by at most the delay.
	if res.Own.Max >= 0 || res.Own.P50 < -ms(delay) {
		t.Errorf("own part %+v, want in [-%v, 0)", res.Own, delay)
	}
	if want := int64(delay + 50*time.Millisecond); res.Goal != want || res.OwnGoal != int64(50*time.Millisecond) {
		t.Errorf("goal %v, own goal %v: want %v, 50ms", time.Duration(res.Goal), time.Duration(res.OwnGoal), time.Duration(want))
	}
}
