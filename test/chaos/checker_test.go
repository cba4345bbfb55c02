package chaos

import (
	"testing"
	"time"
)

// TestCheck runs the checker over small recorded histories, one promise at
// a time.
func TestCheck(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	k := Key{Host: "c0.consul", Addr: "10.1.0.2:8100"}
	add := Event{Start: at(1), Done: at(1.1), Kind: "consul", Key: k, Op: OpAdd, Healthy: true}
	remove := Event{Start: at(20), Done: at(20.1), Kind: "consul", Key: k, Op: OpRemove}
	seen := Obs{At: at(1.5), Client: "c", Key: k, Present: true, Healthy: true}
	gone := func(s float64) Obs { return Obs{At: at(s), Client: "c", Key: k, Present: false} }
	bounds := map[string]Bounds{"consul": {Push: 5 * time.Second, Heal: 20 * time.Second}}
	for _, tc := range []struct {
		name   string
		truth  []Event
		obs    []Obs
		faults map[string][]Interval
		want   []string // rules, in order
	}{
		{name: "in time", truth: []Event{add, remove}, obs: []Obs{seen, gone(21)}},
		{name: "phantom", obs: []Obs{seen}, want: []string{"phantom"}},
		{name: "seen before registered", truth: []Event{{Start: at(2), Done: at(2.1), Kind: "consul", Key: k, Op: OpAdd, Healthy: true}},
			obs: []Obs{seen}, want: []string{"phantom"}},
		{name: "stale", truth: []Event{add, remove}, obs: []Obs{seen, gone(27)}, want: []string{"stale"}},
		{name: "missing", truth: []Event{add}, obs: nil, want: []string{"missing"}},
		{name: "stale health", truth: []Event{add, {Start: at(10), Done: at(10.1), Kind: "consul", Key: k, Op: OpHealth}},
			obs: []Obs{seen}, want: []string{"stale"}},
		{name: "late removal excused by a backend fault", truth: []Event{add, remove}, obs: []Obs{seen, gone(40)},
			faults: map[string][]Interval{"consul": {{Start: at(22), End: at(25), What: "kill"}}}},
		{name: "late removal excused by the client's replica", truth: []Event{add, remove}, obs: []Obs{seen, gone(40)},
			faults: map[string][]Interval{"meshfed-a": {{Start: at(19), End: at(24), What: "kill"}}}},
		{name: "a change right after a fault healed is due after the heal bound", truth: []Event{add, remove}, obs: []Obs{seen, gone(35)},
			faults: map[string][]Interval{"consul": {{Start: at(10), End: at(19), What: "kill"}}}},
		{name: "a fault elsewhere excuses nothing", truth: []Event{add, remove}, obs: []Obs{seen, gone(40)},
			faults: map[string][]Interval{"zk": {{Start: at(22), End: at(25), What: "kill"}}}, want: []string{"stale"}},
		{name: "removed while registered", truth: []Event{add, remove}, obs: []Obs{seen, gone(10), {At: at(11), Client: "c", Key: k, Present: true, Healthy: true}, gone(20.5)},
			faults: map[string][]Interval{"consul": {{Start: at(9), End: at(12), What: "kill"}}}, want: []string{"removed-while-registered"}},
		{name: "a client that joined late is judged from its join", truth: []Event{add, remove}, obs: nil,
			faults: map[string][]Interval{"client:c": {{Start: at(0), End: at(30), What: "connecting"}}}},
		{name: "uncertain keys are not judged", truth: []Event{add, {Start: at(3), Done: at(63), Kind: "consul", Key: k, Op: OpUncertain}}, obs: []Obs{seen, gone(4)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := Check(CheckInput{Truth: tc.truth, Obs: tc.obs, Faults: tc.faults, ClientScope: map[string]string{"c": "meshfed-a"},
				Bounds: bounds, KindOfHost: func(string) string { return "consul" }, End: at(100)})
			var got []string
			for _, v := range vs {
				got = append(got, v.Rule)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("violations %v, want %v: %v", got, tc.want, vs)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("violations %v, want %v: %v", got, tc.want, vs)
				}
			}
		})
	}
}
