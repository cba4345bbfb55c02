package servers

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// zooKeeperJar is Debian's ZooKeeper jar; its manifest Class-Path names
// every dependency under /usr/share/java, so it is the whole classpath.
const zooKeeperJar = "/usr/share/java/zookeeper.jar"

// ZooKeeperStartTimeout bounds how long StartZooKeeper and Start wait for
// the server to serve (a JVM start on a loaded machine takes seconds).
var ZooKeeperStartTimeout = 90 * time.Second

// ZooKeeper is a standalone ZooKeeper server on 127.0.0.1 with a data
// directory of its own, owned by one test. Its methods are safe for
// concurrent use.
type ZooKeeper struct {
	t    testing.TB
	dir  string // holds zoo-<port>.cfg, data/ and the logs
	port int    // the port Addr names

	mu   sync.Mutex
	proc *Process // the running server; nil when stopped
}

// StartZooKeeper starts a standalone ZooKeeper (Debian package
// `zookeeper`) on a free loopback port with a temporary data directory,
// waits until it serves, and stops it in t.Cleanup. Without the package it
// calls Missing.
func StartZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	if _, err := exec.LookPath("java"); err != nil {
		Missing(t, "java", "apt-get install default-jre-headless")
	}
	if _, err := os.Stat(zooKeeperJar); err != nil {
		Missing(t, "ZooKeeper", "apt-get install zookeeper")
	}
	z := &ZooKeeper{t: t, dir: t.TempDir(), port: FreePort(t)}
	t.Cleanup(z.Stop)
	if err := z.start(z.port); err != nil {
		t.Fatalf("zookeeper: %v", err)
	}
	return z
}

// Addr is the server's client address, 127.0.0.1:port.
func (z *ZooKeeper) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(z.port)) }

// DataDir is the server's data directory; it survives Stop.
func (z *ZooKeeper) DataDir() string { return filepath.Join(z.dir, "data") }

// Start restarts a stopped server on the same port and data directory and
// waits until it serves. It fails the test if it cannot.
func (z *ZooKeeper) Start() {
	z.t.Helper()
	if err := z.start(z.port); err != nil {
		z.t.Fatalf("zookeeper: %v", err)
	}
}

// StartAside starts a stopped server on another free port with the same
// data directory and returns its address: clients of Addr cannot reach it,
// so changes made through it are made "while they were away". Stop it
// with Stop before Start.
func (z *ZooKeeper) StartAside() string {
	z.t.Helper()
	port := FreePort(z.t)
	if err := z.start(port); err != nil {
		z.t.Fatalf("zookeeper: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// Stop stops the running server (its whole process group) and waits for
// it to exit. Stopping a stopped server does nothing.
func (z *ZooKeeper) Stop() {
	z.mu.Lock()
	p := z.proc
	z.proc = nil
	z.mu.Unlock()
	if p != nil {
		p.Stop()
	}
}

// Kill SIGKILLs the running server's process group (a crash: nothing is
// flushed) and waits for it; Start restarts it. Killing a stopped server
// does nothing.
func (z *ZooKeeper) Kill() {
	z.mu.Lock()
	p := z.proc
	z.proc = nil
	z.mu.Unlock()
	if p != nil {
		p.Kill()
	}
}

// Signal sends sig to the running server's process group (SIGSTOP and
// SIGCONT: a hung server); false when it is stopped.
func (z *ZooKeeper) Signal(sig syscall.Signal) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.proc != nil && z.proc.Signal(sig)
}

// Pid is the running server's process id, 0 when stopped.
func (z *ZooKeeper) Pid() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.proc == nil {
		return 0
	}
	return z.proc.PID()
}

func (z *ZooKeeper) start(port int) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.proc != nil {
		return errors.New("already running; Stop it first")
	}
	data := filepath.Join(z.dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return err
	}
	cfgPath := filepath.Join(z.dir, fmt.Sprintf("zoo-%d.cfg", port))
	cfg := strings.Join([]string{
		"tickTime=500",
		"initLimit=10",
		"syncLimit=5",
		"dataDir=" + data,
		"clientPort=" + strconv.Itoa(port),
		"clientPortAddress=127.0.0.1",
		"maxClientCnxns=0",
		"minSessionTimeout=1000",
		"maxSessionTimeout=60000",
		"admin.enableServer=false",
		"4lw.commands.whitelist=srvr,ruok",
		// The process is killed, never the machine: no fsync needed.
		"forceSync=no",
		"preAllocSize=4096",
		"", // trailing newline
	}, "\n")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p := &Process{
		Name: "server on " + addr,
		Bin:  "java",
		Args: []string{
			"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
			"-Dzookeeper.admin.enableServer=false",
			"-cp", zooKeeperJar,
			"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgPath},
		Dir:     z.dir,
		LogPath: filepath.Join(z.dir, fmt.Sprintf("zookeeper-%d.log", port)),
	}
	err := p.StartReady(ZooKeeperStartTimeout, func() error {
		if serving(addr) {
			return nil
		}
		return errors.New("not serving")
	})
	if err != nil {
		p.Stop()
		return err
	}
	z.proc = p
	return nil
}

// serving asks the server the `srvr` four-letter word; a server that
// serves answers with its mode.
func serving(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("srvr")); err != nil {
		return false
	}
	b, _ := io.ReadAll(c)
	return bytes.Contains(b, []byte("Mode: standalone"))
}
