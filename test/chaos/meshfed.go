package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/test/servers"
)

// stateFS is a small tmpfs for meshfed's state directory, so that the
// state directory can fill up and turn read-only without root on the host
// and without touching the host's file systems: an unprivileged user and
// mount namespace (unshare -Urm) holds the mount, a sleeping process keeps
// the namespace alive, and meshfed runs inside it (nsenter -U -m, which
// execs: meshfed keeps the pid the test signals). The harness reaches the
// files through /proc/<holder>/root. Where user namespaces are not
// available the state directory is a plain directory and the
// full/read-only faults are skipped (said in the report).
type stateFS struct {
	dir    string // the mount point (same path inside and outside)
	holder *exec.Cmd
}

// stateFSSize is the tmpfs size: room for the registries' states of a run
// (a few KiB each) many times over.
const stateFSSize = "4m"

func newStateFS(t testing.TB, dir string) *stateFS {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	fs := &stateFS{dir: dir}
	if _, err := exec.LookPath("unshare"); err != nil {
		return fs
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		return fs
	}
	cmd := exec.Command("unshare", "-Urm", "--propagation", "private", "sh", "-c",
		fmt.Sprintf("mount -t tmpfs -o size=%s,mode=0700 chaos-state %q && echo ready && exec sleep 100000", stateFSSize, dir))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fs
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Logf("state dir: no mount namespace (%v): a plain directory; full/read-only faults skipped", err)
		return fs
	}
	ready := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- strings.TrimSpace(line) == "ready"
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case ok := <-ready:
		if !ok {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Logf("state dir: tmpfs mount in a user namespace failed: a plain directory; full/read-only faults skipped")
			return fs
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fs
	}
	fs.holder = cmd
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return fs
}

// ok reports whether the tmpfs is there (the full/read-only faults work).
func (fs *stateFS) ok() bool { return fs.holder != nil }

// wrap returns argv run inside the namespace.
func (fs *stateFS) wrap(argv []string) []string {
	if fs.holder == nil {
		return argv
	}
	return append([]string{"nsenter", "-t", strconv.Itoa(fs.holder.Process.Pid), "-U", "-m", "--preserve-credentials", "--"}, argv...)
}

// inside runs a command in the namespace (mount, dd).
func (fs *stateFS) inside(argv ...string) error {
	out, err := exec.Command(fs.wrap(argv)[0], fs.wrap(argv)[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %v: %s", argv, err, out)
	}
	return nil
}

// fill writes a file that takes every free byte of the tmpfs; unfill
// removes it.
func (fs *stateFS) fill() error {
	err := fs.inside("sh", "-c", fmt.Sprintf("dd if=/dev/zero of=%q bs=64k 2>/dev/null; true", filepath.Join(fs.dir, "filler")))
	return err
}

func (fs *stateFS) unfill() error { return fs.inside("rm", "-f", filepath.Join(fs.dir, "filler")) }

func (fs *stateFS) readOnly(ro bool) error {
	opt := "remount,rw"
	if ro {
		opt = "remount,ro"
	}
	return fs.inside("mount", "-o", opt, fs.dir)
}

// Meshfed is one replica: the built binary under its own config, state
// directory and log, started and killed by the fault schedule.
type Meshfed struct {
	Name      string // scope in the History: "meshfed-a"
	Config    string
	XDS       string
	Admin     string
	state     *stateFS
	proc      *servers.Process
	mu        sync.Mutex
	killed    bool // the exit that follows was ours
	exits     []string
	hist      *History
	downEnd   func()
	monitorWG sync.WaitGroup
}

func newMeshfed(t testing.TB, name, bin, config, xds, adminAddr, dir string, state *stateFS, h *History) *Meshfed {
	argv := state.wrap([]string{bin, "run", "--config", config, "--log-level", "info"})
	m := &Meshfed{Name: name, Config: config, XDS: xds, Admin: adminAddr, state: state, hist: h,
		proc: &servers.Process{Name: name, Bin: argv[0], Args: argv[1:], LogPath: filepath.Join(dir, name+".log"), StopTimeout: 20 * time.Second}}
	t.Cleanup(func() { m.proc.Stop() })
	return m
}

// Start starts the binary, waits until /readyz answers 200 and watches for
// an exit the test did not cause.
func (m *Meshfed) Start() error {
	m.mu.Lock()
	m.killed = false
	m.mu.Unlock()
	if err := m.proc.Start(); err != nil {
		return err
	}
	exited := m.proc.Exited()
	m.monitorWG.Add(1)
	go func() {
		defer m.monitorWG.Done()
		<-exited
		m.mu.Lock()
		defer m.mu.Unlock()
		if !m.killed {
			m.exits = append(m.exits, time.Now().UTC().Format("15:04:05.000")+" exited unasked; log tail:\n"+tailString(m.proc.Log(), 3000))
		}
	}()
	err := m.proc.WaitReady(90*time.Second, func() error {
		code, body, err := m.get("/readyz")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("readyz %d: %s", code, body)
		}
		return nil
	})
	m.mu.Lock()
	if m.downEnd != nil {
		m.downEnd()
		m.downEnd = nil
	}
	m.mu.Unlock()
	return err
}

// Kill SIGKILLs the replica (a crash); its Down interval lasts until Start
// answers ready.
func (m *Meshfed) Kill() {
	m.mu.Lock()
	m.killed = true
	m.downEnd = m.hist.Down(m.Name, "SIGKILL and warm restart")
	m.mu.Unlock()
	m.proc.Kill()
}

// Reload sends SIGHUP.
func (m *Meshfed) Reload() bool { return m.proc.Signal(syscall.SIGHUP) }

// Stop ends the replica at the end of a run (SIGTERM).
func (m *Meshfed) Stop() {
	m.mu.Lock()
	m.killed = true
	m.mu.Unlock()
	m.proc.Stop()
	m.monitorWG.Wait()
}

// Exits are the exits the test did not cause.
func (m *Meshfed) Exits() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.exits...)
}

// Pid is the running process's id, 0 if none.
func (m *Meshfed) Pid() int { return m.proc.PID() }

// Log is the replica's output, every start appended.
func (m *Meshfed) Log() string { return m.proc.Log() }

var adminClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func (m *Meshfed) get(path string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.Admin+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := adminClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// Digest is /debug/digestz.
func (m *Meshfed) Digest() (admin.DigestInfo, error) {
	var d admin.DigestInfo
	code, body, err := m.get("/debug/digestz")
	if err != nil {
		return d, err
	}
	if code != http.StatusOK {
		return d, fmt.Errorf("digestz %d: %s", code, body)
	}
	return d, json.Unmarshal(body, &d)
}

// Registries is /healthz/registries: name → state.
func (m *Meshfed) Registries() (map[string]string, error) {
	_, body, err := m.get("/healthz/registries")
	if err != nil {
		return nil, err
	}
	var rs []struct {
		Name  string `json:"name"`
		State string `json:"state"`
	}
	if err := json.Unmarshal(body, &rs); err != nil {
		return nil, fmt.Errorf("%v: %s", err, body)
	}
	out := map[string]string{}
	for _, r := range rs {
		out[r.Name] = r.State
	}
	return out, nil
}

// Metrics reads the named counters and gauges (summed over labels) from
// /metrics.
func (m *Meshfed) Metrics(names ...string) (map[string]float64, error) {
	code, body, err := m.get("/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, errors.New("metrics: " + strconv.Itoa(code))
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		base, _, _ := strings.Cut(name, "{")
		for _, n := range names {
			if base == n {
				f := strings.Fields(rest)
				if len(f) > 0 {
					v, err := strconv.ParseFloat(f[0], 64)
					if err == nil {
						out[n] += v
					}
				}
			}
		}
	}
	return out, nil
}

// procStats reads a process's resident set (bytes) and open fds.
func procStats(pid int) (rss int64, fds int, err error) {
	rss, _, err = bench.Mem(pid)
	if err != nil {
		return 0, 0, err
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return rss, 0, err
	}
	return rss, len(ents), nil
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
