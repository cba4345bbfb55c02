package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/meshfed/meshfed/bench"
)

// Goals of scenario KS (issue #22), per kind at 10,000 services.
const (
	ksSyncGoal     = 15 * time.Second // first sync → everything at the sink
	ksCPUGrowth    = 2.0              // CPU per change at the largest size ÷ at the smallest
	ksBytesPerEndp = 2048             // RSS per endpoint held
)

// runKindScale: every registry kind and config source against its real
// server at 1,000 and 10,000 services (go test ./bench/s6 -run
// TestKindScale; bench/kindscale.go is the harness, each kind a
// bench.KindScaleRow in bench/s6/<kind>scale_test.go).
func (r *runner) runKindScale() error {
	path := r.c.ksResults
	if path == "" {
		f, err := os.CreateTemp(r.dir, "ks-*.json")
		if err != nil {
			return err
		}
		f.Close()
		path = f.Name()
		r.logf("KS: registry kinds at %s services (go test ./bench/s6 -run TestKindScale)", r.c.ksSizes)
		args := []string{"test", "-count=1", "-timeout=180m", "-run", "^TestKindScale$", "./bench/s6",
			"-args", "-kindscale.out=" + path, "-kindscale.sizes=" + r.c.ksSizes, "-kindscale.changes=" + strconv.Itoa(r.c.ksChanges)}
		if r.c.ksKinds != "" {
			args = append(args, "-kindscale.kinds="+r.c.ksKinds)
		}
		if r.c.pprofDir != "" {
			args = append(args, "-kindscale.pprof="+r.c.pprofDir)
		}
		cmd := exec.Command("go", args...)
		cmd.Stderr = os.Stderr
		outb, err := cmd.Output()
		if err != nil {
			r.rep.notes = append(r.rep.notes, "KS go test failed: "+lastLines(string(outb), 8))
		}
	} else {
		r.logf("KS: rendering %s", path)
		r.rep.notes = append(r.rep.notes, "KS: figures rendered from saved TestKindScale results ("+path+"); the load during those runs is in bench/analysis.md, not the header's")
	}
	var res []bench.KindScaleResult
	for p := range strings.SplitSeq(path, ",") {
		b, _ := os.ReadFile(p)
		if len(b) == 0 {
			continue
		}
		var part []bench.KindScaleResult
		if err := json.Unmarshal(b, &part); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		res = append(res, part...)
	}
	for _, rw := range kindScaleRows(res) {
		r.rep.add(rw)
	}
	return nil
}

// kindScaleRows renders KS results: per kind and size the first sync and
// one change → sink; CPU per change, with the flatness verdict at the
// kind's largest size; memory held per endpoint.
func kindScaleRows(res []bench.KindScaleResult) []row {
	smallest := map[string]bench.KindScaleResult{}
	largest := map[string]int{}
	for _, x := range res {
		if x.Skipped != "" {
			continue
		}
		if s, ok := smallest[x.Kind]; !ok || x.Services < s.Services {
			smallest[x.Kind] = x
		}
		largest[x.Kind] = max(largest[x.Kind], x.Services)
	}
	var rows []row
	for _, x := range res {
		what := fmt.Sprintf("%s, %d services (%d endpoints)", x.Kind, x.Services, x.Endpoints)
		if x.Endpoints == 0 {
			what = fmt.Sprintf("%s, %d objects", x.Kind, x.Services)
		}
		short := fmt.Sprintf("%s %d", x.Kind, x.Services)
		if x.Skipped != "" {
			rows = append(rows, row{id: "KS", figure: what + ": start → first sink state holding all", unit: "s", note: "not run: " + x.Skipped})
			continue
		}
		rows = append(rows, row{id: "KS", figure: what + ": start → first sink state holding all", unit: "s",
			mf: one(x.Sync / 1e3), goal: "≤ 15 s", met: ptr(x.Sync <= ms(ksSyncGoal)),
			note: fmt.Sprintf("%s; fixture loaded in %.1f s before the start (not counted); process CPU for the sync %.1f s", x.Note, x.Load/1e3, x.SyncCPU/1e3)})
		ch := row{id: "KS", figure: short + ": one change → sink", unit: "ms", mf: &x.Change,
			note: fmt.Sprintf("%d changes one after the other, %d states published meanwhile%s", x.Change.N+x.Lost, x.Publishes, lostNote(x.Lost))}
		if x.Goal > 0 {
			ch.goal = "p99 ≤ " + time.Duration(x.Goal).Round(time.Millisecond).String()
			if x.OwnGoal > 0 && x.Server.N > 0 {
				ch.goal += fmt.Sprintf(" (server delay p99 + %s)", time.Duration(x.OwnGoal))
			}
			// With an observer the goal is met only if meshfed's own
			// part is too: a slow server must not hide meshfed's share.
			ownMet := x.OwnGoal == 0 || x.Server.N == 0 || (x.Unobserved == 0 && x.Own.P99 <= ms(time.Duration(x.OwnGoal)))
			ch.met = ptr(x.Lost == 0 && x.Change.P99 <= ms(time.Duration(x.Goal)) && ownMet)
		}
		rows = append(rows, ch)
		rows = append(rows, observedRows(x, short)...)
		cpu := row{id: "KS", figure: short + ": CPU per change", unit: "ms", mf: one(x.CPUPerChange)}
		if s := smallest[x.Kind]; x.Services == largest[x.Kind] && s.Services < x.Services {
			cpu.goal = fmt.Sprintf("≤ %g × at %d (%s ms)", ksCPUGrowth, s.Services, num(s.CPUPerChange))
			cpu.met = ptr(x.CPUPerChange <= ksCPUGrowth*s.CPUPerChange)
		}
		if x.WriterCPUPerChange > 0 {
			cpu.note = fmt.Sprintf("the writer's (the harness rendering and writing the file) %s ms included", num(x.WriterCPUPerChange))
		}
		rows = append(rows, cpu)
		if x.WriterCPUPerChange > 0 {
			// The measured code's share: the process's CPU less what the
			// target's Change measured as its own (an editor's write of
			// the file is not the registry's cost).
			own := x.CPUPerChange - x.WriterCPUPerChange
			cpu := row{id: "KS", figure: short + ": CPU per change, the writer's excluded", unit: "ms", mf: one(own)}
			if s := smallest[x.Kind]; x.Services == largest[x.Kind] && s.Services < x.Services && s.WriterCPUPerChange > 0 {
				sOwn := s.CPUPerChange - s.WriterCPUPerChange
				cpu.goal = fmt.Sprintf("≤ %g × at %d (%s ms)", ksCPUGrowth, s.Services, num(sOwn))
				cpu.met = ptr(own <= ksCPUGrowth*sOwn)
			}
			rows = append(rows, cpu)
		}
		perRSS := x.PerEndpoint(x.RSS)
		unit := "endpoint"
		if x.Endpoints == 0 {
			unit = "object"
		}
		mem := row{id: "KS", figure: short + ": RSS per " + unit + " held", unit: "KB", mf: one(perRSS / 1024),
			note: fmt.Sprintf("%s above the process's before the start; Go live heap %s (%.0f B per %s)%s", mb(x.RSS), mb(x.Heap), x.PerEndpoint(x.Heap), unit, memSplit(x))}
		if x.Services == largest[x.Kind] {
			mem.goal, mem.met = "≤ 2 KB", ptr(perRSS <= ksBytesPerEndp)
		} else {
			// Issue #22 sets the goal at the full size: a smaller catalog
			// spreads the registry's fixed memory (its goroutines' stacks,
			// runtime structures sized for it) over fewer endpoints.
			mem.note += fmt.Sprintf("; not judged: the goal is per %s at the full size (%d), where fixed costs do not decide it", unit, largest[x.Kind])
		}
		rows = append(rows, mem)
	}
	return rows
}

// observedRows renders the server's delay and the measured code's own
// part of each change, for rows with an independent observer.
func observedRows(x bench.KindScaleResult, short string) []row {
	if x.Server.N == 0 {
		return nil
	}
	unseen := ""
	if x.Unobserved > 0 {
		unseen = fmt.Sprintf("; %d changes the observer never saw are left out", x.Unobserved)
	}
	own := row{id: "KS", figure: short + ": meshfed's own part of a change (change → sink − server delay)", unit: "ms", mf: &x.Own,
		note: fmt.Sprintf("per change: when the sink held it minus when the independent observer first saw it, over %d changes%s", x.Own.N, unseen)}
	if x.OwnGoal > 0 {
		own.goal = "p99 ≤ " + time.Duration(x.OwnGoal).String()
		own.met = ptr(x.Lost == 0 && x.Unobserved == 0 && x.Own.P99 <= ms(time.Duration(x.OwnGoal)))
	}
	return []row{
		{id: "KS", figure: short + ": server delay (change → an independent observer sees it)", unit: "ms", mf: &x.Server,
			note: fmt.Sprintf("Polaris' own delay, per change, seen by a client of its own in another process (see the row's first note); the change → sink goal is its p99 + %s", time.Duration(x.OwnGoal))},
		own,
	}
}

// memSplit says where a row's RSS growth is (results written before
// KindScaleResult.Mem existed have none).
func memSplit(x bench.KindScaleResult) string {
	if x.Mem == (bench.MemSplit{}) {
		return ""
	}
	return "; where the growth is: " + x.Mem.String()
}
