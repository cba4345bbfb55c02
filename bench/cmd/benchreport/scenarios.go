package main

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/translate"
)

// debounce is a meshfed debounce setting.
type debounce struct {
	name       string
	quiet, max time.Duration
}

func (d debounce) args() []string {
	return []string{"-quiet", d.quiet.String(), "-max", d.max.String()}
}

func (d debounce) String() string { return fmt.Sprintf("quiet %s / max %s", d.quiet, d.max) }

// target is one server configuration under test.
type target struct {
	label string // "meshfed", "meshfed low" (lowDebounce), "baseline"
	impl  string
	args  []string
}

func (r *runner) server(t target, extra ...string) (*proc, error) {
	args := append([]string{"-impl", t.impl, "-services", strconv.Itoa(r.c.services), "-endpoints", strconv.Itoa(r.c.eps)}, t.args...)
	args = append(args, extra...)
	return start("benchserver "+t.label, r.bin("benchserver"), nil, args...)
}

// loadgen starts n streams (indexes offset…) against srv.
func (r *runner) loadgen(srv *proc, n, offset int, extra ...string) (*proc, error) {
	args := []string{"-xds", srv.xds, "-n", strconv.Itoa(n), "-offset", strconv.Itoa(offset),
		"-services", strconv.Itoa(r.c.services), "-per", strconv.Itoa(r.c.per), "-common", strconv.Itoa(r.c.common)}
	args = append(args, extra...)
	return start("loadgen", r.bin("loadgen"), []string{"GOMAXPROCS=1"}, args...)
}

// recIndex holds load generator records per (stream, svc), in seq order.
type recIndex map[[2]int32][][2]int64

func (ix recIndex) add(recs [][4]int64) {
	for _, r := range recs {
		k := [2]int32{int32(r[0]), int32(r[1])}
		ix[k] = append(ix[k], [2]int64{r[2], r[3]})
	}
}

// ackOf returns when stream s first ACKed a CLA of svc holding seq ≥ q.
func (ix recIndex) ackOf(s, svc int, q int64) (int64, bool) {
	l := ix[[2]int32{int32(s), int32(svc)}]
	i, _ := slices.BinarySearchFunc(l, q, func(e [2]int64, q int64) int {
		switch {
		case e[0] < q:
			return -1
		case e[0] > q:
			return 1
		}
		return 0
	})
	if i == len(l) {
		return 0, false
	}
	return l[i][1], true
}

// converge returns, per event, write → last watcher's ACK (ms), and how
// many (event, watcher) pairs never arrived.
func converge(ix recIndex, evs []bench.Event, watchers func(svc int) []int) (lat []float64, missing int) {
	for _, ev := range evs {
		var last int64
		ok := true
		for _, s := range watchers(ev.Svc) {
			t, got := ix.ackOf(s, ev.Svc, ev.Seq)
			if !got {
				missing++
				ok = false
				continue
			}
			last = max(last, t)
		}
		if ok {
			lat = append(lat, float64(last-ev.Stamp)/1e6)
		}
	}
	return lat, missing
}

// eventResult is what a run of spaced single-endpoint events measured.
type eventResult struct {
	lat         bench.Summary // write → last ACK, ms
	cpuPerEvent float64       // server CPU ms per event
	bytesPerEvt float64       // bytes received by all streams per event
	streams     int
	missing     int
	events      int
}

// events flips one endpoint in each of svcs in turn, waiting for every
// stream (all watch these services) to ACK it before the next.
func (r *runner) events(srv *proc, lgs loadgens, svcs []int, wait time.Duration) (eventResult, error) {
	return r.eventsWith(srv, lgs, svcs, wait, flipEvent(srv))
}

// flipEvent flips one endpoint of a service of srv's registry.
func flipEvent(srv *proc) func(svc int) (bench.Event, error) {
	return func(svc int) (bench.Event, error) {
		var ev bench.Event
		err := post(fmt.Sprintf("%s/event?svc=%d", srv.ctl, svc), &ev)
		return ev, err
	}
}

// eventsWith is events with the change made by flip (which stamps it);
// srv is the process whose CPU is counted.
func (r *runner) eventsWith(srv *proc, lgs loadgens, svcs []int, wait time.Duration, flip func(svc int) (bench.Event, error)) (eventResult, error) {
	return r.eventsWatched(srv, lgs, svcs, wait, flip, nil)
}

// eventsWatched is eventsWith where only watchers(svc) (nil: every
// stream) watch a service.
func (r *runner) eventsWatched(srv *proc, lgs loadgens, svcs []int, wait time.Duration, flip func(svc int) (bench.Event, error), watchedBy func(svc int) []int) (eventResult, error) {
	if _, err := lgs.records(); err != nil { // drop the initial sync's records
		return eventResult{}, err
	}
	st0, err := lgs.stats()
	if err != nil {
		return eventResult{}, err
	}
	all := make([]int, st0.Streams)
	for i := range all {
		all[i] = i
	}
	watchers := func(int) []int { return all }
	if watchedBy != nil {
		watchers = watchedBy
	}
	ix := recIndex{}
	var evs []bench.Event
	profiled := r.profile(srv)
	defer func() { <-profiled }()
	cpu0 := srv.cpu()
	for _, svc := range svcs {
		ev, err := flip(svc)
		if err != nil {
			return eventResult{}, err
		}
		evs = append(evs, ev)
		deadline := time.Now().Add(wait)
		for {
			recs, err := lgs.records()
			if err != nil {
				return eventResult{}, err
			}
			ix.add(recs)
			if _, miss := converge(ix, []bench.Event{ev}, watchers); miss == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cpu1 := srv.cpu()
	st1, err := lgs.stats()
	if err != nil {
		return eventResult{}, err
	}
	lat, missing := converge(ix, evs, watchers)
	n := float64(len(evs))
	return eventResult{
		lat:         bench.Summarize(lat),
		cpuPerEvent: float64(cpu1-cpu0) / float64(time.Millisecond) / n,
		bytesPerEvt: float64(st1.Bytes-st0.Bytes) / n,
		streams:     st0.Streams,
		missing:     missing,
		events:      len(evs),
	}, nil
}

// withStreams starts a server and n streams and waits until all synced.
func (r *runner) withStreams(t target, n int, lgArgs []string, srvArgs ...string) (*proc, loadgens, error) {
	srv, err := r.server(t, srvArgs...)
	if err != nil {
		return nil, nil, err
	}
	lg, err := r.loadgen(srv, n, 0, lgArgs...)
	if err != nil {
		srv.stop()
		return nil, nil, err
	}
	lgs := loadgens{lg}
	if err := lgs.waitSynced(1, r.c.syncTimeout); err != nil {
		lgs.stop()
		srv.stop()
		return nil, nil, fmt.Errorf("%s: %w", t.label, err)
	}
	return srv, lgs, nil
}

// S3a: build + marshal of one 10,000-endpoint service's EDS on one core.
func s3a(iters, endpoints int) ([]float64, int) {
	big := bench.BigService(endpoints)
	tr := translate.NewTranslator()
	name := translate.ClusterName(big.Hostname, bench.Port)
	var out []float64
	size := 0
	for i := range iters + 3 {
		svc := big // a new pointer: the translator rebuilds it
		svc.Endpoints = slices.Clone(big.Endpoints)
		svc.Endpoints[i%endpoints].Health = model.Health((i + 1) % 2)
		t0 := time.Now()
		tr.Translate(model.NewSnapshot(uint64(i+1), []*model.Service{&svc}))
		cla := tr.Resources(translate.KindOf("", translate.EndpointType))[name]
		b, err := cache.MarshalResource(cla)
		d := time.Since(t0)
		if err != nil {
			panic(err)
		}
		size = len(b)
		if i >= 3 { // warm-up
			out = append(out, float64(d)/1e6)
		}
	}
	return out, size
}
