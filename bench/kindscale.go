package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// Scenario KS (issue #22): one registry kind, or config source, against
// its real server holding a catalog of a given size. What it measures,
// per kind and size:
//
//   - the fixture's load into the server, reported apart;
//   - the first sync: Run starts → the first state at the sink that holds
//     the whole fixture;
//   - one change at a time → the first state at the sink holding it
//     (Sink.Publish for registries, the published snapshot for config
//     sources), with the process's CPU per change;
//   - the Go heap and RSS the running registry holds per endpoint (per
//     object for config sources).
//
// Each kind plugs in with a KindScaleRow, whose Setup is the only code of
// its own: start the server, load the fixture, say how to run what is
// measured and how to make change n. bench/s6's TestKindScale runs the
// rows and writes []KindScaleResult as JSON for benchreport.

// KindScaleRow is one kind of scenario KS. It is registered from a
// _test.go file in bench/s6:
//
//	func init() { kindScaleRows = append(kindScaleRows, bench.KindScaleRow{Kind: "zookeeper-curator", Goal: 50 * time.Millisecond, Setup: zkScale}) }
type KindScaleRow struct {
	// Kind names the row: the clusters.yaml kind, with a variant after a
	// dash when a kind has several (zookeeper-curator, file-flow).
	Kind string
	// Goal is the p99 goal of one change → sink (0: report only).
	Goal time.Duration
	// Sizes are the catalog sizes (services, or objects for config
	// sources) to run at; nil: the test's -kindscale.sizes.
	Sizes []int
	// Smoke rows need no external server: they also run, at a tiny size,
	// in `go test ./bench/...`.
	Smoke bool
	// OwnGoal, for rows whose target has an Observed, is the p99 goal of
	// the measured code's own part of a change: its latency minus the
	// server's delay, change by change. The change → sink goal is then
	// the measured server delay's p99 + OwnGoal instead of Goal.
	OwnGoal time.Duration
	// Note is printed beside the figures.
	Note string
	// Setup starts the real server on 127.0.0.1 (stopped by t.Cleanup;
	// it calls servers.Missing when the server is not installed), loads
	// a fixture of services services into it and returns what to run.
	Setup func(t testing.TB, services int) KindScaleTarget
}

// KindScaleTarget is a loaded server and what watches it.
type KindScaleTarget struct {
	// Load is how long loading the fixture took; 0: the harness times
	// Setup as a whole.
	Load time.Duration
	// Services and Endpoints are what the fixture holds: the first state
	// whose Size reaches both is the end of the first sync. A config
	// source counts objects as services and sets Endpoints 0.
	Services, Endpoints int
	// Run runs what is measured until ctx ends, handing every state it
	// publishes to sink. RegistryRun adapts a registries.Registry.
	Run func(ctx context.Context, sink ScaleSink) error
	// Change makes change n (1, 2, …) in the server and says how the
	// harness recognizes it in a published state. Each change is awaited
	// before the next.
	Change func(ctx context.Context, n int) (ScaleChange, error)
	// Note is appended to the row's.
	Note string
	// After, when set, is called once the changes were seen; what it
	// returns is appended to the note (e.g. the registry's own share of
	// the latency, from its metrics).
	After func() string
	// Observed, when set, says when an observer independent of the
	// measured code (its own client of the server, polling or subscribed,
	// in another process) first saw change c; false when it did not. The
	// harness asks for every change once the last was seen, and reports
	// the server's delay (Observed − Stamp) and the measured code's own
	// part (its seen − Observed) change by change.
	Observed func(c ScaleChange) (time.Time, bool)
}

// ScaleChange is what a change makes: Host gets Value (for registries an
// endpoint address; a config source's adapter decides what its values
// are, see ScaleState.Holds).
type ScaleChange struct {
	Host, Value string
	// Stamp is when the change was made; zero means just before Change
	// was called.
	Stamp time.Time
	// WriterCPU, when the target measured it, is the CPU Change spent
	// making the change in this process (the file kinds: rendering and
	// writing the file, as an editor would), part of the process's CPU
	// that is not the measured code's.
	WriterCPU time.Duration
}

// ScaleState is one published state as the harness reads it.
type ScaleState interface {
	// Size is how many services (objects) and endpoints the state holds.
	Size() (services, endpoints int)
	// Holds reports whether the state shows c.
	Holds(c ScaleChange) bool
}

// ScaleSink is told every state the measured code publishes. Observe is
// cheap and does not block; it is safe for concurrent use.
type ScaleSink interface {
	Observe(ScaleState)
}

// RegistryRun returns a KindScaleTarget.Run that runs reg into an
// aggregator, as meshfed does (no debounce), and tells sink every
// snapshot it builds: the row measures the registry and the shared path
// after it (the Publisher, the delta hand-off, normalization and the
// snapshot), not xDS.
func RegistryRun(reg registries.Registry) func(context.Context, ScaleSink) error {
	return func(ctx context.Context, sink ScaleSink) error {
		agg := aggregate.New(aggregate.Options{})
		agg.Subscribe(func(s *model.Snapshot) { sink.Observe(SnapshotState{s}) })
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = agg.Serve(ctx) }()
		defer func() { cancel(); <-done }()
		return reg.Run(ctx, &addingSink{agg: agg})
	}
}

// addingSink adds the registry to the aggregator at its first update
// (RegistryRun does not know its name and kind).
type addingSink struct {
	agg   *aggregate.Aggregator
	added sync.Once
}

func (s *addingSink) Publish(shard model.ShardKey, u registries.Update) {
	s.added.Do(func() {
		s.agg.AddRegistry(aggregate.RegistryOptions{Common: registries.Common{Name: shard.Name, Kind: shard.Kind}})
	})
	s.agg.Publish(shard, u)
}

// TakesDelta implements registries.DeltaSink.
func (s *addingSink) TakesDelta() bool { return s.agg.TakesDelta() }

// SnapshotState is a snapshot as a ScaleState: Holds is true when the
// service named c.Host has an endpoint with address c.Value.
type SnapshotState struct{ Snap *model.Snapshot }

// Size implements ScaleState.
func (s SnapshotState) Size() (services, endpoints int) {
	for _, svc := range s.Snap.Services() {
		endpoints += len(svc.Endpoints)
	}
	return s.Snap.Len(), endpoints
}

// Holds implements ScaleState.
func (s SnapshotState) Holds(c ScaleChange) bool {
	svc, ok := s.Snap.Service(c.Host)
	return ok && slices.ContainsFunc(svc.Endpoints, func(e model.Endpoint) bool { return e.Address == c.Value })
}

// ServicesState is a registry's published services as a ScaleState: Holds
// is true when the service named c.Host has an endpoint with address
// c.Value.
type ServicesState []model.Service

// Size implements ScaleState.
func (s ServicesState) Size() (services, endpoints int) {
	for i := range s {
		endpoints += len(s[i].Endpoints)
	}
	return len(s), endpoints
}

// Holds implements ScaleState. Registries publish their services in
// hostname order: a binary search finds the host (the services of that
// hostname decide), so the harness does not spend a comparison per
// service of the catalog on every state (CPU per change is the
// process's); a host the search misses (a state in another order) is
// searched through.
func (s ServicesState) Holds(c ScaleChange) bool {
	holds := func(svc *model.Service) bool {
		for _, e := range svc.Endpoints {
			if e.Address == c.Value {
				return true
			}
		}
		return false
	}
	if i, ok := slices.BinarySearchFunc(s, c.Host, func(svc model.Service, h string) int { return strings.Compare(svc.Hostname, h) }); ok {
		for ; i < len(s) && s[i].Hostname == c.Host; i++ {
			if holds(&s[i]) {
				return true
			}
		}
		return false
	}
	for i := range s {
		if s[i].Hostname == c.Host && holds(&s[i]) {
			return true
		}
	}
	return false
}

// KindScaleOptions set how RunKindScale runs a row.
type KindScaleOptions struct {
	Changes int           // changes, one after the other
	Gap     time.Duration // pause after each change was seen
	// SyncTimeout bounds the first sync, ChangeTimeout each change.
	SyncTimeout, ChangeTimeout time.Duration
	// ProfileDir, when set, receives CPU profiles of the first sync and of
	// the changes (<kind>-<services>-sync.pprof, -changes.pprof) and a
	// heap profile after them (<kind>-<services>-heap.pprof).
	ProfileDir string
}

// KindScaleResult is one row at one size. Times are ms, memory bytes.
type KindScaleResult struct {
	Kind      string `json:"kind"`
	Services  int    `json:"services"`
	Endpoints int    `json:"endpoints"`
	Goal      int64  `json:"goal"` // ns; p99 of Change (0: none)
	// Load is the fixture's load into the server (not part of Sync).
	Load float64 `json:"load"`
	// Sync is Run → the first state holding the whole fixture; SyncCPU
	// the process's CPU meanwhile.
	Sync    float64 `json:"sync"`
	SyncCPU float64 `json:"syncCPU"`
	// Change is a change in the server → the first state holding it.
	Change Summary `json:"change"`
	// CPUPerChange is the process's CPU (getrusage: the measured code,
	// the client making the change and the harness) over the changes ÷
	// changes, gaps included.
	CPUPerChange float64 `json:"cpuPerChange"`
	// WriterCPUPerChange is the part of CPUPerChange the targets' Change
	// reported as its own (ScaleChange.WriterCPU); 0 when none did.
	WriterCPUPerChange float64 `json:"writerCpuPerChange,omitempty"`
	// Publishes is how many states were published during the changes.
	Publishes int `json:"publishes"`
	// Heap and RSS are the live Go heap and VmRSS of the process after the
	// changes above what it held before Run (each read after two GCs and
	// FreeOSMemory).
	Heap int64 `json:"heap"`
	RSS  int64 `json:"rss"`
	// Mem is where the RSS growth is, read right after it; Goroutines
	// how many more goroutines the process runs.
	Mem        MemSplit `json:"mem"`
	Goroutines int64    `json:"goroutines"`
	Lost       int      `json:"lost"` // changes never seen
	// Server is the server's own delay per change, from the target's
	// independent observer (Observed − Stamp); Own the measured code's
	// part of each change (seen − Observed); OwnGoal their p99 goal (ns,
	// 0: none); Unobserved the changes seen at the sink but never by the
	// observer. With OwnGoal, Goal is Server's p99 + OwnGoal.
	Server     Summary `json:"server"`
	Own        Summary `json:"own"`
	OwnGoal    int64   `json:"ownGoal,omitempty"`
	Unobserved int     `json:"unobserved,omitempty"`
	Note       string  `json:"note,omitempty"`
	// Skipped says why the row did not run.
	Skipped string `json:"skipped,omitempty"`
}

// PerEndpoint is x ÷ endpoints (÷ services when there are none).
func (r KindScaleResult) PerEndpoint(x int64) float64 {
	n := r.Endpoints
	if n == 0 {
		n = r.Services
	}
	return float64(x) / float64(max(1, n))
}

// scaleSink records states: when the first holding everything came, and
// when the awaited change first showed.
type scaleSink struct {
	services, endpoints int

	mu        sync.Mutex
	last      ScaleState
	publishes int
	synced    time.Time
	// Between begin and expect, the states published while the change
	// was being made (it may be published before the call making it
	// returns).
	recording bool
	recorded  []stampedState
	want      *ScaleChange
	seen      time.Time
	wake      chan struct{}
}

type stampedState struct {
	st ScaleState
	at time.Time
}

func (s *scaleSink) Observe(st ScaleState) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = st
	s.publishes++
	if s.recording {
		s.recorded = append(s.recorded, stampedState{st, now})
	}
	if s.synced.IsZero() {
		if n, e := st.Size(); n >= s.services && e >= s.endpoints {
			s.synced = now
		}
	}
	if s.want != nil && s.seen.IsZero() && st.Holds(*s.want) {
		s.seen = now
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// await waits until cond (called under mu) holds, or timeout.
func (s *scaleSink) await(timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		ok := cond()
		s.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-s.wake:
		case <-deadline.C:
			return false
		}
	}
}

// begin starts recording the states published while a change is made.
func (s *scaleSink) begin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.want, s.seen, s.recording, s.recorded = nil, time.Time{}, true, s.recorded[:0]
}

// expect arms the sink for c: the first state recorded since begin that
// holds c, or else the first published from now on, is when c was seen.
func (s *scaleSink) expect(c *ScaleChange) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.want, s.recording = c, false
	for _, r := range s.recorded {
		if r.st.Holds(*c) {
			s.seen = r.at
			break
		}
	}
	clear(s.recorded)
}

// ProcessCPU returns this process's user+system CPU time (getrusage, µs
// resolution unlike /proc's 10 ms ticks).
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// RunKindScale runs row at services: Setup, the first sync, o.Changes
// changes each awaited before the next, and the memory held. A failure of
// the harness or the server fails t; a change not seen is counted as
// lost.
func RunKindScale(t testing.TB, row KindScaleRow, services int, o KindScaleOptions) KindScaleResult {
	res := KindScaleResult{Kind: row.Kind, Services: services, Goal: int64(row.Goal), Note: row.Note}
	t0 := time.Now()
	tg := row.Setup(t, services)
	res.Load = ms(time.Since(t0))
	if tg.Load > 0 {
		res.Load = ms(tg.Load)
	}
	res.Services, res.Endpoints = tg.Services, tg.Endpoints
	if tg.Note != "" {
		res.Note = strings.TrimPrefix(res.Note+"; "+tg.Note, "; ")
	}
	mem0 := ReadMem()
	rss0, _, _ := Mem(os.Getpid())
	split0 := ReadMemSplit()

	sink := &scaleSink{services: tg.Services, endpoints: tg.Endpoints, wake: make(chan struct{}, 1)}
	stopProf := profile(t, o.ProfileDir, fmt.Sprintf("%s-%d-sync", row.Kind, services))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cpu0, start := ProcessCPU(), time.Now()
	go func() { done <- tg.Run(ctx, sink) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { _ = stop() })
	if !sink.await(o.SyncTimeout, func() bool { return !sink.synced.IsZero() }) {
		stopProf()
		sink.mu.Lock()
		n, e := 0, 0
		if sink.last != nil {
			n, e = sink.last.Size()
		}
		sink.mu.Unlock()
		t.Fatalf("%s %d: no state holding %d services and %d endpoints within %s (last: %d, %d)",
			row.Kind, services, tg.Services, tg.Endpoints, o.SyncTimeout, n, e)
	}
	res.Sync, res.SyncCPU = ms(sink.synced.Sub(start)), ms(ProcessCPU()-cpu0)
	stopProf()

	stopProf = profile(t, o.ProfileDir, fmt.Sprintf("%s-%d-changes", row.Kind, services))
	sink.mu.Lock()
	pub0 := sink.publishes
	sink.mu.Unlock()
	var lat []float64
	var writer time.Duration
	var made []ScaleChange // the changes seen, with seenAt
	var seenAt []time.Time
	cpu0 = ProcessCPU()
	for i := 1; i <= o.Changes; i++ {
		sink.begin()
		before := time.Now()
		c, err := tg.Change(ctx, i)
		if err != nil {
			stopProf()
			t.Fatalf("%s %d: change %d: %v", row.Kind, services, i, err)
		}
		if c.Stamp.IsZero() {
			c.Stamp = before
		}
		writer += c.WriterCPU
		sink.expect(&c)
		if sink.await(o.ChangeTimeout, func() bool { return !sink.seen.IsZero() }) {
			sink.mu.Lock()
			lat = append(lat, ms(sink.seen.Sub(c.Stamp)))
			made, seenAt = append(made, c), append(seenAt, sink.seen)
			sink.mu.Unlock()
		} else {
			res.Lost++
		}
		time.Sleep(o.Gap)
	}
	if o.Changes > 0 {
		res.CPUPerChange = ms(ProcessCPU()-cpu0) / float64(o.Changes)
		res.WriterCPUPerChange = ms(writer) / float64(o.Changes)
	}
	stopProf()
	if tg.After != nil {
		if n := tg.After(); n != "" {
			res.Note = strings.TrimPrefix(res.Note+"; "+n, "; ")
		}
	}
	sink.mu.Lock()
	res.Publishes = sink.publishes - pub0
	sink.want = nil
	sink.mu.Unlock()
	res.Change = Summarize(lat)
	if tg.Observed != nil {
		observe(&res, row, tg.Observed, made, seenAt)
	}

	mem1 := ReadMem()
	rss1, _, _ := Mem(os.Getpid())
	res.Heap, res.RSS = int64(mem1.HeapLive)-int64(mem0.HeapLive), rss1-rss0
	res.Mem = ReadMemSplit().Sub(split0)
	res.Goroutines = int64(mem1.Goroutines) - int64(mem0.Goroutines)
	if o.ProfileDir != "" {
		HeapProfile(t, filepath.Join(o.ProfileDir, fmt.Sprintf("%s-%d-heap.pprof", row.Kind, services)))
	}
	if err := stop(); err != nil && ctx.Err() == nil {
		t.Errorf("%s %d: Run: %v", row.Kind, services, err)
	}
	if res.Lost > 0 {
		res.Note += fmt.Sprintf(" (%d changes not seen within %s)", res.Lost, o.ChangeTimeout)
	}
	return res
}

// observe fills res's server delay and own part from an observer's
// sightings of the changes made (seen at the sink at seenAt), and its
// goal from them.
func observe(res *KindScaleResult, row KindScaleRow, observed func(ScaleChange) (time.Time, bool), made []ScaleChange, seenAt []time.Time) {
	var server, own []float64
	for i, c := range made {
		at, ok := observed(c)
		if !ok {
			res.Unobserved++
			continue
		}
		server = append(server, ms(at.Sub(c.Stamp)))
		own = append(own, ms(seenAt[i].Sub(at)))
	}
	res.Server, res.Own = Summarize(server), Summarize(own)
	if row.OwnGoal > 0 && len(server) > 0 {
		res.OwnGoal = int64(row.OwnGoal)
		res.Goal = int64(time.Duration(res.Server.P99*float64(time.Millisecond)) + row.OwnGoal)
	}
}

// profile writes a CPU profile of this process to dir/name.pprof until
// the returned function is called; nothing when dir is "".
func profile(t testing.TB, dir, name string) func() {
	if dir == "" {
		return func() {}
	}
	return CPUProfile(t, filepath.Join(dir, name+".pprof"))
}

// CPUProfile writes this process's CPU profile to path until the returned
// function is called; a failure is logged and profiles nothing.
func CPUProfile(t testing.TB, path string) func() {
	f, err := os.Create(path)
	if err != nil {
		t.Logf("pprof: %v", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		t.Logf("pprof: %v", err)
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// HeapProfile writes the heap profile to path (a failure is logged).
func HeapProfile(t testing.TB, path string) {
	f, err := os.Create(path)
	if err != nil {
		t.Logf("pprof: %v", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Logf("pprof: %v", err)
	}
}
