package s6

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
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/test/servers"
)

// The independent observer of the eureka and nacos KS rows: it measures
// Polaris' own delay per change, so that a row can say how much of a
// change's latency is the server's and how much meshfed's. It shares no
// code with the registries: for Eureka it polls /apps/delta (what the
// registry polls) every observerPoll with a plain HTTP client; for Nacos
// it is a nacos-sdk-go client subscribed to the services the row will
// change, as applications watch a service. It runs in a process of its
// own (this test binary again, as TestPolarisObserver), so that its CPU
// is not counted in the row's CPU per change, and prints each instance
// ("<host> <address>") the first time it sees it, with the time it saw it.

// observerEnv holds the observer process's arguments: "eureka <url>" or
// "nacos <host:port> <service>...".
const observerEnv = "MESHFED_POLARIS_OBSERVER"

const (
	// observerPoll is how often the Eureka observer polls /apps/delta.
	observerPoll = 25 * time.Millisecond
	// observerLife bounds the observer process, should its parent never
	// close its stdin.
	observerLife = 2 * time.Hour
	// observerGrace is how long the parent waits for sightings still in
	// flight once the row's changes were seen at the sink.
	observerGrace = 5 * time.Second
)

// observer is a running observer process as its parent sees it.
type observer struct {
	mu   sync.Mutex
	seen map[string]time.Time // "<host> <address>" → first sighting
	// done is closed when the process's output ended.
	done     chan struct{}
	deadline time.Time // of observed's waits (zero: not waiting yet)
}

// startObserver runs the observer process with args, waits until it is
// ready (subscribed, or its first poll answered) and ends it in
// t.Cleanup.
func startObserver(t testing.TB, args ...string) *observer {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPolarisObserver$")
	cmd.Env = append(os.Environ(), observerEnv+"="+strings.Join(args, " "))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("observer: %v", err)
	}
	o := &observer{seen: map[string]time.Time{}, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		defer close(o.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 1 && f[0] == "ready":
				close(ready)
			case len(f) == 4 && f[0] == "seen":
				ns, err := strconv.ParseInt(f[3], 10, 64)
				if err != nil {
					continue
				}
				o.mu.Lock()
				o.seen[f[1]+" "+f[2]] = time.Unix(0, ns)
				o.mu.Unlock()
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		stdin.Close() // the observer ends when its stdin does
		select {
		case <-o.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
		_ = cmd.Wait()
	})
	select {
	case <-ready:
	case <-o.done:
		t.Fatalf("observer %v ended before it was ready", args)
	case <-time.After(2 * time.Minute):
		t.Fatalf("observer %v not ready within 2m", args)
	}
	return o
}

// observed implements bench.KindScaleTarget.Observed: when the observer
// first saw c's address in c's host. Sightings may still be on their way
// when the row asks: it waits for them up to observerGrace in all.
func (o *observer) observed(c bench.ScaleChange) (time.Time, bool) {
	key := c.Host + " " + c.Value
	for {
		o.mu.Lock()
		at, ok := o.seen[key]
		if o.deadline.IsZero() {
			o.deadline = time.Now().Add(observerGrace)
		}
		late := time.Now().After(o.deadline)
		o.mu.Unlock()
		if ok || late {
			return at, ok
		}
		select {
		case <-o.done:
			return time.Time{}, false
		case <-time.After(observerPoll):
		}
	}
}

// TestPolarisObserver is not a test: it is the observer process that
// startObserver runs, and skips unless observerEnv is set.
func TestPolarisObserver(t *testing.T) {
	spec := strings.Fields(os.Getenv(observerEnv))
	if len(spec) < 2 {
		t.Skip("the eureka and nacos KS rows' observer process, run by startObserver")
	}
	ctx, cancel := context.WithTimeout(context.Background(), observerLife)
	defer cancel()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	var mu sync.Mutex
	seen := map[string]bool{}
	report := func(key string, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if !seen[key] {
			seen[key] = true
			fmt.Printf("seen %s %d\n", key, at.UnixNano())
		}
	}
	var err error
	switch spec[0] {
	case "eureka":
		err = observeEurekaDelta(ctx, spec[1], report)
	case "nacos":
		err = observeNacos(ctx, t, spec[1], spec[2:], report)
	default:
		err = fmt.Errorf("unknown observer %q", spec[0])
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "observer:", err)
		os.Exit(1)
	}
	// Skip the SDK's cleanup and the test framework's summary.
	os.Exit(0)
}

// observeEurekaDelta polls url's /apps/delta every observerPoll until ctx
// ends and reports each instance added or modified as "<app>.eureka
// <ipAddr>", at the arrival of the first answer holding it.
func observeEurekaDelta(ctx context.Context, url string, report func(string, time.Time)) error {
	c := &http.Client{Timeout: 5 * time.Second}
	tick := time.NewTicker(observerPoll)
	defer tick.Stop()
	ready := false
	for {
		err := eurekaDeltaOnce(ctx, c, url, report)
		if err == nil && !ready {
			ready = true
			fmt.Println("ready")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func eurekaDeltaOnce(ctx context.Context, c *http.Client, url string, report func(string, time.Time)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/apps/delta", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	at := time.Now()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	var d struct {
		Applications struct {
			Application []struct {
				Name     string          `json:"name"`
				Instance json.RawMessage `json:"instance"`
			} `json:"application"`
		} `json:"applications"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		return err
	}
	type inst struct {
		IPAddr     string `json:"ipAddr"`
		ActionType string `json:"actionType"`
	}
	for _, a := range d.Applications.Application {
		var many []inst
		if json.Unmarshal(a.Instance, &many) != nil {
			var one inst
			if json.Unmarshal(a.Instance, &one) != nil {
				continue
			}
			many = []inst{one}
		}
		for _, in := range many {
			if in.ActionType != "DELETED" {
				report(strings.ToLower(a.Name)+".eureka "+in.IPAddr, at)
			}
		}
	}
	return nil
}

// observeNacos subscribes an SDK client of addr's Nacos API to services
// and reports each instance as "<service>.nacos <ip>" when a push first
// lists it, until ctx ends.
func observeNacos(ctx context.Context, t testing.TB, addr string, services []string, report func(string, time.Time)) error {
	c := (&servers.Polaris{NacosAddr: addr}).NacosClient(t, "")
	for _, s := range services {
		err := c.Subscribe(s, func(ips []string) {
			at := time.Now()
			for _, ip := range ips {
				report(s+".nacos "+ip, at)
			}
		})
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", s, err)
		}
	}
	fmt.Println("ready")
	<-ctx.Done()
	return nil
}
