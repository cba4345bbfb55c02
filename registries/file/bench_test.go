package file

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/filewatch"
)

// genServices returns a services file of n services with m endpoints each,
// in the shape a generator writes (about 100 bytes per endpoint).
func genServices(n, m int) []byte { return genServicesFrom(0, n, m) }

// genServicesFrom is genServices for services first..first+n-1.
func genServicesFrom(first, n, m int) []byte {
	var b bytes.Buffer
	b.Grow(n * (80 + m*95))
	b.WriteString("services:\n")
	for i := first; i < first+n; i++ {
		fmt.Fprintf(&b, "  - name: svc-%d\n    ports:\n      - {name: http, port: 8080, protocol: HTTP}\n    endpoints:\n", i)
		for j := range m {
			fmt.Fprintf(&b, "      - address: 10.%d.%d.%d\n        locality: us-east/us-east-1a\n        labels: {version: v1}\n", i/250, i%250, j)
		}
	}
	return b.Bytes()
}

// genFlowServicesFrom is genServicesFrom in the compact style of
// issue #22: every endpoint one line of nested flow mappings, which the
// fast path does not read (a file in it is parsed through the node tree).
func genFlowServicesFrom(first, n, m int) []byte {
	var b bytes.Buffer
	b.Grow(n * (80 + m*70))
	b.WriteString("services:\n")
	for i := first; i < first+n; i++ {
		fmt.Fprintf(&b, "  - name: svc-%d\n    ports: [{name: http, port: 8080, protocol: HTTP}]\n    endpoints:\n", i)
		for j := range m {
			fmt.Fprintf(&b, "      - {address: 10.%d.%d.%d, ports: {http: %d}, labels: {version: v1}}\n", i/250, i%250, j, 20000+j)
		}
	}
	return b.Bytes()
}

// BenchmarkParse10k parses a 10,000-endpoint services file (1,000 services
// × 10 endpoints). Run with GOMAXPROCS=1 for the one-core figure.
func BenchmarkParse10k(b *testing.B) {
	data := genServices(1000, 10)
	c := registries.Common{Name: "bench", Kind: "file", Domain: "vm.internal"}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("services.yaml", data, c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParse100kRSS parses a 100,000-endpoint services file (10,000
// services × 10 endpoints, ~10 MB) and reports the peak RSS of the
// process while parsing (VmHWM, reset after the file was generated; the
// input's 10 MB included) and the live heap after, in MB. Run it alone:
// go test -run XXX -bench Parse100kRSS -benchtime 1x.
func BenchmarkParse100kRSS(b *testing.B) {
	data := genServices(10000, 10)
	c := registries.Common{Name: "bench", Kind: "file", Domain: "vm.internal"}
	b.SetBytes(int64(len(data)))
	debug.FreeOSMemory()
	// "5" resets the peak RSS (VmHWM) to the current RSS.
	resetErr := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	var services []model.Service
	for b.Loop() {
		var err error
		if services, err = Parse("services.yaml", data, c); err != nil {
			b.Fatal(err)
		}
	}
	if len(services) != 10000 {
		b.Fatalf("%d services, want 10000", len(services))
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil || resetErr != nil {
		b.Skip("no /proc/self/status or clear_refs")
	}
	for line := range strings.Lines(string(status)) {
		if kb, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")))
			b.ReportMetric(float64(n)/1024, "peak-RSS-MB")
		}
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "live-heap-MB")
	runtime.KeepAlive(services)
}

// processCPU is this process's user+system CPU time (getrusage).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// discardSink is a registries.Sink that only counts the states published.
// It takes deltas (registries.DeltaSink), as the aggregator does, so that
// the Publisher hands it the services that changed, not the whole state.
type discardSink struct{ replaces int }

func (s *discardSink) TakesDelta() bool { return true }

func (s *discardSink) Publish(_ model.ShardKey, u registries.Update) {
	if u.HasState {
		s.replaces++
	}
}

// BenchmarkEdit is the CPU cost of one edit of one endpoint in a registry
// of 1,000 (or 10,000) services × 10 endpoints: the file is rewritten with one
// endpoint's address changed, then read and published as the watch loop
// does after the event (the write itself is excluded from the timer). The
// services are in one file or spread over 100 files of 10 services, one
// team one file (only the edited file is read), in the block style of the
// fast path or the compact flow style (style=flow); either way only the
// edited service is parsed again (items.go). Each edit changes a
// different service of the file, as KS does, to an address of another
// length now and then, so that the file grows and shrinks by a few bytes.
// services=10000 with one file is the 8.4 MB file of KS row
// file-flow-onefile: an edit's cost there, and its bytes allocated,
// should be those at 1,000.
func BenchmarkEdit(b *testing.B) {
	for _, tc := range []struct {
		services, files int
		flow            bool
	}{{1000, 1, false}, {1000, 100, false}, {1000, 1, true}, {1000, 100, true}, {10000, 1, true}} {
		files, services := tc.files, tc.services
		gen, style, sep := genServicesFrom, "block", "\n"
		if tc.flow {
			gen, style, sep = genFlowServicesFrom, "flow", ","
		}
		b.Run(fmt.Sprintf("services=%d/style=%s/files=%d", services, style, files), func(b *testing.B) {
			dir := b.TempDir()
			per := services / files
			contents := make([][]byte, files)
			for f := range files {
				contents[f] = gen(f*per, per, 10)
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("team-%03d.yaml", f)), contents[f], 0o644); err != nil {
					b.Fatal(err)
				}
			}
			reg, err := (&Config{Options: filewatch.Options{Path: dir}}).New(registries.Common{Name: "bench", Kind: "file", Domain: "vm.internal"}, nil)
			if err != nil {
				b.Fatal(err)
			}
			sink := &discardSink{}
			s, err := reg.(*Registry).watch().NewLoop(sink)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			s.Reload(true)
			edited := filepath.Join(dir, "team-000.yaml")
			// The address of endpoint 0 of each service of the edited file.
			addrs := make([]string, per)
			for k := range addrs {
				addrs[k] = fmt.Sprintf("10.%d.%d.0", k/250, k%250)
			}
			var cpu time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				k := i * 7919 % per
				to := fmt.Sprintf("10.%d.%d.%d", 200+i%50, i/50%250, i%7*17)
				contents[0] = bytes.Replace(contents[0], []byte("address: "+addrs[k]+sep), []byte("address: "+to+sep), 1)
				addrs[k] = to
				tmp := filepath.Join(dir, ".tmp")
				if err := os.WriteFile(tmp, contents[0], 0o644); err != nil {
					b.Fatal(err)
				}
				if err := os.Rename(tmp, edited); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				cpu0 := processCPU()
				s.Reload(false)
				cpu += processCPU() - cpu0
			}
			b.StopTimer()
			// The process's CPU (getrusage) in the reads: a figure that a
			// busy machine does not inflate as it does the wall time.
			b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/op")
			if sink.replaces != b.N+1 {
				b.Fatalf("%d Replaces for %d edits, want one each", sink.replaces, b.N)
			}
		})
	}
}
