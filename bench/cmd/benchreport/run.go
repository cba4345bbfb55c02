package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/meshfed/meshfed/bench"
	meshfedconfig "github.com/meshfed/meshfed/config"
)

var (
	// defDebounce is clusters.yaml's default.
	defDebounce = debounce{name: "default", quiet: time.Duration(meshfedconfig.DefaultDebounceQuiet), max: time.Duration(meshfedconfig.DefaultDebounceMax)}
	lowDebounce = debounce{name: "low", quiet: time.Millisecond, max: 50 * time.Millisecond}
	mfT         = target{label: "meshfed", impl: "meshfed", args: defDebounce.args()}
	mfLowT      = target{label: "meshfed low", impl: "meshfed", args: lowDebounce.args()}
	blT         = target{label: "baseline", impl: "baseline"}
	floorT      = target{label: "floor", impl: "floor"}
)

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func one(v float64) *bench.Summary { return &bench.Summary{N: 1, P50: v, P99: v, Max: v} }

func (r *runner) runS3a() error {
	r.logf("S3a: EDS build+marshal of one %d-endpoint service on one core", 10000)
	prev := runtime.GOMAXPROCS(1)
	lat, size := s3a(r.c.s3aIters, 10000)
	runtime.GOMAXPROCS(prev)
	s := bench.Summarize(lat)
	r.rep.add(row{id: "S3a", figure: "EDS build+marshal, 10,000 endpoints, 1 core", unit: "ms",
		mf: &s, goal: "p99 ≤ 2 ms", met: ptr(s.P99 <= 2),
		note: fmt.Sprintf("translate.Translator rebuild of the changed service (all its resources; its CLA incrementally: only the changed endpoint's LbEndpoint is built and validated, the rest reused) + MarshalResource of its %d-byte CLA (assembled from cached encodings); %d runs. The baseline uses the same builders.", size, s.N)})
	return nil
}

func (r *runner) runS1() error {
	res := map[string]eventResult{}
	for _, t := range []target{mfT, mfLowT, blT, floorT} {
		n := r.c.s1Events
		if t.impl == "baseline" {
			n = r.c.s1BaseEvents
		}
		r.logf("S1 %s: %d delta streams × %d clusters, %d flips", t.label, r.c.streams, r.c.per, n)
		srv, lgs, err := r.withStreams(t, r.c.streams, nil)
		if err != nil {
			return err
		}
		svcs := make([]int, n)
		for i := range svcs {
			svcs[i] = i % r.c.common
		}
		e, err := r.events(srv, lgs, svcs, 2*time.Minute)
		lgs.stop()
		srv.stop()
		if err != nil {
			return err
		}
		res[t.label] = e
		r.logf("S1 %s: p50 %.1f p99 %.1f max %.1f ms, cpu %.1f ms/event", t.label, e.lat.P50, e.lat.P99, e.lat.Max, e.cpuPerEvent)
	}
	mf, low, bl, fl := res[mfT.label], res[mfLowT.label], res[blT.label], res[floorT.label]
	streams := fmt.Sprintf("%d delta streams (%d clusters each; the flipped service is watched by all)", r.c.streams, r.c.per)
	r.rep.add(row{id: "S1", figure: "one endpoint flips: write → last ACK (" + defDebounce.String() + ")", unit: "ms",
		mf: &mf.lat, bl: &bl.lat, goal: "p99 ≤ 50 ms", met: ptr(mf.lat.P99 <= 50 && mf.missing == 0),
		note: streams + missingNote(mf.missing, bl.missing)})
	r.rep.add(row{id: "S1", figure: "same, " + lowDebounce.String(), unit: "ms",
		mf: &low.lat, bl: &bl.lat, goal: "p99 ≤ 50 ms", met: ptr(low.lat.P99 <= 50 && low.missing == 0),
		note: missingNote(low.missing, 0)})
	r.rep.add(row{id: "S1", figure: "server CPU per event", unit: "ms",
		mf: one(mf.cpuPerEvent), bl: one(bl.cpuPerEvent), goal: "≤ 30 ms", met: ptr(mf.cpuPerEvent <= 30),
		note: "/proc utime+stime of the server over the events (10 ms ticks) ÷ events; includes idle time between events"})
	r.rep.add(row{id: "S1", figure: "bytes received by all streams per event", unit: "KB",
		mf: one(mf.bytesPerEvt / 1024), bl: one(bl.bytesPerEvt / 1024)})
	r.rep.add(row{id: "S1", figure: "floor: bare grpc-go sending the same bytes, write → last ACK", unit: "ms",
		mf: &mf.lat, bl: &fl.lat,
		note: fmt.Sprintf("baseline column: bench.Floor (benchserver -impl floor), a delta ADS server with no control-plane logic: the changed CLA's response is serialized once and the same bytes are sent on each subscribed stream's goroutine, with meshfed's flow-control windows; it received %.1f KB per event (meshfed %.1f KB)%s",
			fl.bytesPerEvt/1024, mf.bytesPerEvt/1024, missingNote(0, fl.missing))})
	r.rep.add(row{id: "S1", figure: "floor: server CPU per event", unit: "ms", mf: one(mf.cpuPerEvent), bl: one(fl.cpuPerEvent),
		note: "baseline column: the floor. The ratio is meshfed's CPU per event over what gRPC and the kernel alone cost for the same sends"})
	return nil
}

func missingNote(mf, bl int) string {
	if mf == 0 && bl == 0 {
		return ""
	}
	return fmt.Sprintf("; NOT delivered (stream, event) pairs: meshfed %d, baseline %d", mf, bl)
}

func (r *runner) runDS() error {
	res := map[string]eventResult{}
	for _, t := range []target{mfT, blT} {
		for _, delta := range []bool{true, false} {
			r.logf("DS %s delta=%v: %d wildcard streams × %d clusters", t.label, delta, r.c.dsStreams, r.c.services)
			srv, lgs, err := r.withStreams(t, r.c.dsStreams, []string{"-wildcard", "-delta=" + strconv.FormatBool(delta)})
			if err != nil {
				return err
			}
			svcs := make([]int, r.c.dsEvents)
			for i := range svcs {
				svcs[i] = (r.c.services/2 + 7*i) % r.c.services
			}
			e, err := r.events(srv, lgs, svcs, 2*time.Minute)
			lgs.stop()
			srv.stop()
			if err != nil {
				return err
			}
			res[fmt.Sprintf("%s/%v", t.label, delta)] = e
		}
	}
	md, ms_, bd, bs := res["meshfed/true"], res["meshfed/false"], res["baseline/true"], res["baseline/false"]
	per := func(e eventResult) float64 { return e.bytesPerEvt / float64(max(1, e.streams)) }
	ratio := per(md) / per(ms_) * 100
	r.rep.add(row{id: "Δ", figure: fmt.Sprintf("bytes per stream per single-endpoint event, delta (%d clusters)", r.c.services), unit: "B",
		mf: one(per(md)), bl: one(per(bd))})
	r.rep.add(row{id: "Δ", figure: "same, SotW", unit: "B", mf: one(per(ms_)), bl: one(per(bs)),
		note: "meshfed's SotW EDS responses carry only the changed CLAs (Envoy allows that for EDS); CDS/LDS stay full-state"})
	r.rep.add(row{id: "Δ", figure: "delta bytes as % of SotW", unit: "%", mf: one(ratio), bl: one(per(bd) / per(bs) * 100),
		goal: "≤ 1 %", met: ptr(ratio <= 1)})
	r.rep.add(row{id: "Δ", figure: "server CPU per event, delta", unit: "ms", mf: one(md.cpuPerEvent), bl: one(bd.cpuPerEvent)})
	r.rep.add(row{id: "Δ", figure: "server CPU per event, SotW", unit: "ms", mf: one(ms_.cpuPerEvent), bl: one(bs.cpuPerEvent)})
	r.rep.add(row{id: "Δ", figure: "write → last ACK, delta", unit: "ms", mf: &md.lat, bl: &bd.lat})
	r.rep.add(row{id: "Δ", figure: "write → last ACK, SotW", unit: "ms", mf: &ms_.lat, bl: &bs.lat,
		note: fmt.Sprintf("%d Envoy-like streams (wildcard CDS + EDS of all %d clusters), %d events each", r.c.dsStreams, r.c.services, r.c.dsEvents)})
	return nil
}

// s2Result is one S2 run.
type s2Result struct {
	all, early, late bench.Summary
	cores            float64
	events, missing  int
	drain            time.Duration
}

func (r *runner) runS2() error {
	// Who watches which service.
	watchers := map[int][]int{}
	for s := range r.c.streams {
		for _, svc := range bench.Watched(s, r.c.services, r.c.per, r.c.common) {
			watchers[svc] = append(watchers[svc], s)
		}
	}
	res := map[string]s2Result{}
	for _, t := range []target{mfT, mfLowT, blT} {
		r.logf("S2 %s: rolling deploy ramping to %.0f events/s over %s, then %s", t.label, r.c.s2Rate, r.c.s2Ramp, r.c.s2Hold)
		srv, lgs, err := r.withStreams(t, r.c.streams, nil)
		if err != nil {
			return err
		}
		if _, err := lgs.records(); err != nil {
			return err
		}
		ix := recIndex{}
		var mu sync.Mutex
		churnDone := make(chan error, 1)
		t0 := time.Now()
		go func() {
			url := fmt.Sprintf("%s/churn?rate=%g&ramp=%s&hold=%s&from=%d", srv.ctl, r.c.s2Rate, r.c.s2Ramp, r.c.s2Hold, r.c.common)
			churnDone <- post(url, nil)
		}()
		var cpuA, cpuB time.Duration
		churnErr := tickUntil(churnDone, 500*time.Millisecond, func() error {
			el := time.Since(t0)
			if cpuA == 0 && el >= r.c.s2Ramp {
				cpuA = srv.cpu()
			}
			if cpuB == 0 && el >= r.c.s2Ramp+r.c.s2Hold-time.Second {
				cpuB = srv.cpu()
			}
			recs, err := lgs.records()
			if err == nil {
				mu.Lock()
				ix.add(recs)
				mu.Unlock()
			}
			return nil
		})
		holdCPU := r.c.s2Hold - time.Second - (time.Since(t0) - r.c.s2Ramp - r.c.s2Hold) // approximate window
		_ = holdCPU
		if churnErr != nil {
			lgs.stop()
			srv.stop()
			return churnErr
		}
		// Drain: until every event arrived or no new record for 5 s (cap 3 min).
		var evs []bench.Event
		if err := getJSON(srv.ctl+"/events", &evs); err != nil {
			return err
		}
		end := time.Now()
		quietSince := time.Now()
		for time.Since(end) < 3*time.Minute && time.Since(quietSince) < 5*time.Second {
			recs, err := lgs.records()
			if err != nil {
				return err
			}
			if len(recs) > 0 {
				quietSince = time.Now()
				ix.add(recs)
			}
			if _, miss := converge(ix, evs[len(evs)-1:], func(s int) []int { return watchers[s] }); miss == 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		drain := time.Since(end)
		lgs.stop()
		srv.stop()
		w := func(s int) []int { return watchers[s] }
		lat, missing := converge(ix, evs, w)
		// Hold phase halves, by write time.
		holdStart := t0.Add(r.c.s2Ramp).UnixNano()
		mid := holdStart + int64(r.c.s2Hold)/2
		var early, late []bench.Event
		for _, ev := range evs {
			switch {
			case ev.Stamp >= mid:
				late = append(late, ev)
			case ev.Stamp >= holdStart:
				early = append(early, ev)
			}
		}
		le, _ := converge(ix, early, w)
		ll, _ := converge(ix, late, w)
		cores := 0.0
		if cpuB > cpuA {
			cores = float64(cpuB-cpuA) / float64(r.c.s2Hold-time.Second)
		}
		res[t.label] = s2Result{all: bench.Summarize(lat), early: bench.Summarize(le), late: bench.Summarize(ll),
			cores: cores, events: len(evs), missing: missing, drain: drain}
		s := res[t.label]
		r.logf("S2 %s: %d events, p50 %.0f p99 %.0f max %.0f ms, %.2f cores, missing %d", t.label, s.events, s.all.P50, s.all.P99, s.all.Max, s.cores, s.missing)
	}
	mf, low, bl := res[mfT.label], res[mfLowT.label], res[blT.label]
	growth := func(s s2Result) string {
		return fmt.Sprintf("hold p99 first half %.0f ms → second half %.0f ms; %d events, %d (event, stream) pairs never ACKed; last writes ACKed %.1f s after churn stopped",
			s.early.P99, s.late.P99, s.events, s.missing, s.drain.Seconds())
	}
	noGrowth := func(s s2Result) bool { return s.late.P99 <= 1.5*s.early.P99+50 && s.missing == 0 }
	r.rep.add(row{id: "S2", figure: "rolling deploy: write → last ACK (" + defDebounce.String() + ")", unit: "ms",
		mf: &mf.all, bl: &bl.all, goal: "p99 ≤ 250 ms, no queue growth", met: ptr(mf.all.P99 <= 250 && noGrowth(mf)),
		note: "meshfed: " + growth(mf) + ". Baseline: " + growth(bl)})
	r.rep.add(row{id: "S2", figure: "same, " + lowDebounce.String(), unit: "ms",
		mf: &low.all, bl: &bl.all, goal: "p99 ≤ 250 ms, no queue growth", met: ptr(low.all.P99 <= 250 && noGrowth(low)),
		note: growth(low)})
	r.rep.add(row{id: "S2", figure: "server CPU during the hold", unit: "cores",
		mf: one(mf.cores), bl: one(bl.cores), goal: "≤ 1.2 cores", met: ptr(mf.cores <= 1.2),
		note: fmt.Sprintf("low debounce: %.2f cores", low.cores)})
	return nil
}

func (r *runner) runS3b() error {
	type res struct {
		wall    bench.Summary
		cpu     float64
		marshal bench.MarshalStats
		sent    int64
	}
	out := map[string]res{}
	for _, t := range []target{mfT, blT} {
		var x res
		for _, count := range []bool{false, true} {
			extra := []string{"-empty"}
			if count {
				extra = append(extra, "-count-marshals")
			}
			r.logf("S3b %s (count marshals %v): full CDS+EDS push to %d streams", t.label, count, r.c.streams)
			srv, err := r.server(t, extra...)
			if err != nil {
				return err
			}
			lg, err := r.loadgen(srv, r.c.streams, 0)
			if err != nil {
				srv.stop()
				return err
			}
			lgs := loadgens{lg}
			deadline := time.Now().Add(r.c.syncTimeout)
			for {
				st, err := lgs.stats()
				if err != nil {
					return err
				}
				if st.Sessions >= int64(r.c.streams) || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			time.Sleep(2 * time.Second) // subscriptions registered
			st0, _ := lgs.stats()
			cpu0 := srv.cpu()
			var ev bench.Event
			if err := post(srv.ctl+"/load", &ev); err != nil {
				return err
			}
			err = lgs.waitSynced(1, r.c.syncTimeout)
			cpu1 := srv.cpu()
			st1, _ := lgs.stats()
			if err == nil {
				if count {
					err = getJSON(srv.ctl+"/marshal", &x.marshal)
					x.sent = st1.Bytes - st0.Bytes
				} else {
					ss, e := lgs.syncs()
					err = e
					var lat []float64
					for _, s := range ss {
						lat = append(lat, float64(s.Synced-ev.Stamp)/1e6)
					}
					x.wall = bench.Summarize(lat)
					x.cpu = ms(cpu1 - cpu0)
				}
			}
			lgs.stop()
			srv.stop()
			if err != nil {
				return fmt.Errorf("%s: %w", t.label, err)
			}
		}
		out[t.label] = x
		r.logf("S3b %s: max %.0f ms, cpu %.0f ms, %d serializations of %d distinct resources", t.label, x.wall.Max, x.cpu, x.marshal.Calls, x.marshal.Distinct)
	}
	mf, bl := out[mfT.label], out[blT.label]
	r.rep.add(row{id: "S3b", figure: fmt.Sprintf("full CDS+EDS push to %d streams: write → each stream ACKed all", r.c.streams), unit: "ms",
		mf: &mf.wall, bl: &bl.wall, goal: "max ≤ 1 s", met: ptr(mf.wall.Max <= 1000),
		note: fmt.Sprintf("servers start empty, %d delta streams subscribe to %d clusters each, then one write publishes %d services × %d endpoints; p50/p99/max over streams (debounce included)", r.c.streams, r.c.per, r.c.services, r.c.eps)})
	r.rep.add(row{id: "S3b", figure: "server CPU for the push", unit: "ms", mf: one(mf.cpu), bl: one(bl.cpu)})
	mr := func(x res) float64 { return float64(x.marshal.Calls) / float64(max(1, x.marshal.Distinct)) }
	sentRes := int64(r.c.streams) * int64(r.c.per) * 2
	r.rep.add(row{id: "S3b", figure: "resource serializations ÷ distinct resources", unit: "×",
		mf: one(mr(mf)), bl: one(mr(bl)), goal: "each resource marshalled once per version", met: ptr(mf.marshal.Calls <= mf.marshal.Distinct*21/20),
		note: fmt.Sprintf("separate run with runtime.MemProfileRate=1, counting the output buffers proto marshalling allocates under go-control-plane's cache.MarshalResource (the only serializer of resources; one buffer per resource). %d distinct resources (CDS+EDS of every service), %d sent in all (%s); meshfed serialized %d (%s), the baseline %d (%s)",
			mf.marshal.Distinct, sentRes, mb(mf.sent), mf.marshal.Calls, mb(mf.marshal.Bytes), bl.marshal.Calls, mb(bl.marshal.Bytes))})
	return nil
}

func mb(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }

func (r *runner) runS4() error {
	type res struct {
		acked, fromKill bench.Summary
		peak            int64
	}
	out := map[string]res{}
	for _, t := range []target{mfT, blT} {
		r.logf("S4 %s: restart under %d streams", t.label, r.c.streams)
		srv, lgs, err := r.withStreams(t, r.c.streams, nil)
		if err != nil {
			return err
		}
		addr := srv.xds
		kill := time.Now().UnixNano()
		srv.stop()
		srv2, err := r.server(t, "-xds", addr)
		if err != nil {
			lgs.stop()
			return err
		}
		err = lgs.waitSynced(2, r.c.syncTimeout)
		_, peak, _ := bench.Mem(srv2.pid)
		ss, err2 := lgs.syncs()
		lgs.stop()
		srv2.stop()
		if err != nil || err2 != nil {
			return fmt.Errorf("%s: %v %v", t.label, err, err2)
		}
		var a, k []float64
		for _, s := range ss {
			a = append(a, float64(s.Synced-srv2.ready)/1e6)
			k = append(k, float64(s.Synced-kill)/1e6)
		}
		out[t.label] = res{acked: bench.Summarize(a), fromKill: bench.Summarize(k), peak: peak}
		r.logf("S4 %s: max %.0f ms after READY, peak RSS %s", t.label, out[t.label].acked.Max, mb(peak))
	}
	mf, bl := out[mfT.label], out[blT.label]
	r.rep.add(row{id: "S4", figure: fmt.Sprintf("restart: new server serving → each of %d streams re-ACKed all", r.c.streams), unit: "ms",
		mf: &mf.acked, bl: &bl.acked, goal: "max ≤ 3 s", met: ptr(mf.acked.Max <= 3000),
		note: "clients reconnect with gRPC backoff (base 100 ms, ×1.6, jitter 0.2, max 1 s), as sidecars do; SIGTERM to the old server, new one on the same port"})
	r.rep.add(row{id: "S4", figure: "same, from SIGTERM to the old server", unit: "ms", mf: &mf.fromKill, bl: &bl.fromKill,
		note: "includes the new process's start and its first snapshot build"})
	r.rep.add(row{id: "S4", figure: "peak RSS of the restarted server", unit: "MB",
		mf: one(float64(mf.peak) / 1e6), bl: one(float64(bl.peak) / 1e6), goal: "≤ 1 GiB", met: ptr(mf.peak <= 1<<30)})
	return nil
}

// s5Point is the server's memory with n streams.
type s5Point struct {
	n   int
	mem bench.MemStats
	rss int64
}

func (r *runner) runS5() error {
	type res struct {
		pts  []s5Point
		idle float64
	}
	out := map[string]res{}
	for _, t := range []target{mfT, blT} {
		r.logf("S5 %s: memory at %v streams", t.label, r.c.s5Steps)
		srv, err := r.server(t)
		if err != nil {
			return err
		}
		var x res
		var lgs loadgens
		prev := 0
		for _, n := range r.c.s5Steps {
			if n > prev {
				lg, err := r.loadgen(srv, n-prev, prev)
				if err != nil {
					lgs.stop()
					srv.stop()
					return err
				}
				lgs = append(lgs, lg)
				if err := lgs.waitSynced(1, r.c.syncTimeout); err != nil {
					lgs.stop()
					srv.stop()
					return err
				}
				prev = n
			}
			time.Sleep(time.Second)
			var m bench.MemStats
			if err := getJSON(srv.ctl+"/mem", &m); err != nil {
				return err
			}
			rss, _, _ := bench.Mem(srv.pid)
			x.pts = append(x.pts, s5Point{n: n, mem: m, rss: rss})
			if n == r.c.streams {
				c0 := srv.cpu()
				time.Sleep(r.c.idle)
				x.idle = float64(srv.cpu()-c0) / float64(r.c.idle) * 100
			}
		}
		lgs.stop()
		srv.stop()
		out[t.label] = x
	}
	perStream := func(x res, f func(s5Point) float64) float64 {
		a, b := x.pts[0], x.pts[len(x.pts)-1]
		return (f(b) - f(a)) / float64(b.n-a.n) / 1024
	}
	heap := func(p s5Point) float64 { return float64(p.mem.HeapLive) }
	rss := func(p s5Point) float64 { return float64(p.rss) }
	mf, bl := out[mfT.label], out[blT.label]
	last := r.c.s5Steps[len(r.c.s5Steps)-1]
	r.rep.add(row{id: "S5", figure: fmt.Sprintf("Go live heap per stream (0 → %d streams)", last), unit: "KB",
		mf: one(perStream(mf, heap)), bl: one(perStream(bl, heap)), goal: "≤ 100 KB", met: ptr(perStream(mf, heap) <= 100)})
	r.rep.add(row{id: "S5", figure: fmt.Sprintf("RSS per stream (0 → %d streams)", last), unit: "KB",
		mf: one(perStream(mf, rss)), bl: one(perStream(bl, rss)), goal: "≤ 100 KB", met: ptr(perStream(mf, rss) <= 100)})
	r.rep.add(row{id: "S5", figure: fmt.Sprintf("idle CPU with %d streams", r.c.streams), unit: "% core",
		mf: one(mf.idle), bl: one(bl.idle), goal: "≤ 2 %", met: ptr(mf.idle <= 2),
		note: fmt.Sprintf("over %s with no change", r.c.idle)})
	var tbl [][]string
	for i := range mf.pts {
		p, q := mf.pts[i], bl.pts[i]
		tbl = append(tbl, []string{strconv.Itoa(p.n), mbf(p.mem.HeapLive), mbf(uint64(p.rss)), mbf(q.mem.HeapLive), mbf(uint64(q.rss))})
	}
	r.rep.s5 = tbl
	return nil
}

func mbf(b uint64) string { return fmt.Sprintf("%.1f", float64(b)/1e6) }

func (r *runner) runS6() error {
	r.logf("S6: registry rows, write → client ACK (go test ./bench/s6)")
	f, err := os.CreateTemp(r.dir, "s6-*.json")
	if err != nil {
		return err
	}
	f.Close()
	cmd := exec.Command("go", "test", "-count=1", "-timeout=20m", "-run", "^TestS6$", "./bench/s6",
		"-args", "-s6.out="+f.Name(), "-s6.n="+strconv.Itoa(r.c.s6N))
	outb, err := cmd.CombinedOutput()
	if err != nil {
		r.rep.notes = append(r.rep.notes, "S6 go test failed: "+lastLines(string(outb), 8))
	}
	b, _ := os.ReadFile(f.Name())
	var rows []bench.S6Result
	if len(b) > 0 {
		if err := json.Unmarshal(b, &rows); err != nil {
			return err
		}
	}
	for _, x := range rows {
		note := x.Note
		if x.Ingest.N > 0 {
			note += fmt.Sprintf("; of which registry ingest (write → Sink.Publish) p50 %.1f / p99 %.1f ms", x.Ingest.P50, x.Ingest.P99)
		}
		rw := row{id: "S6", figure: fmt.Sprintf("%s write → last of %d ADS clients ACKs it", x.Name, x.Clients), unit: "ms", mf: &x.Latency, note: note}
		if x.Skipped != "" {
			rw.mf = nil
			rw.note = "not run: " + x.Skipped
		}
		if x.Goal > 0 {
			rw.goal = fmt.Sprintf("p99 ≤ %s", time.Duration(x.Goal))
			if rw.mf != nil {
				rw.met = ptr(x.Latency.P99 <= ms(time.Duration(x.Goal)))
			}
		}
		r.rep.add(rw)
	}
	return nil
}
