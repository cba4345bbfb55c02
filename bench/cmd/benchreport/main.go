// Command benchreport runs meshfed's benchmark scenarios (S1–S6, delta
// vs SotW, and IS: through istiod) side by side with the go-control-plane SnapshotCache baseline,
// and the scale scenarios of issue #16 (F: the services-file path beside
// istiod; S1's bare grpc-go floor; S7: 10,000 streams; S8: 100,000
// endpoints; CS: Consul with 10,000 services; SOAK), the registry kinds at
// 1,000 and 10,000 services of issue #22 (KS), and rewrites
// BENCHMARKS.md, whole or (-only … -merge) only the rows of the scenarios
// run. It reports; it never fails because a goal is
// missed (it exits non-zero only when the harness itself breaks).
//
//	go run ./bench/cmd/benchreport -out BENCHMARKS.md        # full (~40 min; -soak 0: ~30)
//	go run ./bench/cmd/benchreport -quick -out /tmp/b.md     # smoke (~2 min)
//	go run ./bench/cmd/benchreport -only KS -merge           # refresh only KS's rows of BENCHMARKS.md
//	go run ./bench/cmd/benchreport -only KS -ks.kinds kubernetes -merge  # only that kind's KS rows
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

type config struct {
	quick                  bool
	services, eps          int
	streams, per, common   int
	s1Events, s1BaseEvents int
	dsStreams, dsEvents    int
	s2Rate                 float64
	s2Ramp, s2Hold         time.Duration
	s3aIters               int
	s5Steps                []int
	idle                   time.Duration
	s6N                    int
	syncTimeout            time.Duration
	only                   string
	s7Streams, s7Procs     int
	s7Flips                int
	scServices, scStreams  int // SC: services; scoped streams (the unscoped run has scUnscoped)
	scUnscoped, scProcs    int
	scNamespaces, scHosts  int
	s8Services, s8Flips    int
	soak                   time.Duration
	soakRate               float64
	pprofDir               string
	consulSizes            []int
	fFiles                 int
	fOne                   bool     // F: only the one-file block-style run, no istiod
	fEnv                   []string // F: added to the meshfed binary's environment
	fLoadArgs              []string // F: added to the load generator's arguments
	ksSizes, ksKinds       string
	ksResults              string
	ksChanges              int
}

type runner struct {
	c    config
	dir  string
	rep  *report
	logf func(string, ...any)
}

func (r *runner) bin(name string) string { return filepath.Join(r.dir, name) }

func main() {
	out := flag.String("out", "BENCHMARKS.md", "report file to write")
	quick := flag.Bool("quick", false, "reduced smoke run (small fixture, few streams)")
	pprofDir := flag.String("pprof", "", "save CPU profiles in this directory: of the server during each run of spaced events (S1, F, S7), and of this process during S8")
	soak := flag.Duration("soak", 10*time.Minute, "duration of the SOAK scenario (0: skip it)")
	only := flag.String("only", "", "comma-separated scenarios to run (S1,DS,S2,S3,S4,S5,S6,IS,F,S7,S8,CS,SC,KS,SOAK); default all")
	merge := flag.Bool("merge", false, "with -only: keep the other rows of the existing -out file and replace only the rerun scenarios' rows")
	ksKinds := flag.String("ks.kinds", "", "KS: comma-separated kinds to run (bench/s6 KindScaleRow.Kind); default all; with -merge only their KS rows are replaced")
	ksSizes := flag.String("ks.sizes", "1000,10000", "KS: catalog sizes for kinds that name none")
	fOne := flag.Bool("f.one", false, "F: run only the one-file block-style case, without istiod (for iterating on it; the other F rows come out empty, so do not -merge it)")
	fEnv := flag.String("f.env", "", "F: comma-separated KEY=VALUE added to the meshfed binary's environment (e.g. GOGC=50), to measure runtime settings")
	fLoadArgs := flag.String("f.lgargs", "", "F: comma-separated arguments added to the load generator's (e.g. -fixed-windows)")
	ksResults := flag.String("ks.results", "", "KS: render these results (TestKindScale's -kindscale.out JSON, several files comma-separated) instead of running it")
	flag.Parse()
	c := config{
		quick: *quick, services: 1000, eps: 10, streams: 1000, per: 100, common: 10,
		s1Events: 30, s1BaseEvents: 5, dsStreams: 100, dsEvents: 10,
		s2Rate: 500, s2Ramp: 10 * time.Second, s2Hold: 60 * time.Second,
		s3aIters: 100, s5Steps: []int{0, 250, 500, 1000, 2000}, idle: 10 * time.Second,
		s6N: 200, syncTimeout: 3 * time.Minute, only: *only,
		s7Streams: 10000, s7Procs: 10, s7Flips: 10, s8Services: 10000, s8Flips: 30,
		soak: *soak, soakRate: 100, pprofDir: *pprofDir, consulSizes: []int{1000, 10000}, fFiles: 100,
		scServices: 10000, scStreams: 1000, scUnscoped: 100, scProcs: 4, scNamespaces: 20, scHosts: 50,
		ksSizes: *ksSizes, ksKinds: *ksKinds, ksChanges: 50, ksResults: *ksResults, fOne: *fOne,
	}
	if *fLoadArgs != "" {
		c.fLoadArgs = strings.Split(*fLoadArgs, ",")
	}
	if *fEnv != "" {
		c.fEnv = strings.Split(*fEnv, ",")
	}
	if c.quick {
		c.services, c.streams, c.per, c.common = 200, 50, 20, 5
		c.s1Events, c.s1BaseEvents, c.dsStreams, c.dsEvents = 5, 3, 10, 3
		c.s2Rate, c.s2Ramp, c.s2Hold = 100, time.Second, 3*time.Second
		c.s3aIters, c.s5Steps, c.idle, c.s6N = 10, []int{0, 25, 50, 100}, 2*time.Second, 10
		c.syncTimeout = time.Minute
		c.s7Streams, c.s7Procs, c.s7Flips, c.s8Services, c.s8Flips = 200, 2, 3, 1000, 5
		c.consulSizes, c.fFiles = []int{300}, 10
		c.scServices, c.scStreams, c.scUnscoped, c.scProcs, c.scNamespaces, c.scHosts = 1000, 100, 20, 2, 5, 20
		c.ksSizes, c.ksChanges = "100,300", 10
	}
	var old []byte
	if *merge {
		if *only == "" {
			log.Fatal("-merge needs -only")
		}
		var err error
		if old, err = os.ReadFile(*out); err != nil {
			log.Fatal(err)
		}
	}
	dir, err := os.MkdirTemp("", "meshfed-bench")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	logf := func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(f, a...))
	}
	logf("building bench binaries")
	if err := build(dir); err != nil {
		log.Fatal(err)
	}
	r := &runner{c: c, dir: dir, rep: newReport(c), logf: logf}
	r.rep.loadBefore = loadavg()
	for _, s := range []struct {
		id string
		fn func() error
	}{
		{"S3", r.runS3a}, {"S1", r.runS1}, {"DS", r.runDS}, {"S2", r.runS2},
		{"S3", r.runS3b}, {"S4", r.runS4}, {"S5", r.runS5}, {"S6", r.runS6}, {"IS", r.runIS},
		{"F", r.runF}, {"S7", r.runS7}, {"S8", r.runS8},
		{"CS", r.runConsulScale}, {"SC", r.runSC}, {"KS", r.runKindScale}, {"SOAK", r.runSoak},
	} {
		if c.only != "" && !strings.Contains(","+c.only+",", ","+s.id+",") {
			continue
		}
		if err := s.fn(); err != nil {
			logf("%s: harness error: %v", s.id, err)
			r.rep.errors = append(r.rep.errors, fmt.Sprintf("%s: %v", s.id, err))
		}
		runtime.GC()
	}
	r.rep.loadAfter = loadavg()
	r.rep.elapsed = time.Since(start)
	md := r.rep.markdown()
	if *merge {
		md = r.rep.merge(string(old), replacedIDs(c.only))
	}
	if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
		log.Fatal(err)
	}
	logf("wrote %s", *out)
}

// rowIDs are the row ids a scenario's rows carry when they differ from
// the scenario's.
var rowIDs = map[string][]string{"S3": {"S3a", "S3b"}, "DS": {"Δ"}}

// replacedIDs are the row ids that a run of the scenarios in only
// replaces when merged into an earlier report.
func replacedIDs(only string) map[string]bool {
	ids := map[string]bool{}
	for s := range strings.SplitSeq(only, ",") {
		s = strings.TrimSpace(s)
		ids[s] = true
		for _, id := range rowIDs[s] {
			ids[id] = true
		}
	}
	return ids
}
