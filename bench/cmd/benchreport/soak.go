package main

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/meshfed/meshfed/bench"
)

// soakSample is the server's state at one moment of the soak.
type soakSample struct {
	at         time.Duration
	rss        int64
	heap       uint64
	goroutines uint64
}

// runSoak: r.c.soak of rolling-deploy churn at r.c.soakRate endpoint
// events/s against one meshfed bench server with r.c.streams streams
// connected, 10 % of them reconnecting (on a new connection) every minute
// (every third of the run when it is shorter than 3 minutes); the server's
// RSS, live heap (after two GCs) and goroutines are sampled throughout.
// At the end every stream must hold the last write of every service it
// watches.
func (r *runner) runSoak() error {
	if r.c.soak <= 0 {
		r.rep.notes = append(r.rep.notes, "SOAK not run (BENCH_SHORT=1 or -soak 0; `make soak` runs it alone)")
		return nil
	}
	dur := r.c.soak
	every := min(time.Minute, (dur / 3).Round(time.Second))
	sampleEvery := max(time.Second, dur/60)
	const procs = 2
	perLG := max(1, r.c.streams/10/procs) // streams each load generator reconnects per batch
	r.logf("SOAK: %s of churn at %.0f events/s, %d streams, 10%% reconnecting every %s", dur, r.c.soakRate, r.c.streams, every)
	srv, err := r.server(mfT)
	if err != nil {
		return err
	}
	defer srv.stop()
	var lgs loadgens
	defer func() { lgs.stop() }()
	for i := range procs {
		lg, err := r.loadgen(srv, r.c.streams/procs, i*(r.c.streams/procs))
		if err != nil {
			return err
		}
		lgs = append(lgs, lg)
	}
	if err := lgs.waitSynced(1, r.c.syncTimeout); err != nil {
		return err
	}
	if _, err := lgs.records(); err != nil {
		return err
	}
	watchers := map[int][]int{}
	for s := range r.c.streams {
		for _, svc := range bench.Watched(s, r.c.services, r.c.per, r.c.common) {
			watchers[svc] = append(watchers[svc], s)
		}
	}
	ix := recIndex{}
	churnDone := make(chan error, 1)
	t0 := time.Now()
	go func() {
		churnDone <- post(fmt.Sprintf("%s/churn?rate=%g&ramp=0s&hold=%s&from=%d", srv.ctl, r.c.soakRate, dur, r.c.common), nil)
	}()
	var samples []soakSample
	sample := func() error {
		var m bench.MemStats
		if err := getJSON(srv.ctl+"/mem", &m); err != nil {
			return err
		}
		rss, _, _ := bench.Mem(srv.pid)
		samples = append(samples, soakSample{at: time.Since(t0), rss: rss, heap: m.HeapLive, goroutines: m.Goroutines})
		return nil
	}
	// A reconnect batch: when its streams were told to reconnect, and when
	// the last of them had synced again in its new session.
	type batch struct {
		at, done int64
		streams  []int
	}
	var batches, pending []*batch
	// resynced notes the batches whose streams all synced again.
	resynced := func() error {
		if len(pending) == 0 {
			return nil
		}
		ss, err := lgs.syncs()
		if err != nil {
			return err
		}
		pending = slices.DeleteFunc(pending, func(b *batch) bool {
			var last int64
			for _, i := range b.streams {
				if i >= len(ss) || ss[i].Synced <= b.at {
					return false
				}
				last = max(last, ss[i].Synced)
			}
			b.done = last
			return true
		})
		return nil
	}
	reconnects := 0
	nextRe, nextSample := every, time.Duration(0)
	err = tickUntil(churnDone, 200*time.Millisecond, func() error {
		el := time.Since(t0)
		if el >= nextSample {
			if err := sample(); err != nil {
				return err
			}
			nextSample += sampleEvery
		}
		if el >= nextRe {
			b := &batch{at: time.Now().UnixNano()}
			for _, l := range lgs {
				var idx []int
				if err := post(l.ctl+"/reconnect?n="+strconv.Itoa(perLG), &idx); err != nil {
					return err
				}
				reconnects += len(idx)
				b.streams = append(b.streams, idx...)
			}
			batches, pending = append(batches, b), append(pending, b)
			nextRe += every
		}
		if err := resynced(); err != nil {
			return err
		}
		recs, err := lgs.records()
		if err != nil {
			return err
		}
		ix.add(recs)
		return nil
	})
	if err != nil { // the churn's, or the first error of a tick
		return err
	}
	var evs []bench.Event
	if err := getJSON(srv.ctl+"/events", &evs); err != nil {
		return err
	}
	// The last write of each service, which every watcher must hold.
	lastOf := map[int]bench.Event{}
	for _, ev := range evs {
		lastOf[ev.Svc] = ev
	}
	var last []bench.Event
	for _, ev := range lastOf {
		last = append(last, ev)
	}
	w := func(s int) []int { return watchers[s] }
	end := time.Now()
	missingLast := 0
	for time.Since(end) < 2*time.Minute {
		recs, err := lgs.records()
		if err != nil {
			return err
		}
		ix.add(recs)
		if _, missingLast = converge(ix, last, w); missingLast == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := lgs.waitSynced(1, 30*time.Second); err != nil {
		r.logf("SOAK: %v", err)
	}
	if err := resynced(); err != nil {
		return err
	}
	ss, err := lgs.syncs()
	if err != nil {
		return err
	}
	unsynced := 0
	for _, s := range ss {
		if s.Synced == 0 {
			unsynced++
		}
	}
	if err := sample(); err != nil {
		return err
	}
	st, _ := lgs.stats()
	lat, missing := converge(ix, evs, w)
	latS := bench.Summarize(lat)
	// By write time: the first and the second half of the run.
	mid := t0.Add(dur / 2).UnixNano()
	var early, late []bench.Event
	for _, ev := range evs {
		if ev.Stamp < mid {
			early = append(early, ev)
		} else {
			late = append(late, ev)
		}
	}
	le, _ := converge(ix, early, w)
	ll, _ := converge(ix, late, w)
	var resync []float64
	unfinished := 0
	for _, b := range batches {
		if b.done == 0 {
			unfinished++
			continue
		}
		resync = append(resync, float64(b.done-b.at)/1e9)
	}
	resyncS := bench.Summarize(resync)

	// Slopes per minute, over the samples after the warm-up: xds's
	// endpoint metadata cache (xds/eds.go metaCache, two generations of
	// 4,096) fills with the churn's new label sets for ≈ 80 s at 100
	// events/s and then stays at its bound.
	warm := min(max(dur/10, 2*time.Minute), dur/2)
	var xs, rss, heap, gor []float64
	for _, s := range samples {
		if s.at < warm {
			continue
		}
		xs = append(xs, s.at.Minutes())
		rss = append(rss, float64(s.rss)/1e6)
		heap = append(heap, float64(s.heap)/1e6)
		gor = append(gor, float64(s.goroutines))
	}
	mean := func(v []float64) float64 {
		t := 0.0
		for _, x := range v {
			t += x
		}
		return t / float64(max(1, len(v)))
	}
	mins := dur.Minutes()
	// Flat: no growth beyond tol of the mean over the run (a shrinking
	// heap is no leak).
	flat := func(v []float64, tol float64) bool { return bench.Slope(xs, v)*mins <= tol*mean(v) }
	span := func(v []float64) string {
		if len(v) == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f–%.1f", slices.Min(v), slices.Max(v))
	}
	sRSS, sHeap, sGor := bench.Slope(xs, rss), bench.Slope(xs, heap), bench.Slope(xs, gor)
	first, lastS := samples[0], samples[len(samples)-1]
	r.logf("SOAK: %d events, %d reconnects, p99 %.0f ms, missing %d (last writes %d), unsynced %d; slopes RSS %.2f MB/min heap %.2f MB/min goroutines %.1f/min",
		len(evs), reconnects, latS.P99, missing, missingLast, unsynced, sRSS, sHeap, sGor)
	cond := fmt.Sprintf("%s at %.0f events/s (%d events, rolling deploy over all but the %d common services), %d streams of %d clusters, %d reconnects on new connections (10 %% every %s); %d sessions opened in all",
		dur, r.c.soakRate, len(evs), r.c.common, r.c.streams, r.c.per, reconnects, every, st.Sessions)
	r.rep.add(row{id: "SOAK", figure: "RSS slope", unit: "MB/min", mf: one(sRSS),
		goal: "flat: growth over the run ≤ 10 % of the mean", met: ptr(flat(rss, 0.10)),
		note: fmt.Sprintf("%s; sampled every %s, slopes over the samples after a warm-up of %s (xds's endpoint metadata cache fills with new label sets first), where RSS stayed within %s MB; RSS %s at the start, %s at the end", cond, sampleEvery, warm, span(rss), mb(first.rss), mb(lastS.rss))})
	r.rep.add(row{id: "SOAK", figure: "live heap slope", unit: "MB/min", mf: one(sHeap),
		goal: "flat: growth ≤ 10 % of the mean", met: ptr(flat(heap, 0.10)),
		note: fmt.Sprintf("after two GCs per sample; within %s MB after the warm-up; %s at the start → %s at the end", span(heap), mb(int64(first.heap)), mb(int64(lastS.heap)))})
	r.rep.add(row{id: "SOAK", figure: "goroutines slope", unit: "/min", mf: one(sGor),
		goal: "flat: growth ≤ 2 % of the mean", met: ptr(flat(gor, 0.02)),
		note: fmt.Sprintf("%d → %d (within %s after the warm-up)", first.goroutines, lastS.goroutines, span(gor))})
	r.rep.add(row{id: "SOAK", figure: "10 % of streams reconnect → the last of them synced again", unit: "s", mf: &resyncS,
		note: fmt.Sprintf("%d batches of %d streams, each on a new connection, while the churn goes on; %d batches not resynced by the end", len(batches), perLG*procs, unfinished)})
	r.rep.add(row{id: "SOAK", figure: "write → last watcher ACK during the soak", unit: "ms", mf: &latS,
		goal: "no stream left behind", met: ptr(missingLast == 0 && unsynced == 0),
		note: fmt.Sprintf("at the end %d (stream, service) pairs lack their service's last write and %d streams are not synced; over all events %d (event, watcher) pairs never arrived. p99 of writes in the first half %.0f ms, second half %.0f ms. A write's figure waits for every watcher, including one that is reconnecting: it counts once that stream resynced (the row above)", missingLast, unsynced, missing, bench.Summarize(le).P99, bench.Summarize(ll).P99)})
	return nil
}
