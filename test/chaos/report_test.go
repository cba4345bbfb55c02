package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/meshfed/meshfed/bench"
)

// sample is one reading of a replica's resources.
type sample struct {
	at         time.Time
	pid        int
	rss        int64
	fds        int
	goroutines float64
}

// sample reads both replicas' RSS and open fds (/proc) and goroutines
// (/metrics) every 5s, and turns a rise of meshfed_xds_nacks_total (any
// client's NACK, the grpc-go clients' included) into a violation.
func (w *world) sample(ctx context.Context) {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	lastNacks := map[string]float64{}
	lastPid := map[string]int{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, m := range []*Meshfed{w.a, w.b} {
			pid := m.Pid()
			if pid == 0 {
				continue
			}
			rss, fds, err := procStats(pid)
			if err != nil {
				continue
			}
			met, err := m.Metrics("go_goroutines", "meshfed_xds_nacks_total")
			if err != nil {
				continue
			}
			w.mu.Lock()
			w.samples[m.Name] = append(w.samples[m.Name], sample{at: time.Now(), pid: pid, rss: rss, fds: fds, goroutines: met["go_goroutines"]})
			w.mu.Unlock()
			n := met["meshfed_xds_nacks_total"]
			if lastPid[m.Name] != pid {
				lastPid[m.Name], lastNacks[m.Name] = pid, 0
			}
			if n > lastNacks[m.Name] {
				_, body, _ := m.get("/debug/syncz")
				w.violate(Violation{Rule: "nack", At: time.Now(), Client: m.Name,
					Detail: fmt.Sprintf("meshfed_xds_nacks_total rose to %v; /debug/syncz: %s", n, tailString(string(body), 2000))})
				w.mu.Lock()
				w.nacks[m.Name] += n - lastNacks[m.Name]
				w.mu.Unlock()
				lastNacks[m.Name] = n
			}
		}
	}
}

// perHour is the least-squares slope of ys over xs (seconds), per hour.
func perHour(xs, ys []float64) float64 {
	if len(xs) < 3 {
		return 0
	}
	return bench.Slope(xs, ys) * 3600
}

// slopes of a replica's longest run of one process, after its first
// minute (start-up growth is not a leak).
func slopes(ss []sample) (rss, gor, fds float64, n int, span time.Duration) {
	var best []sample
	for i := 0; i < len(ss); {
		j := i
		for j < len(ss) && ss[j].pid == ss[i].pid {
			j++
		}
		if j-i > len(best) {
			best = ss[i:j]
		}
		i = j
	}
	if len(best) > 0 {
		first := best[0].at
		k := 0
		for k < len(best) && best[k].at.Sub(first) < time.Minute {
			k++
		}
		if len(best)-k >= 6 {
			best = best[k:]
		}
	}
	var xs, yr, yg, yf []float64
	for _, s := range best {
		xs = append(xs, s.at.Sub(best[0].at).Seconds())
		yr = append(yr, float64(s.rss)/(1<<20))
		yg = append(yg, s.goroutines)
		yf = append(yf, float64(s.fds))
	}
	if len(best) > 1 {
		span = best[len(best)-1].at.Sub(best[0].at)
	}
	return perHour(xs, yr), perHour(xs, yg), perHour(xs, yf), len(best), span
}

// slopeLimits are rule 4's bounds on a replica's resource slopes, judged
// over its longest-lived process once that spans at least MinSpan.
type slopeLimits struct {
	RSS, Goroutines, FDs float64 // per hour
	MinSpan              time.Duration
}

// limits: five times the slopes of meshfed-b over 13m55s of a 15-minute
// run (seed 25: RSS +24.6 MiB/h, goroutines +18.1/h, fds +4.1/h, which
// include the clients that join and stay), rounded. A goroutine or fd
// leaked per backend fault (some 110 an hour at the schedule's pace) or
// per churn operation (some 30,000 an hour) exceeds them; a process
// growing by more than its whole size (about 100 MiB) in an hour does
// too. Below 10 minutes the GC's sawtooth and start-up caches dominate
// (meshfed-a's 2m30s gave +84 MiB/h), so a shorter span is not judged.
var limits = slopeLimits{RSS: 128, Goroutines: 100, FDs: 24, MinSpan: 10 * time.Minute}

// judgeSlopes is rule 4's verdict on a replica's samples: the slopes
// beyond lim (none: flat), or why they were not judged.
func judgeSlopes(ss []sample, lim slopeLimits) (over []string, notJudged string) {
	r, g, f, _, span := slopes(ss)
	if span < lim.MinSpan {
		return nil, fmt.Sprintf("not judged: span %s < %s", span.Round(time.Second), lim.MinSpan)
	}
	for _, c := range []struct {
		what       string
		slope, lim float64
	}{{"RSS MiB/h", r, lim.RSS}, {"goroutines/h", g, lim.Goroutines}, {"open fds/h", f, lim.FDs}} {
		if c.slope > c.lim {
			over = append(over, fmt.Sprintf("%s %+.1f > %+.0f", c.what, c.slope, c.lim))
		}
	}
	return over, ""
}

// checkSlopes turns a replica's slope beyond limits into a violation
// (rule 4).
func (w *world) checkSlopes() {
	w.mu.Lock()
	samples := maps.Clone(w.samples)
	w.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(samples)) {
		if over, _ := judgeSlopes(samples[name], limits); len(over) > 0 {
			w.violate(Violation{Rule: "slope", Client: name, At: time.Now(),
				Detail: "growing over its longest-lived process: " + strings.Join(over, ", ")})
		}
	}
}

// report renders CHAOS.md.
func (w *world) report(start, end time.Time) string {
	truth, obs, faults := w.hist.snapshot()
	var b strings.Builder
	fmt.Fprintf(&b, "# Chaos run\n\n")
	fmt.Fprintf(&b, "Written by `make chaos` (test/chaos, issue 25): every registry kind at once under churn, "+
		"a seeded fault schedule, two meshfed replicas, raw ADS clients (SotW and delta) and grpc-go xDS clients, "+
		"and a checker over what the clients held. Replay with `make chaos CHAOS_SEED=%d CHAOS_DURATION=%s`.\n\n",
		w.set.seed, w.set.duration)
	fmt.Fprintf(&b, "- seed: `%d`\n- run: %s (from %s to %s UTC)\n- churn: one operation per registry every %s\n",
		w.set.seed, end.Sub(start).Round(time.Second), start.UTC().Format("2006-01-02 15:04:05"), end.UTC().Format("15:04:05"), w.set.every)
	grpcObs := 0
	for _, o := range obs {
		if w.grpcNamed(o.Client) != nil {
			grpcObs++
		}
	}
	fmt.Fprintf(&b, "- clients: %d raw ADS (SotW and delta, Envoy sidecar nodes), %d grpc-go (proxyless, one service per kind; what they hold read from their CSDS every %s: %d of the client observations)\n",
		len(w.clients), len(w.grpc), csdsPoll, grpcObs)
	stateFS := "a 4 MiB tmpfs in an unprivileged user and mount namespace (full: a filler file; read-only: remount ro)"
	if !w.a.state.OK() {
		stateFS = "a plain directory (no user namespaces here: the state-full and state-ro faults were skipped)"
	}
	fmt.Fprintf(&b, "- meshfed-a's state dir: %s\n\n", stateFS)

	vs := w.violations
	fmt.Fprintf(&b, "## Violations: %d (goal 0)\n\n", len(vs))
	if len(vs) > 0 {
		byRule := map[string]int{}
		for _, v := range vs {
			byRule[v.Rule]++
		}
		b.WriteString("| rule | count |\n|---|---:|\n")
		for _, r := range slices.Sorted(maps.Keys(byRule)) {
			fmt.Fprintf(&b, "| %s | %d |\n", r, byRule[r])
		}
		b.WriteString("\nThe first ones:\n\n```\n")
		for _, v := range vs[:min(len(vs), 10)] {
			b.WriteString(v.String() + "\n")
		}
		b.WriteString("```\n")
	}

	b.WriteString("\n## Events by registry\n\n| registry | push bound | heal bound | add | remove | health | uncertain | restored | client observations |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	ops := map[string]map[Op]int{}
	for _, e := range truth {
		if ops[e.Kind] == nil {
			ops[e.Kind] = map[Op]int{}
		}
		ops[e.Kind][e.Op]++
	}
	obsBy := map[string]int{}
	for _, o := range obs {
		obsBy[w.hist.KindOf(o.Key)]++
	}
	for _, k := range w.kinds {
		o := ops[k.Name()]
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %d | %d | %d |\n", k.Name(), k.Bounds().Push, k.Bounds().Heal,
			o[OpAdd], o[OpRemove], o[OpHealth], o[OpUncertain], w.restored[k.Name()], obsBy[k.Name()])
	}

	b.WriteString("\n## Faults\n\n| fault | applied |\n|---|---:|\n")
	for _, f := range slices.Sorted(maps.Keys(w.faults)) {
		fmt.Fprintf(&b, "| %s | %d |\n", f, w.faults[f])
	}
	down := 0
	for _, ivs := range faults {
		down += len(ivs)
	}
	fmt.Fprintf(&b, "\nDown intervals recorded (backends, replicas, clients): %d.\n", down)

	b.WriteString("\n## Convergence after each kind of fault\n\nFrom the fault's heal (backend back, replica ready, client reconnected) until every client holds the truth of the registry (churn paused meanwhile).\n\n")
	b.WriteString("| after | registry | n | p50 | p99 | max |\n|---|---|---:|---:|---:|---:|\n")
	for _, key := range slices.Sorted(maps.Keys(w.conv)) {
		ds := w.conv[key]
		label, reg, _ := strings.Cut(key, "|")
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s |\n", label, reg, len(ds),
			percentile(ds, 0.5).Round(time.Millisecond), percentile(ds, 0.99).Round(time.Millisecond), slices.Max(ds).Round(time.Millisecond))
	}

	fmt.Fprintf(&b, "\n## Resources\n\nLeast-squares slopes per hour over each replica's longest-lived process, after its first minute (meshfed-b is never killed). "+
		"Limits (rule 4; a slope beyond one is a slope violation): RSS %+.0f MiB/h, goroutines %+.0f/h, open fds %+.0f/h, judged when the span is at least %s "+
		"(test/chaos/report_test.go says why).\n\n", limits.RSS, limits.Goroutines, limits.FDs, limits.MinSpan)
	b.WriteString("| replica | samples | span | RSS MiB/h | goroutines/h | open fds/h | last RSS MiB | last goroutines | last fds | verdict |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, name := range slices.Sorted(maps.Keys(w.samples)) {
		ss := w.samples[name]
		r, g, f, n, span := slopes(ss)
		last := ss[len(ss)-1]
		verdict := "flat"
		if over, not := judgeSlopes(ss, limits); not != "" {
			verdict = not
		} else if len(over) > 0 {
			verdict = "growing: " + strings.Join(over, ", ")
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %+.1f | %+.1f | %+.1f | %.1f | %.0f | %d | %s |\n", name, n, span.Round(time.Second), r, g, f,
			float64(last.rss)/(1<<20), last.goroutines, last.fds, verdict)
	}
	b.WriteString("\n## Checks\n\n" + checksDoc)
	return b.String()
}

const checksDoc = `- **phantom**: no client ever holds an endpoint that was never registered (bad items injected into each kind — a multicast, broadcast or malformed address, a znode that does not parse — must never reach a client).
- **stale / missing**: after each change of the truth every client holds the key's new state within the registry's push bound; a fault on the registry, on the client's replica or on the client itself extends the deadline to the heal bound past its end.
- **removed-while-registered** (fail-static): no client ever drops an endpoint while it is registered, whatever is down (backend killed or hung, meshfed killed and warm-restarted, state dir full or read-only, a broken file).
  A backend that itself loses instances in a fault (Polaris' Nacos instances across a kill or hang) is exempt until the heal bound after the fault; the harness then registers again what it lost, as the clients' recovery does (**restored** above).
- **convergence**: after each fault heals, every client holds the truth of the registries it touched within their heal bound.
- **nack**: no raw client finds a resource failing ValidateAll, and meshfed_xds_nacks_total (grpc-go clients included) never rises.
- **exit**: meshfed never exits unless killed.
- **slope**: over each replica's longest-lived process (when it spans long enough), RSS, goroutines and open fds grow no faster than the limits of the Resources section.
- **digest**: at the end, /debug/digestz of the two replicas agree.
- **grpc-go clients** are held to phantom, stale / missing, removed-while-registered and convergence on the one service per kind each subscribes to, from what their CSDS shows (polled every 250ms: a shorter drop goes unseen); a restarted client's loss is not a removal, but it must hold every registered endpoint again within the heal bound.
`
