// Package servers starts the real backend servers that tests talk to
// (ZooKeeper, Consul, ...) on 127.0.0.1, each owned by one test and
// stopped by its cleanup.
//
// A server whose binary is missing skips the test, unless
// MESHFED_REQUIRE_SERVERS=1 (as `make test` sets it), in which case the test
// fails: CI must never pass by skipping.
package servers

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Missing skips or fails t because what is not installed; see the package
// doc.
func Missing(t testing.TB, what, hint string) {
	t.Helper()
	if os.Getenv("MESHFED_REQUIRE_SERVERS") == "1" {
		t.Fatalf("%s is not installed (%s); MESHFED_REQUIRE_SERVERS=1 forbids skipping", what, hint)
	}
	t.Skipf("%s is not installed (%s); `make test` installs it", what, hint)
}

// handedOut holds every port FreePort, LowPort and LowListener returned
// in this process: none is returned twice, so that a server stopped and
// started again on its ports (a restart test) never finds one taken by
// another test of the same package meanwhile (a parallel test's pick of
// the free port made `consul agent` fail "address already in use").
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// reserve marks p handed out; false if it already was.
func reserve(p int) bool {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports[p] {
		return false
	}
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	handedOut.ports[p] = true
	return true
}

// lowListen listens on a loopback port of [20000, 20000+span) not handed
// out before in this process, and reserves it; nil if 100 tries failed.
func lowListen(span int) net.Listener {
	for range 100 {
		p := 20000 + rand.IntN(span)
		if !reserve(p) {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err == nil {
			return l
		}
	}
	return nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago,
// below 32768: outside Linux's ephemeral range (32768–60999), so that no
// outgoing connection takes it meanwhile — a server restarted on its port
// (a chaos test's SIGKILL and restart) finds it free — and never handed
// out before in this process. Ports up to 31767, so that FreePortPair's
// port + 1000 stays below too.
func FreePort(t testing.TB) int {
	t.Helper()
	if l := lowListen(11768); l != nil {
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// FreePorts returns n distinct ports as FreePort does, for one server
// that listens on several.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for len(ports) < n {
		ports = append(ports, FreePort(t))
	}
	return ports
}

// LowListener listens on a loopback port below 32768 (see LowPort),
// closed in t.Cleanup.
func LowListener(t testing.TB) net.Listener {
	t.Helper()
	l := lowListen(12000)
	if l == nil {
		t.Fatal("no free loopback port below 32768")
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// LowPort returns a loopback port below 32768 (outside Linux's ephemeral
// range, so no outgoing connection takes it meanwhile) that was free a
// moment ago and was not handed out before in this process.
func LowPort(t testing.TB) int {
	t.Helper()
	l := lowListen(12000)
	if l == nil {
		t.Fatal("no free loopback port below 32768")
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// FreePortPair returns a loopback port p such that p and p+offset were
// both free a moment ago (Nacos serves gRPC on its HTTP port + 1000).
func FreePortPair(t testing.TB, offset int) int {
	t.Helper()
	for range 50 {
		p := FreePort(t)
		if p+offset > 65535 || !reserve(p+offset) {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+offset))
		if err != nil {
			continue
		}
		l.Close()
		return p
	}
	t.Fatalf("no free port pair %d apart", offset)
	return 0
}

// CacheDir is where tools/testservers puts the servers it builds:
// $MESHFED_CACHE, else $XDG_CACHE_HOME/meshfed, else ~/.cache/meshfed.
func CacheDir() string {
	if d := os.Getenv("MESHFED_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "meshfed")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "meshfed-cache")
	}
	return filepath.Join(home, ".cache", "meshfed")
}

// builtBinary returns the path of exe as `tools/testservers/build.sh`
// builds it, in CacheDir()/bin/dir, and whether it exists.
func builtBinary(dir, exe string) (string, bool) {
	p := filepath.Join(CacheDir(), "bin", dir, exe)
	return p, isFile(p)
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// needBinary returns the path find returns, or calls Missing: what is not
// installed, `tools/testservers/build.sh target` builds it.
func needBinary(t testing.TB, find func() (string, bool), what, target string) string {
	t.Helper()
	bin, ok := find()
	if !ok {
		Missing(t, what, "tools/testservers/build.sh "+target)
	}
	return bin
}

// httpOK GETs url, with token as a bearer token unless it is "", and wants
// 200 within 5s.
func httpOK(c *http.Client, url, token string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}
