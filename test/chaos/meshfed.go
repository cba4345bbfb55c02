package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
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

// Meshfed is one replica: the built binary under its own config, state
// directory and log, started and killed by the fault schedule.
type Meshfed struct {
	Name      string // scope in the History: "meshfed-a"
	Config    string
	XDS       string
	Admin     string
	state     *servers.StateFS
	proc      *servers.Process
	mu        sync.Mutex
	killed    bool // the exit that follows was ours
	exits     []string
	hist      *History
	downEnd   func()
	monitorWG sync.WaitGroup
}

func newMeshfed(t testing.TB, name, bin, config, xds, adminAddr, dir string, state *servers.StateFS, h *History) *Meshfed {
	argv := state.Wrap([]string{bin, "run", "--config", config, "--log-level", "info"})
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
