package registries

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thejerf/suture/v4"
)

// Restart policy of a registry. A registry whose Run fails is restarted
// after a jittered delay that starts at RestartInitial and doubles with
// every consecutive failure up to RestartMax; a run that lasted
// RestartReset or longer starts the sequence again. On top of that, each
// registry's own suture supervisor pauses its registry for SupervisorBackoff
// when more than SupervisorThreshold failures pile up (the count halves
// every SupervisorDecay): a safety net that only that registry feels.
const (
	RestartInitial = time.Second
	RestartMax     = 15 * time.Second
	RestartReset   = 30 * time.Second

	SupervisorDecay     = 30 * time.Second
	SupervisorThreshold = 5
	SupervisorBackoff   = 15 * time.Second
	// SupervisorTimeout is how long a supervisor waits for a stopping
	// service before it logs that the service failed to stop.
	SupervisorTimeout = 10 * time.Second
	// FailedRetry is how long a Failed registry (its Run returned an error
	// marked by Permanent: bad credentials, a config the backend rejects)
	// waits before it is run again. Each run re-reads the registry's
	// credential files, so fixing a token file needs no restart.
	FailedRetry = 30 * time.Second
)

// Runner is the suture.Service that runs one Registry, publishes the end of
// every failed Run to the sink (Update.Ended) and counts its restarts. A Runner is added to exactly one
// supervisor.
type Runner struct {
	common Common
	reg    Registry
	sink   Sink
	log    *slog.Logger

	restarts atomic.Int64

	mu          sync.Mutex // guards the fields below; Serve runs one at a time
	backoff     Backoff
	failedRetry time.Duration
	failed      bool // the previous run failed: wait before the next one
	permanent   bool // ...with a Permanent error: wait failedRetry
}

// NewRunner returns the service that runs reg under c's name and reports to
// sink. log should be the registry's child logger (with its registry key);
// nil discards.
func NewRunner(c Common, reg Registry, sink Sink, log *slog.Logger) *Runner {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{
		common:      c,
		reg:         reg,
		sink:        sink,
		log:         log,
		backoff:     Backoff{Initial: RestartInitial, Max: RestartMax},
		failedRetry: FailedRetry,
	}
}

// WithFailedRetry replaces FailedRetry, for tests that cannot wait 30s.
// Call it before the Runner is served.
func (r *Runner) WithFailedRetry(d time.Duration) *Runner {
	r.failedRetry = d
	return r
}

// WithBackoff replaces the restart delays (RestartInitial, RestartMax), for
// tests that cannot wait seconds. Call it before the Runner is served.
func (r *Runner) WithBackoff(initial, maxDelay time.Duration) *Runner {
	r.backoff = Backoff{Initial: initial, Max: maxDelay}
	return r
}

// Serve implements suture.Service. It runs the registry until ctx ends and
// then returns ctx.Err(). Any other end of Run (an error, a panic, or a nil
// return before ctx ended) is published to the sink as an Update that says
// the Run Ended (with the error), counted as a restart and returned, so
// that the supervisor runs Serve again; Serve first waits the restart
// delay. An error marked by Permanent is published with Permanent and
// retried after FailedRetry.
func (r *Runner) Serve(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed {
		d := r.backoff.Next()
		if r.permanent {
			d = r.failedRetry
		}
		r.log.Debug("waiting before restarting registry", "delay", d, "failed", r.permanent)
		if err := Sleep(ctx, d); err != nil {
			return err
		}
	}

	start := time.Now()
	err := r.run(ctx)
	if ctx.Err() != nil {
		// Stopping: whatever Run returned, the supervisor asked for it.
		return ctx.Err()
	}
	if time.Since(start) >= RestartReset {
		r.backoff.Reset()
	}
	if err == nil {
		err = errors.New("registry stopped without an error before it was asked to")
	}
	shard := r.common.Shard()
	r.failed = true
	r.restarts.Add(1)
	if r.permanent = IsPermanent(err); r.permanent {
		r.log.Error("registry failed; retrying on the slow schedule (credential files are re-read)", "error", err, "retry", r.failedRetry)
		r.sink.Publish(shard, Update{Condition: Condition{Err: err.Error()}, Ended: true, Permanent: true})
		return err
	}
	r.sink.Publish(shard, Update{Condition: Condition{Err: err.Error()}, Ended: true})
	return err
}

// run calls Run and turns a panic into an error.
func (r *Runner) run(ctx context.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("registry panicked", "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return r.reg.Run(ctx, r.sink)
}

// Restarts is how many times the registry failed and was (or will be)
// restarted.
func (r *Runner) Restarts() int { return int(r.restarts.Load()) }

// String names the service in supervisor logs: "registry <name>".
func (r *Runner) String() string { return "registry " + r.common.Name }

// NewSupervisor returns a suture supervisor with meshfed's settings
// (SupervisorDecay, SupervisorThreshold, SupervisorBackoff,
// SupervisorTimeout) whose events are logged to log. Use it for the root and
// for each registry's child supervisor; suture gives a child added to a
// supervisor its parent's hook, so the hook takes the registry name from
// the event, not from log.
func NewSupervisor(name string, log *slog.Logger) *suture.Supervisor {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return suture.New(name, suture.Spec{
		EventHook:        eventHook(log),
		FailureDecay:     SupervisorDecay.Seconds(),
		FailureThreshold: SupervisorThreshold,
		FailureBackoff:   SupervisorBackoff,
		Timeout:          SupervisorTimeout,
	})
}

// registryName returns the registry a supervisor or service name is about
// ("registry vms" → "vms"), or "".
func registryName(names ...string) string {
	for _, n := range names {
		if r, ok := strings.CutPrefix(n, "registry "); ok {
			return r
		}
	}
	return ""
}

func eventHook(log *slog.Logger) suture.EventHook {
	return func(e suture.Event) {
		// with adds the registry key when the event is about a registry.
		with := func(names ...string) *slog.Logger {
			if r := registryName(names...); r != "" {
				return log.With("registry", r)
			}
			return log
		}
		switch e := e.(type) {
		case suture.EventServiceTerminate:
			with(e.ServiceName, e.SupervisorName).Warn("service failed",
				"supervisor", e.SupervisorName, "service", e.ServiceName,
				"error", fmt.Sprint(e.Err), "failures", e.CurrentFailures,
				"threshold", e.FailureThreshold, "restarting", e.Restarting)
		case suture.EventServicePanic:
			with(e.ServiceName, e.SupervisorName).Error("service panicked",
				"supervisor", e.SupervisorName, "service", e.ServiceName,
				"panic", e.PanicMsg, "stack", e.Stacktrace,
				"failures", e.CurrentFailures, "restarting", e.Restarting)
		case suture.EventBackoff:
			with(e.SupervisorName).Warn("supervisor pauses restarts after repeated failures",
				"supervisor", e.SupervisorName, "pause", SupervisorBackoff)
		case suture.EventResume:
			with(e.SupervisorName).Info("supervisor resumes restarts",
				"supervisor", e.SupervisorName)
		case suture.EventStopTimeout:
			with(e.ServiceName, e.SupervisorName).Error("service did not stop in time",
				"supervisor", e.SupervisorName, "service", e.ServiceName,
				"timeout", SupervisorTimeout)
		default:
			log.Warn(e.String())
		}
	}
}
