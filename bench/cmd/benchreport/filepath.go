package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/test/servers"
)

// freeAddr returns a loopback address with a port free right now.
func freeAddr() (string, error) {
	l, err := bench.Listen("127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startMeshfed runs the built meshfed binary (`meshfed run`) on a
// clusters.yaml (in a directory of its own) with one file registry
// (domain bench.Domain) over path, on loopback ports, and waits until
// /readyz answers 200.
func (r *runner) startMeshfed(path string) (*proc, error) {
	dir, err := os.MkdirTemp(r.dir, "cfg-")
	if err != nil {
		return nil, err
	}
	xdsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	adminAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "clusters.yaml")
	y := fmt.Sprintf("xds:\n  address: %s\nadmin:\n  address: %s\n  pprof: true\nregistries:\n  - name: bench\n    kind: file\n    domain: %s\n    file:\n      path: %s\n",
		xdsAddr, adminAddr, bench.Domain, path)
	if err := os.WriteFile(cfg, []byte(y), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(r.bin("meshfed"), "run", "--config", cfg, "--log-level", "warn")
	cmd.Env = append(os.Environ(), r.c.fEnv...)
	p := &proc{name: "meshfed", cmd: cmd, done: make(chan struct{}), errb: &bytes.Buffer{}, xds: xdsAddr, ctl: "http://" + adminAddr}
	cmd.Stdout = &limitWriter{b: p.errb, n: 64 << 10}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.pid = cmd.Process.Pid
	go func() { _ = cmd.Wait(); close(p.done) }()
	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if resp, err := c.Get(p.ctl + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				p.ready = time.Now().UnixNano()
				return p, nil
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("meshfed exited: %s", lastLines(p.errb.String(), 10))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("meshfed not ready in 2m: %s", lastLines(p.errb.String(), 10))
		}
	}
}

// fileResult is one server's run of the file scenario.
type fileResult struct {
	e         eventResult
	rssStream float64 // KB per stream
	rss0      int64
}

// runF is the user's path (issue #16): a real services file of
// r.c.services × r.c.eps, rewritten (temp file + rename) with one endpoint
// replaced per event, read by the meshfed binary; r.c.streams delta
// clients watch r.c.per clusters each. The same services as one
// ServiceEntry file each feed istiod (--configDir), with the same clients,
// in the same run.
func (r *runner) runF() error {
	n := r.c.s1Events
	svcs := make([]int, n)
	for i := range svcs {
		svcs[i] = i % r.c.common
	}
	lgArgs := append([]string{"-addr-marker"}, r.c.fLoadArgs...)

	// meshfed, on one file, then on a directory of files.
	// meshfed, on one file in the compact flow style (issue #22).
	var mf, dirRes, flowRes fileResult
	var fileBytes, flowBytes int
	for _, run := range []struct {
		files int
		flow  bool
	}{{1, false}, {r.c.fFiles, false}, {1, true}} {
		if r.c.fOne && (run.files > 1 || run.flow) {
			continue
		}
		res, size, err := r.fileMeshfed(run.files, run.flow, lgArgs, svcs)
		if err != nil {
			return fmt.Errorf("meshfed, %d files (flow style %v): %w", run.files, run.flow, err)
		}
		switch {
		case run.flow:
			flowRes, flowBytes = res, size
		case run.files == 1:
			mf, fileBytes = res, size
		default:
			dirRes = res
		}
		r.logf("F meshfed (%d files, flow style %v): p50 %.1f p99 %.1f ms, cpu %.1f ms/event, %.1f KB/stream", run.files, run.flow, res.e.lat.P50, res.e.lat.P99, res.e.cpuPerEvent, res.rssStream)
	}

	// istiod
	var is *fileResult
	istiodNote := ""
	if bin, ok := servers.IstiodBinary(); r.c.fOne {
		istiodNote = "istiod not run (-f.one)"
	} else if !ok {
		istiodNote = "istiod not built (tools/testservers/build.sh istiod)"
	} else {
		x, err := r.fileIstiod(bin, lgArgs, svcs)
		if err != nil {
			istiodNote = "istiod run failed: " + err.Error()
			r.logf("F istiod: %v", err)
		} else {
			is = &x
			r.logf("F istiod: p50 %.1f p99 %.1f ms, cpu %.1f ms/event, %.1f KB/stream", x.e.lat.P50, x.e.lat.P99, x.e.cpuPerEvent, x.rssStream)
		}
	}
	var isLat *bench.Summary
	var isCPU, isRSS *bench.Summary
	if is != nil {
		isLat, isCPU, isRSS = &is.e.lat, one(is.e.cpuPerEvent), one(is.rssStream)
		istiodNote = fmt.Sprintf("istiod %s from %d ServiceEntry files (--configDir; its file watch debounces 250 ms, then PILOT_DEBOUNCE_AFTER=10ms), same clients with istiod node ids%s",
			servers.IstiodVersion, r.c.services, missingNote(0, is.e.missing))
	}
	r.rep.add(row{id: "F", figure: fmt.Sprintf("services file %d × %d edited: file write → last of %d delta clients ACKs", r.c.services, r.c.eps, r.c.streams), unit: "ms",
		mf: &mf.e.lat, bl: isLat, goal: "p99 ≤ 150 ms", met: ptr(mf.e.lat.P99 <= 150 && mf.e.missing == 0),
		note: fmt.Sprintf("the meshfed binary (`meshfed run`, default debounce) on one %d-byte services file, rewritten by temp file + rename with one endpoint's address replaced per edit; %d clients watch %d clusters each (all watch the edited service); %d edits%s. Baseline column: %s",
			fileBytes, r.c.streams, r.c.per, mf.e.events, missingNote(mf.e.missing, 0)+envNote(r.c.fEnv)+argsNote(r.c.fLoadArgs), istiodNote)})
	r.rep.add(row{id: "F", figure: "server CPU per edit", unit: "ms", mf: one(mf.e.cpuPerEvent), bl: isCPU,
		goal: "≤ 60 ms", met: ptr(mf.e.cpuPerEvent <= 60), note: "/proc utime+stime of the server process over the edits ÷ edits (includes the re-read of the file)"})
	r.rep.add(row{id: "F", figure: fmt.Sprintf("same, the services in %d files (one team, one file): write → last ACK", r.c.fFiles), unit: "ms",
		mf: &dirRes.e.lat, bl: isLat, note: fmt.Sprintf("only the edited file (%d services) is rewritten and re-read%s", r.c.services/r.c.fFiles, missingNote(dirRes.e.missing, 0))})
	r.rep.add(row{id: "F", figure: fmt.Sprintf("same, %d files: server CPU per edit", r.c.fFiles), unit: "ms", mf: one(dirRes.e.cpuPerEvent), bl: isCPU,
		goal: "≤ 60 ms", met: ptr(dirRes.e.cpuPerEvent <= 60)})
	r.rep.add(row{id: "F", figure: "same, one file in the compact flow style: write → last ACK", unit: "ms",
		mf: &flowRes.e.lat, bl: isLat, goal: "p99 ≤ 150 ms", met: ptr(flowRes.e.lat.P99 <= 150 && flowRes.e.missing == 0),
		note: fmt.Sprintf("the same services in one %d-byte file, each endpoint one line of nested flow mappings (`- {address: …, ports: {http: …}, locality: …, labels: {…}}`, issue #22), which the fast path does not read: only the edited service's range is parsed again%s", flowBytes, missingNote(flowRes.e.missing, 0))})
	r.rep.add(row{id: "F", figure: "same, flow style: server CPU per edit", unit: "ms", mf: one(flowRes.e.cpuPerEvent), bl: isCPU,
		goal: "≤ 60 ms", met: ptr(flowRes.e.cpuPerEvent <= 60)})
	r.rep.add(row{id: "F", figure: fmt.Sprintf("RSS per stream (0 → %d streams)", r.c.streams), unit: "KB", mf: one(mf.rssStream), bl: isRSS,
		goal: "≤ 100 KB", met: ptr(mf.rssStream <= 100), note: fmt.Sprintf("VmRSS after the streams synced minus before they connected (meshfed %.0f MB before), ÷ streams; no forced GC (a real binary)%s", float64(mf.rss0)/1e6, envNote(r.c.fEnv))})
	return nil
}

// fileMeshfed runs the file scenario against the meshfed binary with the
// services spread over files services files (a directory when more than
// one), in the block style or the compact flow style, returning the
// result and the edited file's size.
func (r *runner) fileMeshfed(files int, flow bool, lgArgs []string, svcs []int) (fileResult, int, error) {
	dir, err := os.MkdirTemp(r.dir, "file-")
	if err != nil {
		return fileResult{}, 0, err
	}
	st := bench.NewState(r.c.services, r.c.eps)
	per := (r.c.services + files - 1) / files
	name := func(f int) string { return filepath.Join(dir, fmt.Sprintf("team-%03d.yaml", f)) }
	render := func(f int) []byte {
		ss := st.Services()
		if flow {
			return bench.ServicesFlowYAML(ss[f*per : min((f+1)*per, len(ss))])
		}
		return bench.ServicesYAML(ss[f*per : min((f+1)*per, len(ss))])
	}
	for f := range files {
		if err := bench.WriteFileAtomic(name(f), render(f)); err != nil {
			return fileResult{}, 0, err
		}
	}
	path := name(0)
	if files > 1 {
		path = dir
	}
	r.logf("F meshfed: %d × %d in %d file(s), %d delta streams × %d clusters, %d edits", r.c.services, r.c.eps, files, r.c.streams, r.c.per, len(svcs))
	srv, err := r.startMeshfed(path)
	if err != nil {
		return fileResult{}, 0, err
	}
	defer srv.stop()
	size := len(render(0))
	res, err := r.fileRun(srv, lgArgs, svcs, func(svc int) (bench.Event, error) {
		seq := st.FlipAddr(svc)
		data := render(svc / per)
		ev := bench.Event{Seq: seq, Svc: svc, Stamp: time.Now().UnixNano()}
		return ev, bench.WriteFileAtomic(name(svc/per), data)
	})
	return res, size, err
}

// fileRun connects the streams to srv, measures RSS per stream and runs
// the edits.
func (r *runner) fileRun(srv *proc, lgArgs []string, svcs []int, flip func(int) (bench.Event, error)) (fileResult, error) {
	time.Sleep(2 * time.Second)
	rss0, _, _ := bench.Mem(srv.pid)
	lg, err := r.loadgen(srv, r.c.streams, 0, lgArgs...)
	if err != nil {
		return fileResult{}, err
	}
	lgs := loadgens{lg}
	defer lgs.stop()
	if err := lgs.waitSynced(1, r.c.syncTimeout); err != nil {
		return fileResult{}, err
	}
	time.Sleep(2 * time.Second)
	rss1, _, _ := bench.Mem(srv.pid)
	e, err := r.eventsWith(srv, lgs, svcs, time.Minute, flip)
	if err != nil {
		return fileResult{}, err
	}
	return fileResult{e: e, rss0: rss0, rssStream: float64(rss1-rss0) / 1024 / float64(r.c.streams)}, nil
}

// fileIstiod runs the file scenario against istiod reading one
// ServiceEntry file per service.
func (r *runner) fileIstiod(bin string, lgArgs []string, svcs []int) (fileResult, error) {
	dir, err := os.MkdirTemp(r.dir, "se-")
	if err != nil {
		return fileResult{}, err
	}
	st := bench.NewState(r.c.services, r.c.eps)
	ss := st.Services()
	name := func(i int) string { return filepath.Join(dir, "s"+strconv.Itoa(i)+".yaml") }
	for i := range ss {
		if err := bench.WriteFileAtomic(name(i), bench.ServiceEntryYAML(&ss[i])); err != nil {
			return fileResult{}, err
		}
	}
	r.logf("F istiod: %d ServiceEntry files, %d delta streams", len(ss), r.c.streams)
	stop, grpcAddr, pid, err := startIstiod(bin, "", dir)
	if err != nil {
		return fileResult{}, err
	}
	defer stop()
	srv := &proc{name: "istiod", pid: pid, xds: grpcAddr}
	return r.fileRun(srv, append(lgArgs, "-istio"), svcs, func(svc int) (bench.Event, error) {
		seq := st.FlipAddr(svc)
		s := st.Services()[svc]
		data := bench.ServiceEntryYAML(&s)
		ev := bench.Event{Seq: seq, Svc: svc, Stamp: time.Now().UnixNano()}
		return ev, bench.WriteFileAtomic(name(svc), data)
	})
}

// argsNote names the arguments F added to the load generator's, if any.
func argsNote(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return "; load generator run with " + strings.Join(args, " ")
}

// envNote names the environment F added to the meshfed binary, if any.
func envNote(env []string) string {
	if len(env) == 0 {
		return ""
	}
	return "; meshfed run with " + strings.Join(env, " ")
}
