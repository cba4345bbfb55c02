package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Bounds are a registry kind's time bounds, from its design
// (docs/registries/<kind>.md, docs/architecture.md §3.1.1): Push is how long
// a change in the backend may take to reach every connected proxy while
// nothing is down (the kind's push, poll or settle time, meshfed's
// debounce, and slack for a loaded 2-core machine); Heal is how long after
// a fault heals (a backend back, meshfed restarted, a client reconnected)
// every proxy must hold the truth again (Push, plus a registry's restart
// backoff of up to 15s and its reconnect).
type Bounds struct {
	Push, Heal time.Duration
}

// Violation is one broken promise, with what the checker knows about it.
type Violation struct {
	Rule     string // phantom, stale, missing, removed-while-registered, nack, exit, convergence, digest, slope
	Kind     string
	Client   string
	Key      Key
	At       time.Time
	Detail   string
	Faults   []string // faults near At
	Timeline []string
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%s] %s", v.Rule, v.At.UTC().Format("15:04:05.000"))
	if v.Kind != "" {
		fmt.Fprintf(&b, " registry=%s", v.Kind)
	}
	if v.Client != "" {
		fmt.Fprintf(&b, " client=%s", v.Client)
	}
	if v.Key != (Key{}) {
		fmt.Fprintf(&b, " object=%s", v.Key)
	}
	fmt.Fprintf(&b, ": %s", v.Detail)
	for _, f := range v.Faults {
		fmt.Fprintf(&b, "\n    fault: %s", f)
	}
	for _, l := range v.Timeline {
		fmt.Fprintf(&b, "\n    %s", l)
	}
	return b.String()
}

// CheckInput is what Check judges.
type CheckInput struct {
	Truth  []Event
	Obs    []Obs
	Faults map[string][]Interval // by scope: registry name, meshfed scope, "client:<id>"
	// ClientScope is the meshfed scope (a key of Faults) each client is
	// connected to.
	ClientScope map[string]string
	// Hosts are the service hosts a client subscribes to (a grpc-go
	// client: its xds:/// targets); a client not named holds every host.
	Hosts  map[string][]string
	Bounds map[string]Bounds // by registry name
	// KindOfHost names the registry of a host never registered (a phantom).
	KindOfHost func(host string) string
	End        time.Time // the end of the observed run
}

// clientState is one client's view of one key over time.
type clientState struct {
	at      time.Time
	present bool
	healthy bool
	forgot  bool
}

// Check verifies the promises of docs/architecture.md §3.1 and §3.4 over a
// recorded run (issue 25's rules 1 and 2):
//
//   - phantom: no client ever holds an endpoint that was never registered;
//   - stale, missing: after each change of the truth, every client holds
//     the new state of the key within Bounds.Push, the deadline extended to
//     Bounds.Heal past the end of every fault (on the key's registry, on
//     the client's meshfed, on the client itself) that overlaps it;
//   - removed-while-registered (fail-static): no client ever drops an
//     endpoint while it is registered, whatever is down — unless the
//     backend itself lost it (Interval.Amnesia) or the client did
//     (Obs.Forgot: its process restarted; then it must hold the key
//     again by the deadline a change would have, else it is missing).
//
// A client named in Hosts is judged on those hosts only.
func Check(in CheckInput) []Violation {
	var out []Violation
	byKey := map[Key][]Event{}
	uncertain := map[Key]bool{}
	for _, e := range in.Truth {
		byKey[e.Key] = append(byKey[e.Key], e)
		if e.Op == OpUncertain {
			uncertain[e.Key] = true
		}
	}
	for _, evs := range byKey {
		slices.SortStableFunc(evs, func(a, b Event) int { return a.Start.Compare(b.Start) })
	}
	views := map[string]map[Key][]clientState{}
	for _, o := range in.Obs {
		v := views[o.Client]
		if v == nil {
			v = map[Key][]clientState{}
			views[o.Client] = v
		}
		v[o.Key] = append(v[o.Key], clientState{o.At, o.Present, o.Healthy, o.Forgot})
	}
	clients := make([]string, 0, len(views))
	for c := range in.ClientScope {
		clients = append(clients, c)
	}
	slices.Sort(clients)
	for _, c := range clients {
		view := views[c]
		for k, states := range view {
			if uncertain[k] {
				continue
			}
			evs := byKey[k]
			kind := ""
			if len(evs) > 0 {
				kind = evs[0].Kind
			} else if in.KindOfHost != nil {
				kind = in.KindOfHost(k.Host)
			}
			for _, s := range states {
				if s.forgot {
					if v, ok := relearned(in, c, kind, k, evs, states, s.at); !ok {
						out = append(out, v)
					}
					continue
				}
				if !s.present {
					if forgotten(in.Faults[kind], s.at, in.Bounds[kind].Heal) {
						continue
					}
					if reg, ok := registeredAt(evs, s.at); ok {
						out = append(out, Violation{Rule: "removed-while-registered", Kind: kind, Client: c, Key: k, At: s.at,
							Detail: fmt.Sprintf("the client dropped an endpoint registered since %s and not removed", reg.UTC().Format("15:04:05.000"))})
					}
					continue
				}
				if len(evs) == 0 || s.at.Before(evs[0].Start) {
					out = append(out, Violation{Rule: "phantom", Kind: kind, Client: c, Key: k, At: s.at,
						Detail: "the client holds an endpoint that was never registered (or before it was)"})
				}
			}
		}
		// Every change of the truth reaches the client in time.
		hosts, some := in.Hosts[c]
		for k, evs := range byKey {
			if uncertain[k] || some && !slices.Contains(hosts, k.Host) {
				continue
			}
			kind := evs[0].Kind
			b := in.Bounds[kind]
			ivs := slices.Concat(in.Faults[kind], in.Faults[in.ClientScope[c]], in.Faults["client:"+c])
			for i, e := range evs {
				deadline := extend(e.Start, e.Done.Add(b.Push), ivs, b.Heal, in.End)
				if i+1 < len(evs) && !deadline.Before(evs[i+1].Start) {
					continue // superseded before it was due
				}
				if deadline.After(in.End) {
					continue
				}
				st := stateAt(view[k], deadline)
				want := e.Op != OpRemove
				switch {
				case want && !st.present:
					out = append(out, Violation{Rule: "missing", Kind: kind, Client: c, Key: k, At: deadline,
						Detail: fmt.Sprintf("registered at %s, not held by the client at its deadline", e.Start.UTC().Format("15:04:05.000"))})
				case !want && st.present:
					out = append(out, Violation{Rule: "stale", Kind: kind, Client: c, Key: k, At: deadline,
						Detail: fmt.Sprintf("removed at %s, still held by the client at its deadline", e.Done.UTC().Format("15:04:05.000"))})
				case want && st.healthy != e.Healthy:
					out = append(out, Violation{Rule: "stale", Kind: kind, Client: c, Key: k, At: deadline,
						Detail: fmt.Sprintf("health set to healthy=%v at %s, the client holds healthy=%v at its deadline", e.Healthy, e.Done.UTC().Format("15:04:05.000"), st.healthy)})
				}
			}
		}
	}
	for i := range out {
		v := &out[i]
		for scope, ivs := range in.Faults {
			for _, iv := range ivs {
				if iv.What == "connecting" {
					continue
				}
				if iv.overlaps(v.At.Add(-in.Bounds[v.Kind].Heal), v.At.Add(time.Second)) {
					end := "open"
					if !iv.End.IsZero() {
						end = iv.End.UTC().Format("15:04:05.000")
					}
					v.Faults = append(v.Faults, fmt.Sprintf("%s %s %s–%s", scope, iv.What, iv.Start.UTC().Format("15:04:05.000"), end))
				}
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Violation) int { return a.At.Compare(b.At) })
	return out
}

// relearned checks that client c, which lost key k with its process at
// t, holds it again in time if it was registered then: by Push after t,
// extended to Heal past the faults on the key's registry, the client's
// replica and the client itself (its restart) — unless a removal of k
// starts by then. It returns the violation when not.
func relearned(in CheckInput, c, kind string, k Key, evs []Event, states []clientState, t time.Time) (Violation, bool) {
	if _, ok := registeredAt(evs, t); !ok {
		return Violation{}, true
	}
	b := in.Bounds[kind]
	ivs := slices.Concat(in.Faults[kind], in.Faults[in.ClientScope[c]], in.Faults["client:"+c])
	deadline := extend(t, t.Add(b.Push), ivs, b.Heal, in.End)
	if deadline.After(in.End) {
		return Violation{}, true
	}
	for _, e := range evs {
		if e.Start.After(t) && !e.Start.After(deadline) && e.Op != OpHealth {
			return Violation{}, true // removed (or uncertain) meanwhile
		}
	}
	if stateAt(states, deadline).present {
		return Violation{}, true
	}
	return Violation{Rule: "missing", Kind: kind, Client: c, Key: k, At: deadline,
		Detail: fmt.Sprintf("lost with the client's process at %s while registered, not held again by its deadline", t.UTC().Format("15:04:05.000"))}, false
}

// forgotten reports whether t falls in an interval of ivs in which the
// backend lost data, or within heal after it.
func forgotten(ivs []Interval, t time.Time, heal time.Duration) bool {
	for _, iv := range ivs {
		if iv.Amnesia && !t.Before(iv.Start) && (iv.End.IsZero() || t.Before(iv.End.Add(heal))) {
			return true
		}
	}
	return false
}

// registeredAt reports whether evs (one key's truth, by start) say the key
// was registered, and not being removed, at t: added before t and no
// removal started by t. It returns when it was added.
func registeredAt(evs []Event, t time.Time) (time.Time, bool) {
	var added time.Time
	for _, e := range evs {
		if e.Start.After(t) {
			break
		}
		switch e.Op {
		case OpAdd:
			// The add must be done: a backend confirms before a watcher
			// may see it, but an add still in flight proves nothing.
			if e.Done.Before(t) {
				added = e.Done
			}
		case OpRemove, OpUncertain:
			return time.Time{}, false
		}
	}
	return added, !added.IsZero()
}

// stateAt is the client's view of a key at t (absent before its first
// observation).
func stateAt(states []clientState, t time.Time) clientState {
	var cur clientState
	for _, s := range states {
		if s.at.After(t) {
			break
		}
		cur = s
	}
	return cur
}

// extend moves deadline to heal past the end of every interval of ivs
// that overlaps [start, deadline] or ended less than heal before start (a
// change right after a fault healed is due when the registry has healed
// too), until none does (an open interval ends at end).
func extend(start, deadline time.Time, ivs []Interval, heal time.Duration, end time.Time) time.Time {
	for changed := true; changed; {
		changed = false
		for _, iv := range ivs {
			e := iv.End
			if e.IsZero() {
				e = end
			}
			if !iv.Start.Before(deadline) || !e.Add(heal).After(start) {
				continue
			}
			if d := e.Add(heal); d.After(deadline) {
				deadline, changed = d, true
			}
		}
	}
	return deadline
}
