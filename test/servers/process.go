package servers

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Process is a server's child process. It runs in its own process group,
// so that Stop also reaches what it forks (a JVM, a server's helpers), and
// appends its output to a log file. A stopped Process starts again with
// the same command: same ports, same data directory. Its methods are safe
// for concurrent use.
type Process struct {
	Name string // in errors, e.g. "consul"
	Bin  string
	Args []string
	// Dir is the working directory; "" is the test's.
	Dir string
	// Env is added to the test's environment.
	Env []string
	// LogPath receives stdout and stderr, appended across restarts.
	LogPath string
	// MoreLogs are files the server writes itself (relative to Dir), shown
	// after LogPath by Log.
	MoreLogs []string
	// StopTimeout is how long Stop waits after SIGTERM before it sends
	// SIGKILL; 0 means 10s.
	StopTimeout time.Duration

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has been waited for
}

// readyPoll is how often WaitReady asks.
const readyPoll = 100 * time.Millisecond

// Start starts the process. It fails if it was started and not stopped
// since.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s: already running; Stop it first", p.Name)
	}
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Dir = p.Dir
	if len(p.Env) > 0 {
		cmd.Env = append(os.Environ(), p.Env...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%s: start: %w", p.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	p.cmd, p.done = cmd, done
	return nil
}

// Stop sends SIGTERM to the process group, then SIGKILL after
// StopTimeout, and waits for the process. It reports whether the process
// had been started (and not stopped).
func (p *Process) Stop() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	timeout := p.StopTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	p.cmd, p.done = nil, nil
	return true
}

// Signal sends sig to the process group (SIGSTOP and SIGCONT hang and
// resume a server; a chaos test's faults). It reports whether the process
// was running.
func (p *Process) Signal(sig syscall.Signal) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	return syscall.Kill(-p.cmd.Process.Pid, sig) == nil
}

// Kill sends SIGKILL to the process group (a crash, not a stop: nothing
// is flushed) and waits for the process. A killed Process starts again
// with Start. It reports whether the process had been started.
func (p *Process) Kill() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	p.cmd, p.done = nil, nil
	return true
}

// PID is the process id, 0 when the process is not running.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Exited is closed once the process has exited; it is closed already when
// the process is not started.
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return p.done
}

// WaitReady polls ready until it returns nil. It fails when the process
// exits first or timeout passes, with the end of the log in the error; the
// process is left as it is.
func (p *Process) WaitReady(timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-p.Exited():
			return fmt.Errorf("%s exited during start; log:\n%s", p.Name, tail(p.Log(), 8000))
		case <-time.After(readyPoll):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %v: %v; log:\n%s", p.Name, timeout, err, tail(p.Log(), 8000))
		}
	}
}

// StartReady starts the process and waits as WaitReady does.
func (p *Process) StartReady(timeout time.Duration, ready func() error) error {
	if err := p.Start(); err != nil {
		return err
	}
	return p.WaitReady(timeout, ready)
}

// Log returns the process's output so far, followed by MoreLogs.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	out := string(b)
	for _, name := range p.MoreLogs {
		more, _ := os.ReadFile(filepath.Join(p.Dir, name))
		out += "\n--- " + name + " ---\n" + string(more)
	}
	return out
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
