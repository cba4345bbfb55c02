package s6

import (
	"encoding/json"
	"flag"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/bench"
)

// Scenario KS (issue #22, bench/kindscale.go): each registry kind and
// config source against its real server at 1,000 and 10,000 services.
// Kinds register a bench.KindScaleRow from their own <kind>scale_test.go
// file. benchreport runs it as
//
//	go test -run '^TestKindScale$' ./bench/s6 -args -kindscale.out=FILE [-kindscale.kinds=kubernetes,...]
//
// Without -kindscale.out only the smoke rows run, at a tiny size.
var (
	ksOut     = flag.String("kindscale.out", "", "run TestKindScale in full and write its results (JSON) here")
	ksSizes   = flag.String("kindscale.sizes", "1000,10000", "catalog sizes, for rows that name none (with -kindscale.out)")
	ksKinds   = flag.String("kindscale.kinds", "", "comma-separated kinds to run; default all")
	ksChanges = flag.Int("kindscale.changes", 50, "changes per kind and size (with -kindscale.out)")
	ksPprof   = flag.String("kindscale.pprof", "", "write CPU profiles of the changes and heap profiles here")
	ksSync    = flag.Duration("kindscale.synctimeout", 10*time.Minute, "bound on the first sync")
	ksWarmup  = flag.Int("kindscale.warmup", 20, "services of an unmeasured warm-up run of each kind before its measured sizes (0: none; with -kindscale.out)")
)

// kindScaleRows are registered by the <kind>scale_test.go files.
var kindScaleRows []bench.KindScaleRow

func TestKindScale(t *testing.T) {
	full := *ksOut != ""
	var sizes []int
	for f := range strings.SplitSeq(*ksSizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			t.Fatalf("-kindscale.sizes: %v", err)
		}
		sizes = append(sizes, n)
	}
	kinds := strings.Split(*ksKinds, ",")
	var results []bench.KindScaleResult
	for _, row := range kindScaleRows {
		if (!full && !row.Smoke) || (*ksKinds != "" && !slices.Contains(kinds, row.Kind)) {
			continue
		}
		o := bench.KindScaleOptions{Changes: *ksChanges, Gap: 20 * time.Millisecond,
			SyncTimeout: *ksSync, ChangeTimeout: 30 * time.Second, ProfileDir: *ksPprof}
		rowSizes := cmpOr(row.Sizes, sizes)
		if !full {
			rowSizes, o.Changes = []int{20}, 3
		} else if *ksWarmup > 0 {
			// The warm-up pages in the code the kind runs, and lets the
			// runtime size itself, before the first measured start: a
			// meshfed serving this kind has run its code already, so
			// its first pages are not a cost per endpoint (they were
			// 0.8–1.7 MB of the first row's RSS growth in a process).
			t.Run(row.Kind+"-warmup", func(t *testing.T) {
				w := o
				w.Changes, w.ProfileDir = 3, ""
				bench.RunKindScale(t, row, *ksWarmup, w)
			})
		}
		for _, n := range rowSizes {
			var res bench.KindScaleResult
			ran := t.Run(row.Kind+"-"+strconv.Itoa(n), func(t *testing.T) {
				res = bench.RunKindScale(t, row, n, o)
				if res.Lost > 0 {
					t.Errorf("%d of %d changes never reached the sink", res.Lost, o.Changes)
				}
				t.Logf("%s %d: load %.1f s, sync %.1f s, change → sink %+v, CPU %.1f ms/change, %.0f B heap and %.0f B RSS per endpoint (growth: %s; %+d goroutines)",
					row.Kind, n, res.Load/1e3, res.Sync/1e3, res.Change, res.CPUPerChange, res.PerEndpoint(res.Heap), res.PerEndpoint(res.RSS), res.Mem, res.Goroutines)
			})
			if !ran && res.Kind == "" {
				res = bench.KindScaleResult{Kind: row.Kind, Services: n, Goal: int64(row.Goal), Skipped: "failed or skipped (server not installed?)"}
			}
			results = append(results, res)
			if full {
				// After every row: a run that hangs later (the Nacos
				// SDK's Close can) keeps what it measured.
				writeKindScale(t, results)
			}
		}
	}
}

func writeKindScale(t *testing.T, results []bench.KindScaleResult) {
	b, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(*ksOut, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func cmpOr[T any](a, b []T) []T {
	if len(a) > 0 {
		return a
	}
	return b
}
