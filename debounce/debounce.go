// Package debounce is meshfed's one debounce helper (Debouncer), a leaf
// package so that registries, the aggregator and the config sources
// (istioconfig, which may not import registries) share it.
package debounce

import "time"

// Debouncer coalesces a burst of changes into one piece of work: after a
// change it waits until Quiet has passed with no further change, but never
// longer than MaxWait after the first change still pending (as Istio's
// debounce and consul-k8s's coalesce do). It is meshfed's one debounce
// helper: the aggregator's Serve loop drives it with clusters.yaml's
// `debounce: {quiet, max}`, and registries/filewatch with its settle time
// (read a services file only once it stopped changing).
//
// Debouncer is a pure state machine: callers pass the current time, so it
// holds no goroutines or timers and tests drive it with any clock. A zero
// Quiet makes every change due at once; a MaxWait below Quiet counts as
// Quiet. Not safe for concurrent use.
//
// With Leading, a change that comes after Quiet without any change is due
// at once (the leading edge of a burst: a lone change waits for nothing);
// the changes that follow it within Quiet gather as above. Sources whose
// reads cost what changed use it (the Kubernetes config source, the
// serviceentry registry over clusters); files do not, as a file may be
// half written when its first event arrives.
type Debouncer struct {
	Quiet   time.Duration
	MaxWait time.Duration
	Leading bool

	pending     bool
	lead        bool // the pending change is a leading edge: due at once
	first, last time.Time
}

// Add records a change at now.
func (d *Debouncer) Add(now time.Time) {
	if !d.pending {
		d.pending = true
		d.lead = d.Leading && (d.last.IsZero() || now.Sub(d.last) >= d.Quiet)
		d.first = now
	}
	d.last = now
}

// Pending reports whether changes wait to be handled.
func (d *Debouncer) Pending() bool { return d.pending }

// Next reports whether the pending changes are due at now and, if they are
// not, how long until they are. With nothing pending it returns (false, 0).
func (d *Debouncer) Next(now time.Time) (due bool, wait time.Duration) {
	if !d.pending {
		return false, 0
	}
	if d.lead {
		return true, 0
	}
	deadline := d.last.Add(d.Quiet)
	if capAt := d.first.Add(max(d.MaxWait, d.Quiet)); capAt.Before(deadline) {
		deadline = capAt
	}
	if !now.Before(deadline) {
		return true, 0
	}
	return false, deadline.Sub(now)
}

// Done clears the pending changes; call it when starting the work they
// asked for.
func (d *Debouncer) Done() { d.pending = false }
