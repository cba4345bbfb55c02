package main

import (
	"strings"
	"testing"

	"github.com/meshfed/meshfed/bench"
)

// TestKindScaleRowsAndMerge renders KS results and merges them into an
// earlier report: the earlier KS rows go, the other rows and the S5 table
// stay, and the flatness verdict compares the largest size with the
// smallest.
func TestKindScaleRowsAndMerge(t *testing.T) {
	t.Parallel()
	res := []bench.KindScaleResult{
		{Kind: "kubernetes", Services: 1000, Endpoints: 10000, Goal: 50e6, Sync: 1200, CPUPerChange: 3,
			Change: bench.Summary{N: 3, P50: 7, P99: 20, Max: 20}, RSS: 10000 * 3000, Heap: 10000 * 512},
		{Kind: "kubernetes", Services: 10000, Endpoints: 100000, Goal: 50e6, Sync: 16000, CPUPerChange: 7,
			Change: bench.Summary{N: 3, P50: 7, P99: 70, Max: 70}, RSS: 100000 * 3000, Heap: 100000 * 512},
		{Kind: "zookeeper-curator", Services: 1000, Skipped: "not installed"},
	}
	earlier := newReport(config{})
	earlier.add(row{id: "S1", figure: "one endpoint flips", unit: "ms", mf: one(5), note: "S1 note"})
	earlier.add(row{id: "KS", figure: "old kind", unit: "s", mf: one(1), note: "old KS note"})
	earlier.add(row{id: "CS", figure: "consul", unit: "s", mf: one(2)})
	earlier.s5 = [][]string{{"0", "1.0", "2.0", "3.0", "4.0"}}
	rep := newReport(config{})
	for _, x := range kindScaleRows(res) {
		rep.add(x)
	}
	verdicts := map[string]string{}
	for _, x := range rep.rows {
		verdicts[x.figure] = verdict(x)
	}
	for fig, want := range map[string]string{
		"kubernetes, 1000 services (10000 endpoints): start → first sink state holding all":   "met",
		"kubernetes, 10000 services (100000 endpoints): start → first sink state holding all": "**missed**",
		"kubernetes 1000: one change → sink":                                                  "met",
		"kubernetes 10000: one change → sink":                                                 "**missed**",
		"kubernetes 1000: CPU per change":                                                     "",
		"kubernetes 10000: CPU per change":                                                    "**missed**",
		"kubernetes 1000: RSS per endpoint held":                                              "", // the goal is at the full size
		"kubernetes 10000: RSS per endpoint held":                                             "**missed**",
	} {
		if got, ok := verdicts[fig]; !ok || got != want {
			t.Errorf("%q: verdict %q (present %v), want %q", fig, got, ok, want)
		}
	}
	for _, x := range rep.rows {
		if x.figure == "kubernetes 1000: RSS per endpoint held" && !strings.Contains(x.note, "not judged") {
			t.Errorf("RSS at 1,000: note %q does not say it is not judged", x.note)
		}
	}
	out := rep.merge(earlier.markdown(), replacedIDs("KS"))
	for _, want := range []string{"| S1 | one endpoint flips |", "- **S1 one endpoint flips**: S1 note", "| CS | consul |",
		"| refreshed KS |", "| KS | kubernetes 10000: one change → sink |", "| 0 | 1.0 | 2.0 | 3.0 | 4.0 |", "not run: not installed"} {
		if !strings.Contains(out, want) {
			t.Errorf("merged report lacks %q", want)
		}
	}
	for _, gone := range []string{"old kind", "old KS note"} {
		if strings.Contains(out, gone) {
			t.Errorf("merged report keeps %q", gone)
		}
	}
	if i, j := strings.Index(out, "| S1 |"), strings.Index(out, "| KS | kubernetes"); i > j || j > strings.Index(out, "| CS |") {
		t.Error("KS rows not in the place of the rows they replace")
	}
	if again := rep.merge(out, replacedIDs("KS")); strings.Count(again, "| refreshed KS |") != 1 || strings.Count(again, "| KS | kubernetes 10000: one change") != 1 {
		t.Error("merging twice duplicates rows or refresh lines")
	}

	// A rerun of some kinds (-ks.kinds) keeps the KS rows of the others.
	some := newReport(config{ksKinds: "zookeeper-dubbo"})
	for _, x := range kindScaleRows([]bench.KindScaleResult{{Kind: "zookeeper-dubbo", Services: 1000, Endpoints: 10000, Goal: 50e6,
		Sync: 300, CPUPerChange: 1, Change: bench.Summary{N: 3, P50: 3, P99: 9, Max: 9}, RSS: 10000 * 1024, Heap: 10000 * 512}}) {
		some.add(x)
	}
	merged := some.merge(out, replacedIDs("KS"))
	for _, want := range []string{"| KS | kubernetes 10000: one change → sink |", "- **KS kubernetes 10000: RSS per endpoint held**",
		"| KS | zookeeper-dubbo 1000: one change → sink |", "| S1 | one endpoint flips |"} {
		if !strings.Contains(merged, want) {
			t.Errorf("merge of one kind lacks %q", want)
		}
	}
	if strings.Count(some.merge(merged, replacedIDs("KS")), "| KS | zookeeper-dubbo 1000: one change") != 1 {
		t.Error("merging one kind twice duplicates its rows")
	}
}

// TestKindScaleMergeOfSomeKinds: with -ks.kinds, a merge replaces the KS
// rows and notes of those kinds only; the other kinds' rows stay, and
// the refresh line names the kinds.
func TestKindScaleMergeOfSomeKinds(t *testing.T) {
	t.Parallel()
	earlier := newReport(config{})
	earlier.add(row{id: "KS", figure: "kubernetes 1000: CPU per change", unit: "ms", mf: one(9), note: "old kubernetes note"})
	earlier.add(row{id: "KS", figure: "kubernetes-config 1000: CPU per change", unit: "ms", mf: one(11), note: "config note"})
	earlier.add(row{id: "KS", figure: "zookeeper-curator, 1000 services: start", unit: "s", mf: one(1)})
	rep := newReport(config{ksKinds: "kubernetes"})
	for _, x := range kindScaleRows([]bench.KindScaleResult{{Kind: "kubernetes", Services: 1000, Endpoints: 10000, Goal: 50e6, Sync: 1200,
		CPUPerChange: 3, Change: bench.Summary{N: 3, P50: 7, P99: 20, Max: 20}, RSS: 10000 * 1024, Heap: 10000 * 512}}) {
		rep.add(x)
	}
	out := rep.merge(earlier.markdown(), replacedIDs("KS"))
	for _, want := range []string{"| KS | kubernetes-config 1000: CPU per change |", "- **KS kubernetes-config 1000: CPU per change**: config note",
		"| KS | zookeeper-curator, 1000 services: start |", "| KS | kubernetes 1000: CPU per change | ms | 3", "| refreshed KS (kubernetes) |"} {
		if !strings.Contains(out, want) {
			t.Errorf("merged report lacks %q", want)
		}
	}
	if strings.Contains(out, "old kubernetes note") || strings.Contains(out, "| ms | 9 |") {
		t.Error("merged report keeps the replaced kind's old row")
	}
}

// TestKindScaleObservedRows: a row with an independent observer shows the
// server's delay and meshfed's own part, whose verdict is its own goal
// (a change within the server's delay + the goal is met even when the
// server alone is slow).
func TestKindScaleObservedRows(t *testing.T) {
	t.Parallel()
	res := []bench.KindScaleResult{
		{Kind: "nacos", Services: 1000, Endpoints: 1000, Goal: 2050e6, OwnGoal: 50e6, CPUPerChange: 3,
			Change: bench.Summary{N: 3, P50: 1500, P99: 2010, Max: 2010}, Server: bench.Summary{N: 3, P50: 1499, P99: 2000, Max: 2000},
			Own: bench.Summary{N: 3, P50: 0.2, P99: 12, Max: 12}},
		{Kind: "nacos", Services: 10000, Endpoints: 10000, Goal: 1050e6, OwnGoal: 50e6, CPUPerChange: 3,
			Change: bench.Summary{N: 3, P50: 900, P99: 1060, Max: 1060}, Server: bench.Summary{N: 3, P50: 800, P99: 1000, Max: 1000},
			Own: bench.Summary{N: 3, P50: 60, P99: 80, Max: 80}},
		{Kind: "nacos", Services: 3000, Endpoints: 3000, Goal: 3050e6, OwnGoal: 50e6, CPUPerChange: 3,
			Change: bench.Summary{N: 3, P50: 900, P99: 1000, Max: 1000}, Server: bench.Summary{N: 3, P50: 100, P99: 3000, Max: 3000},
			Own: bench.Summary{N: 3, P50: 800, P99: 900, Max: 900}},
	}
	verdicts, goals := map[string]string{}, map[string]string{}
	for _, x := range kindScaleRows(res) {
		verdicts[x.figure], goals[x.figure] = verdict(x), x.goal
	}
	for fig, want := range map[string]string{
		"nacos 1000: one change → sink":                                              "met",
		"nacos 1000: server delay (change → an independent observer sees it)":        "",
		"nacos 1000: meshfed's own part of a change (change → sink − server delay)":  "met",
		"nacos 10000: one change → sink":                                             "**missed**",
		"nacos 10000: meshfed's own part of a change (change → sink − server delay)": "**missed**",
		"nacos 3000: one change → sink":                                              "**missed**", // within the goal, but meshfed's own part is not
	} {
		if got, ok := verdicts[fig]; !ok || got != want {
			t.Errorf("%q: verdict %q (present %v), want %q", fig, got, ok, want)
		}
	}
	if g := goals["nacos 1000: one change → sink"]; g != "p99 ≤ 2.05s (server delay p99 + 50ms)" {
		t.Errorf("change goal %q", g)
	}
}
