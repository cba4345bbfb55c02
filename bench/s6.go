package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// S6Row is one registry's row of S6 (ingest latency): registry write →
// the registry's Sink.Replace that first holds the change. A row is
// registered from a _test.go file in bench/s6 (see bench/s6/README in
// BENCHMARKS.md):
//
//	func init() { rows = append(rows, bench.S6Row{Name: "zookeeper", Goal: 20 * time.Millisecond, Setup: zkSetup}) }
type S6Row struct {
	Name string // registry kind, as in clusters.yaml
	// Goal is the p99 goal (0: report only).
	Goal time.Duration
	// Note is printed beside the figure (e.g. the poll interval used).
	Note string
	// Smoke rows need no external server and also run, with a few writes,
	// in `go test ./bench/...`.
	Smoke bool
	// Setup starts the real backend on 127.0.0.1 (stopped by t.Cleanup; it
	// calls servers.Missing when the backend is not installed) and returns
	// the registry under test, built by its kind's Config.New.
	Setup func(t testing.TB) S6Target
}

// S6Target is a running backend and the registry that watches it.
type S6Target struct {
	Registry registries.Registry
	Common   registries.Common // what Registry was built with
	// Write makes change n (1, 2, …) in the backend: it adds one endpoint
	// nobody published before and says where meshfed must see it.
	Write func(ctx context.Context, n int) (S6Change, error)
}

// S6Change is what a write adds.
type S6Change struct {
	Host    string // hostname as the registry publishes it
	Address string // the new endpoint's address
	// Stamp is when the write was made; zero means just before Write was
	// called.
	Stamp time.Time
}

// S6Result is one row's outcome.
type S6Result struct {
	Name    string  `json:"name"`
	Goal    int64   `json:"goal"` // ns
	Latency Summary `json:"latency"`
	Lost    int     `json:"lost"` // writes never seen within the timeout
	Note    string  `json:"note,omitempty"`
	Skipped string  `json:"skipped,omitempty"`
}

// s6Sink records Replace calls and notices the awaited change.
type s6Sink struct {
	mu     sync.Mutex
	last   []model.Service
	lastAt time.Time
	want   *S6Change
	seen   chan time.Time
	first  chan struct{}
	once   sync.Once
}

func holds(services []model.Service, c *S6Change) bool {
	for i := range services {
		if services[i].Hostname != c.Host {
			continue
		}
		for _, e := range services[i].Endpoints {
			if e.Address == c.Address {
				return true
			}
		}
	}
	return false
}

func (s *s6Sink) Replace(_ model.ShardKey, services []model.Service, _ []model.Rejection) {
	now := time.Now()
	s.mu.Lock()
	s.last, s.lastAt = services, now
	if s.want != nil && holds(services, s.want) {
		s.want = nil
		s.seen <- now
	}
	s.mu.Unlock()
	s.once.Do(func() { close(s.first) })
}

func (s *s6Sink) Report(model.ShardKey, registries.Status) {}

// RunS6 runs row: n writes spaced by gap, each awaited (up to 30 s)
// before the next.
func RunS6(t testing.TB, row S6Row, n int, gap time.Duration) S6Result {
	res := S6Result{Name: row.Name, Goal: int64(row.Goal), Note: row.Note}
	tg := row.Setup(t)
	sink := &s6Sink{seen: make(chan time.Time, 1), first: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tg.Registry.Run(ctx, sink)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-sink.first:
	case <-time.After(time.Minute):
		t.Fatalf("%s: no initial Replace within a minute", row.Name)
	}
	var lat []float64
	for i := 1; i <= n; i++ {
		before := time.Now()
		ch, err := tg.Write(ctx, i)
		if err != nil {
			t.Fatalf("%s: write %d: %v", row.Name, i, err)
		}
		if ch.Stamp.IsZero() {
			ch.Stamp = before
		}
		sink.mu.Lock()
		var at time.Time
		if holds(sink.last, &ch) {
			at = sink.lastAt
		} else {
			sink.want = &ch
		}
		sink.mu.Unlock()
		if at.IsZero() {
			select {
			case at = <-sink.seen:
			case <-time.After(30 * time.Second):
				sink.mu.Lock()
				sink.want = nil
				sink.mu.Unlock()
				res.Lost++
				continue
			}
		}
		lat = append(lat, float64(at.Sub(ch.Stamp))/float64(time.Millisecond))
		time.Sleep(gap)
	}
	res.Latency = Summarize(lat)
	if res.Lost > 0 {
		res.Note += fmt.Sprintf(" (%d writes not seen within 30 s)", res.Lost)
	}
	return res
}
