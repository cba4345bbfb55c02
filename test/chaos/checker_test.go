package chaos

import (
	"slices"
	"testing"
	"time"
)

// atSec is s seconds into a synthetic history.
func atSec(s float64) time.Time {
	return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(s * float64(time.Second)))
}

// wantRules runs Check over in (one consul registry: Push 5s, Heal 20s;
// the run ends at 100s) and wants the violations' rules, in order.
func wantRules(t *testing.T, in CheckInput, want []string) {
	t.Helper()
	in.Bounds = map[string]Bounds{"consul": {Push: 5 * time.Second, Heal: 20 * time.Second}}
	in.KindOfHost = func(string) string { return "consul" }
	in.End = atSec(100)
	vs := Check(in)
	var got []string
	for _, v := range vs {
		got = append(got, v.Rule)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("violations %v, want %v: %v", got, want, vs)
	}
}

// TestCheck runs the checker over small recorded histories, one promise at
// a time.
func TestCheck(t *testing.T) {
	t.Parallel()
	at := atSec
	k := Key{Host: "c0.consul", Addr: "10.1.0.2:8100"}
	add := Event{Start: at(1), Done: at(1.1), Kind: "consul", Key: k, Op: OpAdd, Healthy: true}
	remove := Event{Start: at(20), Done: at(20.1), Kind: "consul", Key: k, Op: OpRemove}
	seen := Obs{At: at(1.5), Client: "c", Key: k, Present: true, Healthy: true}
	gone := func(s float64) Obs { return Obs{At: at(s), Client: "c", Key: k, Present: false} }
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
			wantRules(t, CheckInput{Truth: tc.truth, Obs: tc.obs, Faults: tc.faults, ClientScope: map[string]string{"c": "meshfed-a"}}, tc.want)
		})
	}
}

// TestCheckGRPC judges a grpc-go client as the harness records it from its
// CSDS: on the hosts it subscribes to only, and a restart of its process
// (Obs.Forgot) is not a removal but must be made good.
func TestCheckGRPC(t *testing.T) {
	t.Parallel()
	at := atSec
	k := Key{Host: "c0.consul", Addr: "10.1.0.2:8100"}
	other := Key{Host: "c1.consul", Addr: "10.1.0.3:8100"} // a service the client does not subscribe to
	add := Event{Start: at(1), Done: at(1.1), Kind: "consul", Key: k, Op: OpAdd, Healthy: true}
	addOther := Event{Start: at(1), Done: at(1.1), Kind: "consul", Key: other, Op: OpAdd, Healthy: true}
	remove := Event{Start: at(40), Done: at(40.1), Kind: "consul", Key: k, Op: OpRemove}
	held := func(s float64) Obs { return Obs{At: at(s), Client: "grpc-a", Key: k, Present: true, Healthy: true} }
	dropped := func(s float64) Obs { return Obs{At: at(s), Client: "grpc-a", Key: k} }
	lost := func(s float64) Obs { return Obs{At: at(s), Client: "grpc-a", Key: k, Forgot: true} }
	restarted := map[string][]Interval{"client:grpc-a": {{Start: at(9.9), End: at(12), What: "restarted"}}}
	for _, tc := range []struct {
		name   string
		truth  []Event
		obs    []Obs
		faults map[string][]Interval
		want   []string
	}{
		{name: "only its subscribed hosts are due", truth: []Event{add, addOther, remove}, obs: []Obs{held(1.5), dropped(40.5)}},
		{name: "drops a registered endpoint", truth: []Event{add, addOther, remove}, obs: []Obs{held(1.5), dropped(10), held(10.5), dropped(40.5)},
			want: []string{"removed-while-registered"}},
		{name: "drops it while meshfed restarts", truth: []Event{add, remove}, obs: []Obs{held(1.5), dropped(10), held(12), dropped(40.5)},
			faults: map[string][]Interval{"meshfed-a": {{Start: at(9), End: at(11), What: "kill"}}}, want: []string{"removed-while-registered"}},
		{name: "never holds it", truth: []Event{add, remove}, obs: []Obs{dropped(40.5)}, want: []string{"missing"}},
		{name: "a restart loses it and the client gets it back", truth: []Event{add, remove}, obs: []Obs{held(1.5), lost(10), held(13), dropped(40.5)},
			faults: restarted},
		{name: "a restart loses it for good", truth: []Event{add, remove}, obs: []Obs{held(1.5), lost(10), dropped(40.5)},
			faults: restarted, want: []string{"missing"}},
		{name: "a restart loses it and it is removed before due", truth: []Event{add, {Start: at(20), Done: at(20.1), Kind: "consul", Key: k, Op: OpRemove}},
			obs: []Obs{held(1.5), lost(10)}, faults: restarted},
		{name: "a phantom", truth: []Event{addOther}, obs: []Obs{held(1.5)}, want: []string{"phantom"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantRules(t, CheckInput{Truth: tc.truth, Obs: tc.obs, Faults: tc.faults, ClientScope: map[string]string{"grpc-a": "meshfed-a"},
				Hosts: map[string][]string{"grpc-a": {"c0.consul"}}}, tc.want)
		})
	}
}

// TestJudgeSlopes: rule 4 fails a replica whose resources grow beyond the
// limits over a long enough span, and does not judge a short one.
func TestJudgeSlopes(t *testing.T) {
	t.Parallel()
	t0 := atSec(0)
	// run is samples every 5s for d of one process, growing by the given
	// amounts per hour, with a sawtooth of ±8 MiB and ±20 goroutines.
	run := func(pid int, from time.Time, d time.Duration, rssH, gorH, fdsH float64) []sample {
		var ss []sample
		for at := time.Duration(0); at <= d; at += 5 * time.Second {
			h := at.Hours()
			saw := float64(int(at/(5*time.Second))%6) - 2.5
			ss = append(ss, sample{at: from.Add(at), pid: pid, rss: int64((100 + rssH*h + saw*3.2) * (1 << 20)),
				goroutines: 320 + gorH*h + saw*8, fds: int(36 + fdsH*h)})
		}
		return ss
	}
	for _, tc := range []struct {
		name      string
		ss        []sample
		over      int
		notJudged bool
	}{
		{name: "flat over 30 minutes", ss: run(1, t0, 30*time.Minute, 0, 0, 0)},
		{name: "the slopes measured so far", ss: run(1, t0, 30*time.Minute, 24.6, 18.1, 4.1)},
		{name: "a goroutine and an fd leaked per backend fault", ss: run(1, t0, 30*time.Minute, 0, 110, 110), over: 2},
		{name: "RSS doubling in an hour", ss: run(1, t0, 30*time.Minute, 200, 0, 0), over: 1},
		{name: "too short to judge", ss: run(1, t0, 3*time.Minute, 500, 500, 500), notJudged: true},
		{name: "the longest-lived process is judged", ss: append(run(1, t0, 5*time.Minute, 0, 0, 0), run(2, t0.Add(6*time.Minute), 20*time.Minute, 0, 300, 0)...), over: 1},
		{name: "growth across restarts is not a slope", ss: append(run(1, t0, 15*time.Minute, 0, 0, 0), run(2, t0.Add(16*time.Minute), 5*time.Minute, 0, 0, 0)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			over, not := judgeSlopes(tc.ss, limits)
			if (not != "") != tc.notJudged || len(over) != tc.over {
				r, g, f, n, span := slopes(tc.ss)
				t.Fatalf("over %q, not judged %q; want %d over, not judged %v (slopes %.1f %.1f %.1f, %d samples over %s)",
					over, not, tc.over, tc.notJudged, r, g, f, n, span)
			}
		})
	}
}
