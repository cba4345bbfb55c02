package registries_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thejerf/suture/v4"
	"go.uber.org/goleak"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 5 * time.Second

// fakeRegistry runs script for its n-th Run call (0-based) and counts calls.
type fakeRegistry struct {
	calls  atomic.Int64
	script func(ctx context.Context, n int, sink registries.Sink) error
}

func (f *fakeRegistry) Run(ctx context.Context, sink registries.Sink) error {
	n := int(f.calls.Add(1)) - 1
	return f.script(ctx, n, sink)
}

// syncAndWait publishes one service for c and blocks until ctx ends.
func syncAndWait(ctx context.Context, c registries.Common, sink registries.Sink) error {
	sink.Publish(c.Shard(), registries.FullState([]model.Service{{Hostname: "a." + c.Domain}}, nil))
	<-ctx.Done()
	return fmt.Errorf("watch stopped: %w", ctx.Err())
}

func common(name string) registries.Common {
	return registries.Common{Name: name, Kind: "file", Domain: name + ".internal"}
}

func reportStates(st registrytest.State) []string {
	var out []string
	for _, r := range st.Reports {
		kind := "Failing"
		switch {
		case r.Permanent:
			kind = "Ended permanently"
		case r.Ended:
			kind = "Ended"
		}
		out = append(out, kind+": "+r.Err)
	}
	return out
}

func TestRunnerServe(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name         string
		run          func(ctx context.Context, cancel func()) error
		wantErr      error // errors.Is
		wantReport   *registrytest.Status
		wantRestarts int
	}{
		{
			name:         "error is published as the Run's end and returned for a restart",
			run:          func(context.Context, func()) error { return boom },
			wantErr:      boom,
			wantReport:   &registrytest.Status{Err: "boom", Ended: true},
			wantRestarts: 1,
		},
		{
			name:         "permanent error is published as a permanent end and returned for a slow retry",
			run:          func(context.Context, func()) error { return registries.Permanent(boom) },
			wantErr:      boom,
			wantReport:   &registrytest.Status{Err: "boom", Ended: true, Permanent: true},
			wantRestarts: 1,
		},
		{
			name:         "panic is recovered and reported like an error",
			run:          func(context.Context, func()) error { panic("kaput") },
			wantReport:   &registrytest.Status{Err: "panic: kaput", Ended: true},
			wantRestarts: 1,
		},
		{
			name:         "nil return before cancel is a failure",
			run:          func(context.Context, func()) error { return nil },
			wantReport:   &registrytest.Status{Err: "registry stopped without an error before it was asked to", Ended: true},
			wantRestarts: 1,
		},
		{
			name: "any return after cancel is a clean stop",
			run: func(ctx context.Context, cancel func()) error {
				cancel()
				return fmt.Errorf("watch: %w", ctx.Err())
			},
			wantErr: context.Canceled,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			reg := &fakeRegistry{script: func(ctx context.Context, _ int, _ registries.Sink) error { return tt.run(ctx, cancel) }}
			sink := registrytest.NewSink()
			r := registries.NewRunner(common("vms"), reg, sink, nil)
			err := r.Serve(ctx)
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Errorf("Serve = %v, want %v", err, tt.wantErr)
			}
			if errors.Is(err, suture.ErrDoNotRestart) {
				t.Errorf("Serve = %v: a registry is never dropped from its supervisor", err)
			}
			st := sink.State(common("vms").Shard())
			switch {
			case tt.wantReport == nil && len(st.Reports) > 0:
				t.Errorf("reports = %v, want none", st.Reports)
			case tt.wantReport != nil && (len(st.Reports) != 1 || st.Reports[0] != *tt.wantReport):
				t.Errorf("reports = %v, want [%v]", st.Reports, *tt.wantReport)
			}
			if got := r.Restarts(); got != tt.wantRestarts {
				t.Errorf("Restarts() = %d, want %d", got, tt.wantRestarts)
			}
		})
	}
}

func TestRunnerWaitsBeforeRestartUnlessCancelled(t *testing.T) {
	t.Parallel()
	reg := &fakeRegistry{script: func(context.Context, int, registries.Sink) error { return errors.New("down") }}
	r := registries.NewRunner(common("vms"), reg, registrytest.NewSink(), nil) // 1s initial delay
	if err := r.Serve(t.Context()); err == nil {
		t.Fatal("first Serve succeeded")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	if err := r.Serve(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Serve while waiting to restart = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > registries.RestartInitial/2 {
		t.Errorf("cancelled Serve took %v; the restart delay must end with the context", d)
	}
	if n := reg.calls.Load(); n != 1 {
		t.Errorf("Run called %d times, want 1 (no run after cancel)", n)
	}
}

func TestRunnerString(t *testing.T) {
	t.Parallel()
	r := registries.NewRunner(common("vms"), &fakeRegistry{}, registrytest.NewSink(), nil)
	if got := r.String(); got != "registry vms" {
		t.Errorf("String() = %q", got)
	}
}

// tree starts a root supervisor with one child supervisor per runner, as
// the wiring does, and stops it in cleanup.
func tree(t *testing.T, log *slog.Logger, runners ...*registries.Runner) {
	t.Helper()
	root := registries.NewSupervisor("meshfed", log)
	for _, r := range runners {
		child := registries.NewSupervisor(r.String(), log)
		child.Add(r)
		root.Add(child)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := root.ServeBackground(ctx)
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(wait):
			t.Errorf("supervisor did not stop within %v", wait)
		}
	})
}

func TestSupervisorRestartsFailingRegistry(t *testing.T) {
	t.Parallel()
	const failures = 3
	c := common("vms")
	reg := &fakeRegistry{script: func(ctx context.Context, n int, sink registries.Sink) error {
		if n < failures {
			return fmt.Errorf("connection refused #%d", n+1)
		}
		return syncAndWait(ctx, c, sink)
	}}
	sink := registrytest.NewSink()
	logs := newRecordHandler()
	r := registries.NewRunner(c, reg, sink, slog.New(logs)).WithBackoff(time.Millisecond, 5*time.Millisecond)
	tree(t, slog.New(logs), r)

	st := sink.WaitFor(t, wait, registrytest.State.Synced)
	if got := r.Restarts(); got != failures {
		t.Errorf("Restarts() = %d, want %d", got, failures)
	}
	want := []string{"Ended: connection refused #1", "Ended: connection refused #2", "Ended: connection refused #3"}
	if got := reportStates(st); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("reports = %q, want %q", got, want)
	}
	if n := logs.count("service failed", "registry", "vms"); n != failures {
		t.Errorf("%d 'service failed' log records with registry=vms, want %d; records: %v", n, failures, logs.all())
	}
}

// TestSupervisorRetriesFailedSlowly: a registry that fails with a
// Permanent error (bad credentials) is Failed, and is run again on the
// FailedRetry schedule, not the restart backoff (an hour here), until a run
// succeeds (the operator fixed the token file).
func TestSupervisorRetriesFailedSlowly(t *testing.T) {
	t.Parallel()
	c := common("vms")
	reg := &fakeRegistry{script: func(ctx context.Context, call int, sink registries.Sink) error {
		if call < 2 {
			return registries.Permanent(errors.New("401 unauthorized"))
		}
		sink.Publish(c.Shard(), registries.FullState(nil, nil))
		<-ctx.Done()
		return ctx.Err()
	}}
	sink := registrytest.NewSink()
	r := registries.NewRunner(c, reg, sink, nil).WithBackoff(time.Hour, time.Hour).WithFailedRetry(20 * time.Millisecond)
	child := registries.NewSupervisor(r.String(), nil)
	child.Add(r)
	ctx, cancel := context.WithCancel(context.Background())
	done := child.ServeBackground(ctx)
	defer func() { cancel(); <-done }()

	st := sink.WaitFor(t, wait, func(s registrytest.State) bool { return s.Failed() })
	if st.Status.Err != "401 unauthorized" {
		t.Errorf("Failed status error = %q", st.Status.Err)
	}
	sink.WaitFor(t, wait, func(s registrytest.State) bool { return s.Replaces > 0 })
	if n := reg.calls.Load(); n != 3 || r.Restarts() != 2 {
		t.Errorf("Run calls = %d, restarts = %d; want 3 and 2", n, r.Restarts())
	}
}

func TestOneFailingRegistryNeverPausesAnother(t *testing.T) {
	t.Parallel()
	// a fails at once, every time: its own supervisor soon pauses it for
	// SupervisorBackoff. b fails once on request, after that pause began,
	// and must be restarted within its own (millisecond) backoff.
	ca, cb := common("a"), common("b")
	a := &fakeRegistry{script: func(context.Context, int, registries.Sink) error { return errors.New("a is down") }}
	failB := make(chan struct{})
	b := &fakeRegistry{script: func(ctx context.Context, n int, sink registries.Sink) error {
		sink.Publish(cb.Shard(), registries.FullState([]model.Service{{Hostname: "b.b.internal"}}, nil))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-failB:
			return errors.New("b lost its connection")
		}
	}}
	sink := registrytest.NewSink()
	logs := newRecordHandler()
	ra := registries.NewRunner(ca, a, sink, nil).WithBackoff(time.Microsecond, time.Microsecond)
	rb := registries.NewRunner(cb, b, sink, nil).WithBackoff(time.Millisecond, time.Millisecond)
	tree(t, slog.New(logs), ra, rb)

	sink.WaitForShard(t, cb.Shard(), wait, registrytest.State.Synced)
	logs.waitFor(t, "supervisor pauses restarts after repeated failures", "registry", "a")
	failedA := ra.Restarts()

	failB <- struct{}{} // one failure: b receives it once
	start := time.Now()
	sink.WaitForShard(t, cb.Shard(), wait, func(s registrytest.State) bool { return s.Replaces >= 2 })
	if d := time.Since(start); d >= registries.SupervisorBackoff/3 {
		t.Errorf("b took %v to come back; it waited for a's pause", d)
	}
	if rb.Restarts() != 1 {
		t.Errorf("b restarts = %d, want 1", rb.Restarts())
	}
	if ra.Restarts() != failedA {
		t.Errorf("a restarted %d more times during its supervisor's pause", ra.Restarts()-failedA)
	}
	if st := sink.State(cb.Shard()); !st.Healthy() {
		t.Errorf("b status = %v", st.Status)
	}
}

func TestSupervisorStopsCleanlyOnCancel(t *testing.T) {
	t.Parallel()
	c := common("vms")
	reg := &fakeRegistry{script: func(ctx context.Context, _ int, sink registries.Sink) error { return syncAndWait(ctx, c, sink) }}
	sink := registrytest.NewSink()
	r := registries.NewRunner(c, reg, sink, nil)
	root := registries.NewSupervisor("meshfed", nil)
	child := registries.NewSupervisor(r.String(), nil)
	child.Add(r)
	root.Add(child)
	ctx, cancel := context.WithCancel(context.Background())
	done := root.ServeBackground(ctx)
	sink.WaitFor(t, wait, registrytest.State.Synced)

	cancel()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("root supervisor returned %v", err)
		}
	case <-time.After(wait):
		t.Fatal("root supervisor did not stop")
	}
	st := sink.State(c.Shard())
	if len(st.Reports) != 0 || r.Restarts() != 0 {
		t.Errorf("a clean stop reported %v and counted %d restarts", st.Reports, r.Restarts())
	}
}

// recordHandler is a slog.Handler that keeps records (with the attributes
// of With) and lets tests wait for one.
type recordHandler struct {
	*records
	attrs []slog.Attr
}

type records struct {
	mu      sync.Mutex
	list    []map[string]string
	changed chan struct{}
}

func newRecordHandler() *recordHandler { return &recordHandler{records: &records{}} }

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) WithGroup(string) slog.Handler            { return h }
func (h *recordHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordHandler{records: h.records, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message}
	for _, a := range h.attrs {
		m[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.list = append(h.list, m)
	if h.changed != nil {
		close(h.changed)
		h.changed = nil
	}
	return nil
}

func (h *records) count(msg, key, value string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.list {
		if r["msg"] == msg && r[key] == value {
			n++
		}
	}
	return n
}

func (h *records) all() []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]map[string]string(nil), h.list...)
}

func (h *records) waitFor(t *testing.T, msg, key, value string) {
	t.Helper()
	deadline := time.After(wait)
	for {
		h.mu.Lock()
		if h.changed == nil {
			h.changed = make(chan struct{})
		}
		ch := h.changed
		h.mu.Unlock()
		if h.count(msg, key, value) > 0 {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no log record %q with %s=%s; records: %v", msg, key, value, h.all())
		}
	}
}
