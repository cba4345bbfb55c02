package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/meshfed/meshfed/bench"
)

// scopedRun is what one run of SC measured.
type scopedRun struct {
	streams       int
	connectBytes  float64 // per stream, received until synced
	rssPerStream  float64 // KB
	inScope       eventResult
	outScopeBytes int64 // received by every stream for out-of-scope flips
}

// runSC: the scoped row (issue 23, docs/architecture.md §3.7). scServices
// services × eps endpoints; SotW Envoy-like wildcard streams (CDS, then
// EDS of every cluster) in scNamespaces namespaces. Scoped: a Sidecar per
// namespace imports scHosts services (bench.ScopeConfig), scStreams
// streams. Unscoped: no Sidecar, scUnscoped streams (each receives the
// whole catalog, so fewer of them: the goals are per stream). Both runs
// use the same server binary and load generators.
func (r *runner) runSC() error {
	c := r.c
	un, err := r.scopedRun(false, c.scUnscoped)
	if err != nil {
		return fmt.Errorf("unscoped: %w", err)
	}
	sc, err := r.scopedRun(true, c.scStreams)
	if err != nil {
		return fmt.Errorf("scoped: %w", err)
	}
	r.logf("SC: bytes at connect per stream %.0f scoped vs %.0f unscoped; RSS per stream %.1f vs %.1f KB; CPU per in-scope flip %.1f vs %.1f ms; out-of-scope flips: %d bytes",
		sc.connectBytes, un.connectBytes, sc.rssPerStream, un.rssPerStream, sc.inScope.cpuPerEvent, un.inScope.cpuPerEvent, sc.outScopeBytes)
	setup := fmt.Sprintf("%d services × %d endpoints in %d namespaces; SotW wildcard CDS + EDS streams; scoped: %d streams, a Sidecar per namespace importing %d services; unscoped: %d streams, no Sidecar",
		c.scServices, c.eps, c.scNamespaces, c.scStreams, c.scHosts, c.scUnscoped)
	pct := 100 * sc.connectBytes / un.connectBytes
	r.rep.add(row{id: "SC", figure: "bytes per stream at connect, scoped (baseline column: unscoped)", unit: "KB",
		mf: one(sc.connectBytes / 1e3), bl: one(un.connectBytes / 1e3), goal: "≤ 1 % of unscoped", met: ptr(pct <= 1),
		note: fmt.Sprintf("%.2f %% of unscoped; %s", pct, setup)})
	r.rep.add(row{id: "SC", figure: "RSS per stream, scoped (baseline column: unscoped)", unit: "KB",
		mf: one(sc.rssPerStream), bl: one(un.rssPerStream), goal: "≤ unscoped", met: ptr(sc.rssPerStream <= un.rssPerStream),
		note: "server RSS after the streams synced minus before, after two GCs and FreeOSMemory (as S5, S7), per stream"})
	r.rep.add(row{id: "SC", figure: "server CPU per in-scope change, scoped (baseline column: unscoped)", unit: "ms",
		mf: one(sc.inScope.cpuPerEvent), bl: one(un.inScope.cpuPerEvent), goal: "≤ unscoped", met: ptr(sc.inScope.cpuPerEvent <= un.inScope.cpuPerEvent),
		note: fmt.Sprintf("%d endpoint flips of services some Sidecar imports (every stream's, unscoped); write → last watcher's ACK p99 %.0f ms scoped, %.0f ms unscoped%s",
			sc.inScope.events, sc.inScope.lat.P99, un.inScope.lat.P99, missingNote(sc.inScope.missing, un.inScope.missing))})
	r.rep.add(row{id: "SC", figure: "bytes sent to streams for changes out of every scope", unit: "B",
		mf: one(float64(sc.outScopeBytes)), goal: "0", met: ptr(sc.outScopeBytes == 0),
		note: "endpoint flips of services no Sidecar imports; every stream's received bytes, 2 s after each"})
	return nil
}

// scopedRun starts a server (with the Sidecars when scoped) and n
// streams, and measures one run of SC.
func (r *runner) scopedRun(scoped bool, n int) (scopedRun, error) {
	c := r.c
	services := strconv.Itoa(c.scServices)
	srvArgs := []string{"-services", services}
	lgArgs := []string{"-services", services, "-delta=false", "-wildcard", "-namespaces", strconv.Itoa(c.scNamespaces)}
	if scoped {
		srvArgs = append(srvArgs, "-namespaces", strconv.Itoa(c.scNamespaces), "-sidecar-hosts", strconv.Itoa(c.scHosts))
		lgArgs = append(lgArgs, "-scoped", strconv.Itoa(c.scHosts))
	}
	label := map[bool]string{false: "unscoped", true: "scoped"}[scoped]
	r.logf("SC %s: %d SotW wildcard streams, %d services", label, n, c.scServices)
	srv, err := r.server(mfT, srvArgs...)
	if err != nil {
		return scopedRun{}, err
	}
	defer srv.stop()
	var m0 bench.MemStats
	if err := getJSON(srv.ctl+"/mem", &m0); err != nil {
		return scopedRun{}, err
	}
	rss0, _, _ := bench.Mem(srv.pid)
	procs := min(c.scProcs, n)
	var lgs loadgens
	defer func() { lgs.stop() }()
	for i := range procs {
		lg, err := r.loadgen(srv, n/procs, i*(n/procs), lgArgs...)
		if err != nil {
			return scopedRun{}, err
		}
		lgs = append(lgs, lg)
	}
	if err := lgs.waitSynced(1, c.syncTimeout); err != nil {
		return scopedRun{}, err
	}
	st, err := lgs.stats()
	if err != nil {
		return scopedRun{}, err
	}
	time.Sleep(2 * time.Second)
	var m1 bench.MemStats
	if err := getJSON(srv.ctl+"/mem", &m1); err != nil {
		return scopedRun{}, err
	}
	rss1, _, _ := bench.Mem(srv.pid)
	out := scopedRun{streams: st.Streams, connectBytes: float64(st.Bytes) / float64(st.Streams),
		rssPerStream: float64(rss1-rss0) / 1024 / float64(st.Streams)}
	// In-scope flips: services of the first namespaces' Sidecars.
	var svcs []int
	for k := range min(5, c.scNamespaces) {
		svcs = append(svcs, k*c.scHosts)
	}
	var watchedBy func(int) []int
	if scoped {
		watchedBy = func(svc int) []int { return bench.ScopeWatchers(svc, st.Streams, c.scNamespaces, c.scHosts) }
	}
	out.inScope, err = r.eventsWatched(srv, lgs, svcs, time.Minute, flipEvent(srv), watchedBy)
	if err != nil {
		return scopedRun{}, err
	}
	if scoped {
		b0, err := lgs.stats()
		if err != nil {
			return scopedRun{}, err
		}
		for i := range 3 {
			if _, err := flipEvent(srv)(c.scNamespaces*c.scHosts + i); err != nil {
				return scopedRun{}, err
			}
			time.Sleep(2 * time.Second)
		}
		b1, err := lgs.stats()
		if err != nil {
			return scopedRun{}, err
		}
		out.outScopeBytes = b1.Bytes - b0.Bytes
	}
	return out, nil
}
