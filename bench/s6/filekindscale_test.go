package s6

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
// every service in one file. Each change rewrites one file (temp file +
// rename) with one endpoint's address replaced, in a different service
// each time. The file rows come in the block style of the file
// registry's fast path and in the compact flow style of issue #22's
// 1 MB file (`- {address: 10.0.0.1, ports: {http: 20000}, labels: {…}}`,
// which the fast path does not read: only the edited service is parsed
// again either way, registries/file/items.go).
func init() {
	const note = "10 endpoints per service; files written before the start"
	kindScaleRows = append(kindScaleRows,
		bench.KindScaleRow{Kind: "file", Goal: 50 * time.Millisecond, Smoke: true,
			Note:  note + ", 100 services per file, block style",
			Setup: func(t testing.TB, n int) bench.KindScaleTarget { return fileKindScale(t, n, 100, false) }},
		bench.KindScaleRow{Kind: "file-flow", Goal: 50 * time.Millisecond, Smoke: true,
			Note:  note + ", 100 services per file, compact flow style",
			Setup: func(t testing.TB, n int) bench.KindScaleTarget { return fileKindScale(t, n, 100, true) }},
		bench.KindScaleRow{Kind: "file-flow-onefile", Goal: 50 * time.Millisecond, Smoke: true,
			Note:  note + ", every service in one file, compact flow style",
			Setup: func(t testing.TB, n int) bench.KindScaleTarget { return fileKindScale(t, n, n, true) }},
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

// ksFiles writes the fixture's files with render(first, last) and
// returns how to rewrite the file of service i.
func ksFiles(t testing.TB, dir string, services, per int, render func(first, last int) []byte) func(i int) error {
	name := func(f int) string { return filepath.Join(dir, fmt.Sprintf("team-%04d.yaml", f)) }
	write := func(f int) error {
		return bench.WriteFileAtomic(name(f), render(f*per, min((f+1)*per, services)))
	}
	for f := 0; f*per < services; f++ {
		if err := write(f); err != nil {
			t.Fatal(err)
		}
	}
	return func(i int) error { return write(i / per) }
}

func fileKindScale(t testing.TB, services, per int, flow bool) bench.KindScaleTarget {
	dir := t.TempDir()
	changed := map[int]int{}
	render := func(first, last int) []byte {
		var b strings.Builder
		b.WriteString("services:\n")
		for i := first; i < last; i++ {
			if flow {
				fmt.Fprintf(&b, "  - name: svc-%d\n    ports: [{name: http, port: 8080, protocol: HTTP}]\n    endpoints:\n", i)
				for j := range ksEndpoints {
					fmt.Fprintf(&b, "      - {address: %s, ports: {http: %d}, labels: {version: v1}}\n", ksAddr(i, j, changed), 20000+j)
				}
				continue
			}
			fmt.Fprintf(&b, "  - name: svc-%d\n    ports:\n      - {name: http, port: 8080, protocol: HTTP}\n    endpoints:\n", i)
			for j := range ksEndpoints {
				fmt.Fprintf(&b, "      - address: %s\n        locality: us-east/us-east-1a\n        labels: {version: v1}\n", ksAddr(i, j, changed))
			}
		}
		return []byte(b.String())
	}
	c := registries.Common{Name: "vms", Kind: "file", Domain: "vm.internal"}
	return ksTarget(t, dir, services, per, changed, render, c, &file.Config{Options: filewatch.Options{Path: dir}})
}

func serviceEntryKindScale(t testing.TB, services int) bench.KindScaleTarget {
	const per = 100
	dir := t.TempDir()
	changed := map[int]int{}
	render := func(first, last int) []byte {
		var b strings.Builder
		for i := first; i < last; i++ {
			fmt.Fprintf(&b, "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: svc-%d\n  namespace: default\nspec:\n  hosts: [svc-%d.mesh.example]\n  location: MESH_INTERNAL\n  resolution: STATIC\n  ports:\n  - {name: http, number: 8080, protocol: HTTP}\n  endpoints:\n", i, i)
			for j := range ksEndpoints {
				fmt.Fprintf(&b, "  - address: %s\n    locality: us-east/us-east-1a\n    labels: {version: v1}\n", ksAddr(i, j, changed))
			}
		}
		return []byte(b.String())
	}
	c := registries.Common{Name: "istio", Kind: "serviceentry", Domain: "mesh.example"}
	return ksTarget(t, dir, services, per, changed, render, c, &serviceentry.Config{Options: filewatch.Options{Path: dir}})
}

// ksTarget writes the fixture's files into dir (per services each, by
// render), builds the registry cfg over them and returns the target whose
// change n replaces endpoint 0 of a service with a new address (recorded
// in changed, which render reads) and rewrites its file.
func ksTarget(t testing.TB, dir string, services, per int, changed map[int]int, render func(first, last int) []byte, c registries.Common, cfg registries.Config) bench.KindScaleTarget {
	t0 := time.Now()
	rewrite := ksFiles(t, dir, services, per, render)
	load := time.Since(t0)
	reg := newRegistry(t, cfg, c)
	return bench.KindScaleTarget{Load: load, Services: services, Endpoints: services * ksEndpoints, Run: bench.RegistryRun(reg),
		Note: fmt.Sprintf("%d files, %.1f MB in all", (services+per-1)/per, float64(fileSize(t, dir))/1e6),
		Change: func(_ context.Context, n int) (bench.ScaleChange, error) {
			i := (n * 7919) % services
			changed[i] = n
			return bench.ScaleChange{Host: fmt.Sprintf("svc-%d.%s", i, c.Domain), Value: ksAddr(i, 0, changed)}, rewrite(i)
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
