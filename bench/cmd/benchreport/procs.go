package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meshfed/meshfed/bench"
)

// proc is a child process started by the report (bench server or loadgen).
type proc struct {
	name  string
	cmd   *exec.Cmd
	pid   int
	xds   string
	ctl   string
	ready int64 // READY stamp (servers)
	done  chan struct{}
	errb  *bytes.Buffer
}

// start runs bin with args and waits for its READY line.
func start(name, bin string, env []string, args ...string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), errb: &bytes.Buffer{}}
	cmd.Stderr = &limitWriter{b: p.errb, n: 64 << 10}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.pid = cmd.Process.Pid
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	select {
	case l := <-lines:
		for _, f := range strings.Fields(l) {
			switch {
			case strings.HasPrefix(f, "xds="):
				p.xds = f[4:]
			case strings.HasPrefix(f, "ctl="):
				p.ctl = "http://" + f[4:]
			default:
				if n, err := strconv.ParseInt(f, 10, 64); err == nil {
					p.ready = n
				}
			}
		}
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s exited: %s", name, p.errb.String())
	case <-time.After(5 * time.Minute):
		p.stop()
		return nil, fmt.Errorf("%s: no READY line", name)
	}
}

// stop sends SIGTERM and waits (SIGKILL after 10 s).
func (p *proc) stop() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

type limitWriter struct {
	b *bytes.Buffer
	n int
}

func (w *limitWriter) Write(p []byte) (int, error) {
	if room := w.n - w.b.Len(); room > 0 {
		w.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

var httpc = &http.Client{Timeout: 30 * time.Minute}

// tickUntil calls f every period until done yields, and returns done's
// error; the first error of f ends it sooner, returned instead.
func tickUntil(done <-chan error, period time.Duration, f func() error) error {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			if err := f(); err != nil {
				return err
			}
		}
	}
}

func getJSON(url string, v any) error { return do(http.MethodGet, url, v) }
func post(url string, v any) error    { return do(http.MethodPost, url, v) }

func do(method, url string, v any) error {
	req, err := http.NewRequestWithContext(context.Background(), method, url, nil)
	if err != nil {
		return err
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, b)
	}
	if v == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// build compiles the bench binaries into dir.
func build(dir string) error {
	for _, c := range []string{"bench/cmd/benchserver", "bench/cmd/loadgen", "cmd/meshfed"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, filepath.Base(c)), "./"+c)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build %s: %w", c, err)
		}
	}
	return nil
}

// loadgens is a set of load generator processes against one server.
type loadgens []*proc

func (ls loadgens) stop() {
	for _, l := range ls {
		l.stop()
	}
}

func (ls loadgens) stats() (bench.LoadStats, error) {
	var sum bench.LoadStats
	for _, l := range ls {
		var s bench.LoadStats
		if err := getJSON(l.ctl+"/stats", &s); err != nil {
			return sum, err
		}
		sum.Streams += s.Streams
		sum.Synced += s.Synced
		sum.Sessions += s.Sessions
		sum.Bytes += s.Bytes
		sum.Responses += s.Responses
		sum.LastSync = max(sum.LastSync, s.LastSync)
	}
	return sum, nil
}

func (ls loadgens) syncs() ([]bench.StreamSync, error) {
	var all []bench.StreamSync
	for _, l := range ls {
		var s []bench.StreamSync
		if err := getJSON(l.ctl+"/syncs", &s); err != nil {
			return nil, err
		}
		all = append(all, s...)
	}
	return all, nil
}

func (ls loadgens) records() ([][4]int64, error) {
	var all [][4]int64
	for _, l := range ls {
		var r [][4]int64
		if err := getJSON(l.ctl+"/records", &r); err != nil {
			return nil, err
		}
		all = append(all, r...)
	}
	return all, nil
}

// waitSynced polls until every stream holds everything it subscribes to
// in a session numbered at least minSession.
func (ls loadgens) waitSynced(minSession int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ss, err := ls.syncs()
		if err != nil {
			return err
		}
		ok := 0
		for _, s := range ss {
			if s.Session >= minSession && s.Synced > 0 {
				ok++
			}
		}
		if ok == len(ss) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d streams synced after %s", ok, len(ss), timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cpu returns the process's CPU time.
func (p *proc) cpu() time.Duration {
	d, _ := bench.CPUTime(p.pid)
	return d
}

// profile takes a 10-second CPU profile of srv (its /debug/pprof/profile)
// into r.c.pprofDir when that is set; the channel closes when it is saved.
func (r *runner) profile(srv *proc) <-chan struct{} {
	done := make(chan struct{})
	if r.c.pprofDir == "" || srv.ctl == "" {
		close(done)
		return done
	}
	path := filepath.Join(r.c.pprofDir, fmt.Sprintf("%s-%d.pprof", strings.ReplaceAll(srv.name, " ", "-"), time.Now().Unix()))
	go func() {
		defer close(done)
		resp, err := httpc.Get(srv.ctl + "/debug/pprof/profile?seconds=10")
		if err != nil {
			r.logf("pprof %s: %v", srv.name, err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(path)
		if err != nil {
			r.logf("pprof %s: %v", srv.name, err)
			return
		}
		defer f.Close()
		if _, err := io.Copy(f, resp.Body); err != nil {
			r.logf("pprof %s: %v", srv.name, err)
			return
		}
		r.logf("pprof %s → %s", srv.name, path)
	}()
	return done
}
