package debounce

import (
	"testing"
	"time"
)

func TestDebouncer(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	type step struct {
		at       time.Duration // since t0
		add      bool          // record a change at `at`, else ask Next
		done     bool          // call Done (the work starts), else ask Next
		wantDue  bool
		wantWait time.Duration
	}
	tests := []struct {
		name           string
		quiet, maxWait time.Duration
		leading        bool
		steps          []step
	}{{
		name: "leading: a lone change is due at once", quiet: 10 * ms, maxWait: 100 * ms, leading: true,
		steps: []step{{at: 0, add: true}, {at: 0, wantDue: true}},
	}, {
		name: "leading: the rest of a burst gathers", quiet: 10 * ms, maxWait: 25 * ms, leading: true,
		steps: []step{{at: 0, add: true}, {at: 0, wantDue: true}, {at: 0, done: true},
			{at: 2 * ms, add: true}, {at: 2 * ms, wantWait: 10 * ms}, {at: 8 * ms, add: true}, {at: 16 * ms, add: true},
			{at: 20 * ms, wantWait: 6 * ms}, {at: 26 * ms, add: true}, {at: 27 * ms, wantDue: true}, {at: 27 * ms, done: true},
			// After Quiet without changes, the next one is a leading edge again.
			{at: 36 * ms, add: true}, {at: 36 * ms, wantDue: true}},
	}, {
		name: "nothing pending is never due", quiet: 10 * ms, maxWait: 100 * ms,
		steps: []step{{at: 0}, {at: time.Hour}},
	}, {
		name: "one change is due after the quiet period", quiet: 10 * ms, maxWait: 100 * ms,
		steps: []step{{at: 0, add: true}, {at: 5 * ms, wantWait: 5 * ms}, {at: 10 * ms, wantDue: true}},
	}, {
		name: "each change restarts the quiet period", quiet: 10 * ms, maxWait: 100 * ms,
		steps: []step{{at: 0, add: true}, {at: 8 * ms, add: true}, {at: 10 * ms, wantWait: 8 * ms}, {at: 17 * ms, wantWait: ms}, {at: 18 * ms, wantDue: true}},
	}, {
		name: "max wait caps a burst", quiet: 10 * ms, maxWait: 25 * ms,
		steps: []step{{at: 0, add: true}, {at: 8 * ms, add: true}, {at: 16 * ms, add: true}, {at: 20 * ms, wantWait: 5 * ms}, {at: 24 * ms, add: true}, {at: 25 * ms, wantDue: true}},
	}, {
		name: "zero quiet is due at once", quiet: 0, maxWait: 0,
		steps: []step{{at: 0, add: true}, {at: 0, wantDue: true}},
	}, {
		name: "max wait below quiet counts as quiet", quiet: 10 * ms, maxWait: ms,
		steps: []step{{at: 0, add: true}, {at: 5 * ms, wantWait: 5 * ms}, {at: 10 * ms, wantDue: true}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			d := Debouncer{Quiet: tt.quiet, MaxWait: tt.maxWait, Leading: tt.leading}
			for i, s := range tt.steps {
				if s.done {
					d.Done()
					continue
				}
				if s.add {
					d.Add(t0.Add(s.at))
					continue
				}
				due, wait := d.Next(t0.Add(s.at))
				if due != s.wantDue || wait != s.wantWait {
					t.Errorf("step %d at %v: Next = (%v, %v), want (%v, %v)", i, s.at, due, wait, s.wantDue, s.wantWait)
				}
			}
			d.Done()
			if due, _ := d.Next(t0.Add(time.Hour)); due || d.Pending() {
				t.Errorf("after Done: due=%v pending=%v, want nothing pending", due, d.Pending())
			}
		})
	}
}
