package chaos

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// Key names one endpoint as a proxy sees it: the service host and the
// endpoint's ip:port. The churn generator never registers a key twice (every
// instance gets a fresh address), so a key has one life: registered, maybe
// flipped in health, removed.
type Key struct {
	Host string
	Addr string // ip:port
}

func (k Key) String() string { return k.Host + "/" + k.Addr }

// Op is what the churn generator did to a key.
type Op int

// The operations of the truth.
const (
	OpAdd       Op = iota // registered (healthy or not)
	OpRemove              // deregistered
	OpHealth              // health changed
	OpUncertain           // an operation that failed for good: its outcome is unknown
)

func (o Op) String() string {
	return [...]string{"add", "remove", "health", "uncertain"}[o]
}

// Event is one operation of the truth: started at Start, confirmed by the
// backend at Done.
type Event struct {
	Start, Done time.Time
	Kind        string // the registry's name in clusters.yaml
	Key         Key
	Op          Op
	Healthy     bool
}

// Obs is one change a proxy saw: at At, client Client started (Present) or
// stopped holding Key, or its health changed.
type Obs struct {
	At      time.Time
	Client  string
	Key     Key
	Present bool
	Healthy bool
	// Forgot: the client lost everything it held (its process was killed
	// and restarted), so not holding Key is not a removal by meshfed.
	Forgot bool
}

// diffObs are the observations that turn old into cur (forgot: old is lost
// with the client's process).
func diffObs(client string, at time.Time, old, cur map[Key]bool, forgot bool) []Obs {
	var obs []Obs
	for _, k := range slices.SortedFunc(maps.Keys(cur), func(a, b Key) int { return strings.Compare(a.String(), b.String()) }) {
		if oh, had := old[k]; !had || oh != cur[k] {
			obs = append(obs, Obs{At: at, Client: client, Key: k, Present: true, Healthy: cur[k]})
		}
	}
	for k := range old {
		if _, has := cur[k]; !has {
			obs = append(obs, Obs{At: at, Client: client, Key: k, Present: false, Forgot: forgot})
		}
	}
	return obs
}

// Interval is a time span in which something was down: a fault on a
// registry's backend, a meshfed restart, a client disconnected or stalled.
// End zero: not over (yet).
type Interval struct {
	Start, End time.Time
	What       string // the fault, for reports
	// Amnesia: the backend itself lost data for a while (a restarted
	// Polaris forgets ephemeral Nacos instances until their client
	// registers them again), so removals then are not meshfed's.
	Amnesia bool
}

func (iv Interval) overlaps(a, b time.Time) bool {
	end := iv.End
	if end.IsZero() {
		end = b.Add(time.Hour)
	}
	return iv.Start.Before(b) && end.After(a)
}

// History is everything the checker judges: the truth, what proxies saw,
// and when what was down. Its methods are safe for concurrent use.
type History struct {
	mu     sync.Mutex
	truth  []Event
	obs    []Obs
	faults map[string][]Interval // by registry name; "" = meshfed (every registry), "client:<id>" a client
	notes  []string
	cur    map[Key]keyState // truth now
	kindOf map[Key]string
	begin  time.Time // when the history began
}

type keyState struct {
	healthy bool
	kind    string
}

// NewHistory returns an empty history.
func NewHistory() *History {
	return &History{faults: map[string][]Interval{}, cur: map[Key]keyState{}, kindOf: map[Key]string{}, begin: time.Now()}
}

// Record adds an operation of the truth.
func (h *History) Record(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.truth = append(h.truth, e)
	h.kindOf[e.Key] = e.Kind
	switch e.Op {
	case OpAdd, OpHealth:
		h.cur[e.Key] = keyState{healthy: e.Healthy, kind: e.Kind}
	case OpRemove, OpUncertain:
		delete(h.cur, e.Key)
	}
}

// Observe adds what a proxy saw.
func (h *History) Observe(o ...Obs) {
	h.mu.Lock()
	h.obs = append(h.obs, o...)
	h.mu.Unlock()
}

// Down opens an interval in which scope (a registry name, a replica's
// name, "client:<id>") is down; the returned func closes it.
func (h *History) Down(scope, what string) func() { return h.down(scope, what, false) }

// Joins opens the interval of a client that is not there yet: from the
// beginning of the history until the returned func closes it (its first
// sync), so that changes made before it joined are due only after it
// joined.
func (h *History) Joins(scope string) func() {
	end := h.down(scope, "connecting", false)
	h.mu.Lock()
	ivs := h.faults[scope]
	ivs[len(ivs)-1].Start = h.begin
	h.mu.Unlock()
	return end
}

// Forgets is Down for a backend that loses the scope's data meanwhile.
func (h *History) Forgets(scope, what string) func() { return h.down(scope, what, true) }

func (h *History) down(scope, what string, amnesia bool) func() {
	h.mu.Lock()
	h.faults[scope] = append(h.faults[scope], Interval{Start: time.Now(), What: what, Amnesia: amnesia})
	i := len(h.faults[scope]) - 1
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		h.faults[scope][i].End = time.Now()
		h.mu.Unlock()
	}
}

// Note keeps a line for the report (a fault applied, a reload).
func (h *History) Note(format string, args ...any) {
	h.mu.Lock()
	h.notes = append(h.notes, time.Now().UTC().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
	h.mu.Unlock()
}

// Current returns the truth now of the keys of kind (registry name).
func (h *History) Current(kind string) map[Key]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[Key]bool{}
	for k, s := range h.cur {
		if s.kind == kind {
			out[k] = s.healthy
		}
	}
	return out
}

// KindOf is the registry a key was registered in, "" if never.
func (h *History) KindOf(k Key) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.kindOf[k]
}

// snapshot copies the history for the checker.
func (h *History) snapshot() (truth []Event, obs []Obs, faults map[string][]Interval) {
	h.mu.Lock()
	defer h.mu.Unlock()
	faults = map[string][]Interval{}
	for k, v := range h.faults {
		faults[k] = slices.Clone(v)
	}
	return slices.Clone(h.truth), slices.Clone(h.obs), faults
}

// timeline is a key's life in the truth and in every client's view, for a
// violation's report.
func (h *History) timeline(k Key) []string {
	truth, obs, _ := h.snapshot()
	type line struct {
		at time.Time
		s  string
	}
	var ls []line
	for _, e := range truth {
		if e.Key == k {
			ls = append(ls, line{e.Start, fmt.Sprintf("truth  %s %s healthy=%v (done %s)", e.Kind, e.Op, e.Healthy, e.Done.UTC().Format("15:04:05.000"))})
		}
	}
	for _, o := range obs {
		if o.Key == k {
			l := fmt.Sprintf("client %s present=%v healthy=%v", o.Client, o.Present, o.Healthy)
			if o.Forgot {
				l += " (the client restarted)"
			}
			ls = append(ls, line{o.At, l})
		}
	}
	slices.SortStableFunc(ls, func(a, b line) int { return a.at.Compare(b.at) })
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.at.UTC().Format("15:04:05.000") + " " + l.s
	}
	return out
}
