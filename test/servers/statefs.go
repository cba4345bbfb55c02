package servers

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// StateFS is a small tmpfs for meshfed's state directory, so that the
// state directory can fill up and turn read-only without root on the host
// and without touching the host's file systems: an unprivileged user and
// mount namespace (unshare -Urm) holds the mount, a sleeping process keeps
// the namespace alive, and meshfed runs inside it (nsenter -U -m, which
// execs: meshfed keeps the pid the test signals). The harness reaches the
// files through /proc/<holder>/root. Where user namespaces are not
// available the state directory is a plain directory and the
// faults that need them are skipped (OK).
type StateFS struct {
	Dir    string // the mount point (same path inside and outside)
	holder *exec.Cmd
}

// StateFSSize is the tmpfs size: room for the registries' states of a run
// (a few KiB each) many times over.
const StateFSSize = "4m"

// NewStateFS mounts a StateFS at dir (created), unmounted when t ends;
// where it cannot, dir is a plain directory and OK reports false.
func NewStateFS(t testing.TB, dir string) *StateFS {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	fs := &StateFS{Dir: dir}
	if _, err := exec.LookPath("unshare"); err != nil {
		return fs
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		return fs
	}
	cmd := exec.Command("unshare", "-Urm", "--propagation", "private", "sh", "-c",
		fmt.Sprintf("mount -t tmpfs -o size=%s,mode=0700 chaos-state %q && echo ready && exec sleep 100000", StateFSSize, dir))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fs
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Logf("state dir: no mount namespace (%v): a plain directory; Fill and ReadOnly do not work", err)
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
			t.Logf("state dir: tmpfs mount in a user namespace failed: a plain directory; Fill and ReadOnly do not work")
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

// OK reports whether the tmpfs is there (Fill and ReadOnly work).
func (fs *StateFS) OK() bool { return fs.holder != nil }

// Wrap returns argv run inside the namespace (a process that uses the
// state directory runs so).
func (fs *StateFS) Wrap(argv []string) []string {
	if fs.holder == nil {
		return argv
	}
	return append([]string{"nsenter", "-t", strconv.Itoa(fs.holder.Process.Pid), "-U", "-m", "--preserve-credentials", "--"}, argv...)
}

// Inside runs a command in the namespace (mount, dd).
func (fs *StateFS) Inside(argv ...string) error {
	out, err := exec.Command(fs.Wrap(argv)[0], fs.Wrap(argv)[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %v: %s", argv, err, out)
	}
	return nil
}

// Fill writes a file that takes every free byte of the tmpfs; Unfill
// removes it.
func (fs *StateFS) Fill() error {
	err := fs.Inside("sh", "-c", fmt.Sprintf("dd if=/dev/zero of=%q bs=64k 2>/dev/null; true", filepath.Join(fs.Dir, "filler")))
	return err
}

func (fs *StateFS) Unfill() error { return fs.Inside("rm", "-f", filepath.Join(fs.Dir, "filler")) }

// ReadOnly remounts the tmpfs read-only (true) or read-write.
func (fs *StateFS) ReadOnly(ro bool) error {
	opt := "remount,rw"
	if ro {
		opt = "remount,ro"
	}
	return fs.Inside("mount", "-o", opt, fs.Dir)
}
