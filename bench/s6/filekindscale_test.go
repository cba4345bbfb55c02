package s6

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/file"
	"github.com/meshfed/meshfed/registries/filewatch"
	"github.com/meshfed/meshfed/registries/serviceentry"
)

// KS rows of the registries that read files (issue #22): file and
// serviceentry at 1,000 and 10,000 services × 10 endpoints spread over
// files of 100 services (one team, one file), and the file registry with
// every service in one file. Each change rewrites one file with one
// endpoint's address replaced, in a different service each time, the way
// editors and config tools write: a temporary file renamed over it, timed
// from the rename (the moment the new content exists for any reader). The
// file-inplace row writes the file in place instead (truncate and write,
// as `cat >` and `cp` do), timed from the end of the write: such a file is
// read only once it stopped changing for the settle time (1 s), so its
// goal is that settle time and 50 ms. The file rows come in the block
// style of the file registry's fast path and in the compact flow style of
// issue #22's 1 MB file (`- {address: 10.0.0.1, ports: {http: 20000},
// labels: {…}}`, which the fast path does not read: only the edited
// service is parsed again either way, registries/file/items.go).
func init() {
	const note = "10 endpoints per service; files written before the start"
	kindScaleRows = append(kindScaleRows,
		bench.KindScaleRow{Kind: "file", Goal: 50 * time.Millisecond, Smoke: true,
			Note:  note + ", 100 services per file, block style",
			Setup: func(t testing.TB, n int) bench.KindScaleTarget { return fileKindScale(t, n, 100, false, false) }},
		bench.KindScaleRow{Kind: "file-inplace", Goal: filewatch.DefaultSettle + 50*time.Millisecond, Smoke: true,
			Note:  note + ", 100 services per file, block style, written in place (read after the 1 s settle time)",
			Setup: func(t testing.TB, n int) bench.KindScaleTarget { return fileKindScale(t, n, 100, false, true) }},
		bench.KindScaleRow{Kind: "file-flow", Goal: 50 * time.Millisecond, Smoke: true,
			Note:  note + ", 100 services per file, compact flow style",
			Setup: func(t testing.TB, n int) bench.KindScaleTarget { return fileKindScale(t, n, 100, true, false) }},
		bench.KindScaleRow{Kind: "file-flow-onefile", Goal: 50 * time.Millisecond, Smoke: true,
			Note:  note + ", every service in one file, compact flow style",
			Setup: func(t testing.TB, n int) bench.KindScaleTarget { return fileKindScale(t, n, n, true, false) }},
		bench.KindScaleRow{Kind: "file-anchors", Goal: 50 * time.Millisecond, Smoke: true,
			Note:  note + ", 100 services per file, quoted scalars, the first service of each file defining the ports and labels the others take (`ports: *http`, `labels: *v1`)",
			Setup: fileAnchorsKindScale},
		bench.KindScaleRow{Kind: "serviceentry", Goal: 50 * time.Millisecond, Smoke: true,
			Note:  note + ", 100 ServiceEntries (STATIC, inline endpoints) per multi-document file",
			Setup: serviceEntryKindScale},
	)
}

const ksEndpoints = 10

// ksAddr is endpoint j of service i, or the address of change n when
// changed[i] = n.
func ksAddr(i, j int, changed map[int]int) string {
	if n, ok := changed[i]; ok && j == 0 {
		return fmt.Sprintf("10.%d.%d.%d", 200+n>>16&31, n>>8&255, n&255)
	}
	return fmt.Sprintf("10.%d.%d.%d", i>>8&63, i&255, j+1)
}

// ksFixture is the files of a KS row: head, then the text of each of
// their services (per services a file). A change splices the service it
// edits into its file's text and writes the file, as an editor holding
// the file writes it after an edit of one service: the harness's own CPU
// for an edit is that splice and the write (measured apart, WriterCPU).
type ksFixture struct {
	dir     string
	per     int
	head    string
	service func(i int) []byte
	inPlace bool
	files   [][]byte // each file's text
	offs    []int    // each service's offset in its file's text
	lens    []int    // each service's length
}

func (fx *ksFixture) name(f int) string {
	return filepath.Join(fx.dir, fmt.Sprintf("team-%04d.yaml", f))
}

// write writes file f and returns when its new content became visible:
// the rename of the temporary file, or the end of the write in place.
func (fx *ksFixture) write(f int) (time.Time, error) {
	if fx.inPlace {
		err := os.WriteFile(fx.name(f), fx.files[f], 0o644)
		return time.Now(), err
	}
	tmp := fx.name(f) + ".tmp"
	if err := os.WriteFile(tmp, fx.files[f], 0o644); err != nil {
		return time.Time{}, err
	}
	at := time.Now()
	return at, os.Rename(tmp, fx.name(f))
}

// ksFiles writes the fixture's files into dir (per services each) and
// returns how to rewrite the file of service i with its text rendered
// again, and the CPU that rewrite took on its thread (the writer's).
func ksFiles(t testing.TB, fx *ksFixture, services int) func(i int) (time.Time, time.Duration, error) {
	fx.offs, fx.lens = make([]int, services), make([]int, services)
	for f := 0; f*fx.per < services; f++ {
		b := []byte(fx.head)
		for i := f * fx.per; i < min((f+1)*fx.per, services); i++ {
			s := fx.service(i)
			fx.offs[i], fx.lens[i] = len(b), len(s)
			b = append(b, s...)
		}
		fx.files = append(fx.files, b)
		if _, err := fx.write(f); err != nil {
			t.Fatal(err)
		}
	}
	return func(i int) (time.Time, time.Duration, error) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cpu0 := threadCPU()
		f, s := i/fx.per, fx.service(i)
		fx.files[f] = slices.Replace(fx.files[f], fx.offs[i], fx.offs[i]+fx.lens[i], s...)
		for k := i + 1; k < min((f+1)*fx.per, services); k++ {
			fx.offs[k] += len(s) - fx.lens[i]
		}
		fx.lens[i] = len(s)
		at, err := fx.write(f)
		return at, threadCPU() - cpu0, err
	}
}

// threadCPU is the calling thread's user+system CPU time (getrusage
// RUSAGE_THREAD; call with the goroutine locked to its thread).
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func fileKindScale(t testing.TB, services, per int, flow, inPlace bool) bench.KindScaleTarget {
	changed := map[int]int{}
	service := func(i int) []byte {
		var b bytes.Buffer
		if flow {
			fmt.Fprintf(&b, "  - name: svc-%d\n    ports: [{name: http, port: 8080, protocol: HTTP}]\n    endpoints:\n", i)
			for j := range ksEndpoints {
				fmt.Fprintf(&b, "      - {address: %s, ports: {http: %d}, labels: {version: v1}}\n", ksAddr(i, j, changed), 20000+j)
			}
			return b.Bytes()
		}
		fmt.Fprintf(&b, "  - name: svc-%d\n    ports:\n      - {name: http, port: 8080, protocol: HTTP}\n    endpoints:\n", i)
		for j := range ksEndpoints {
			fmt.Fprintf(&b, "      - address: %s\n        locality: us-east/us-east-1a\n        labels: {version: v1}\n", ksAddr(i, j, changed))
		}
		return b.Bytes()
	}
	fx := &ksFixture{dir: t.TempDir(), per: per, head: "services:\n", service: service, inPlace: inPlace}
	c := registries.Common{Name: "vms", Kind: "file", Domain: "vm.internal"}
	return ksTarget(t, fx, services, changed, c, &file.Config{Options: filewatch.Options{Path: fx.dir}})
}

// fileAnchorsKindScale is the file registry over files of per services
// written with quotes and anchors: the first service of each file
// defines its ports (&http) and its endpoints' labels (&v1), the others
// take them. A change replaces endpoint 0's address, never what an
// anchor holds.
func fileAnchorsKindScale(t testing.TB, services int) bench.KindScaleTarget {
	const per = 100
	changed := map[int]int{}
	service := func(i int) []byte {
		var b bytes.Buffer
		ports, labels := "*http", "*v1"
		if i%per == 0 {
			ports, labels = "&http\n      - {name: http, port: 8080, protocol: \"HTTP\"}", `&v1 {version: "v1", team: 'payments'}`
		}
		fmt.Fprintf(&b, "  - name: \"svc-%d\"\n    ports: %s\n    endpoints:\n", i, ports)
		for j := range ksEndpoints {
			fmt.Fprintf(&b, "      - address: \"%s\"\n        locality: 'us-east/us-east-1a'\n        labels: %s\n", ksAddr(i, j, changed), labels)
			labels = "*v1"
		}
		return b.Bytes()
	}
	fx := &ksFixture{dir: t.TempDir(), per: per, head: "services:\n", service: service}
	c := registries.Common{Name: "vms", Kind: "file", Domain: "vm.internal"}
	return ksTarget(t, fx, services, changed, c, &file.Config{Options: filewatch.Options{Path: fx.dir}})
}

func serviceEntryKindScale(t testing.TB, services int) bench.KindScaleTarget {
	changed := map[int]int{}
	service := func(i int) []byte {
		var b bytes.Buffer
		fmt.Fprintf(&b, "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: svc-%d\n  namespace: default\nspec:\n  hosts: [svc-%d.mesh.example]\n  location: MESH_INTERNAL\n  resolution: STATIC\n  ports:\n  - {name: http, number: 8080, protocol: HTTP}\n  endpoints:\n", i, i)
		for j := range ksEndpoints {
			fmt.Fprintf(&b, "  - address: %s\n    locality: us-east/us-east-1a\n    labels: {version: v1}\n", ksAddr(i, j, changed))
		}
		return b.Bytes()
	}
	fx := &ksFixture{dir: t.TempDir(), per: 100, service: service}
	c := registries.Common{Name: "istio", Kind: "serviceentry", Domain: "mesh.example"}
	return ksTarget(t, fx, services, changed, c, &serviceentry.Config{Options: filewatch.Options{Path: fx.dir}})
}

// ksTarget writes the fixture's files, builds the registry cfg over them
// and returns the target whose change n replaces endpoint 0 of a service
// with a new address (recorded in changed, which the fixture's service
// reads) and rewrites its file, timed from when the new file became
// visible.
func ksTarget(t testing.TB, fx *ksFixture, services int, changed map[int]int, c registries.Common, cfg registries.Config) bench.KindScaleTarget {
	t0 := time.Now()
	rewrite := ksFiles(t, fx, services)
	load := time.Since(t0)
	reg := newRegistry(t, cfg, c)
	return bench.KindScaleTarget{Load: load, Services: services, Endpoints: services * ksEndpoints, Run: bench.RegistryRun(reg),
		Note: fmt.Sprintf("%d files, %.1f MB in all", (services+fx.per-1)/fx.per, float64(fileSize(t, fx.dir))/1e6),
		Change: func(_ context.Context, n int) (bench.ScaleChange, error) {
			i := (n * 7919) % services
			changed[i] = n
			at, cpu, err := rewrite(i)
			return bench.ScaleChange{Host: fmt.Sprintf("svc-%d.%s", i, c.Domain), Value: ksAddr(i, 0, changed), Stamp: at, WriterCPU: cpu}, err
		}}
}

// fileSize is the size of the files in dir.
func fileSize(t testing.TB, dir string) int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			n += fi.Size()
		}
	}
	return n
}
