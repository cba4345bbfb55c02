package s6

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/file"
	"github.com/meshfed/meshfed/registries/filewatch"
)

// The file registry at the size of issue #16: 1,000 services × 10
// endpoints (~1 MB of services files). Each write replaces the first
// endpoint of svc-0 with a new address (temp file + rename). In
// "file-1000x10" every service is in one file, which each write rewrites
// and meshfed parses whole; in "file-1000x10-dir" they are spread over a
// directory of 100 files (one team, one file) and only the edited file is
// rewritten and read.
func init() {
	rows = append(rows,
		bench.S6Row{Name: "file-1000x10", Note: "1,000 services × 10 endpoints in one file",
			Setup: func(t testing.TB) bench.S6Target { return fileScaleSetup(t, 1) }},
		bench.S6Row{Name: "file-1000x10-dir", Smoke: true, Note: "1,000 services × 10 endpoints in 100 files",
			Setup: func(t testing.TB) bench.S6Target { return fileScaleSetup(t, 100) }},
	)
}

func fileScaleSetup(t testing.TB, files int) bench.S6Target {
	const services, endpoints = 1000, 10
	dir := t.TempDir()
	per := services / files
	gen := func(f int, first string) []byte {
		var b bytes.Buffer
		b.WriteString("services:\n")
		for s := f * per; s < (f+1)*per; s++ {
			fmt.Fprintf(&b, "  - name: svc-%d\n    ports:\n      - {name: http, port: 8080, protocol: HTTP}\n    endpoints:\n", s)
			for e := range endpoints {
				addr := fmt.Sprintf("10.%d.%d.%d", s/250, s%250, e+1)
				if s == 0 && e == 0 && first != "" {
					addr = first
				}
				fmt.Fprintf(&b, "      - address: %s\n        locality: us-east/us-east-1a\n        labels: {version: v1}\n", addr)
			}
		}
		return b.Bytes()
	}
	name := func(f int) string { return filepath.Join(dir, fmt.Sprintf("team-%03d.yaml", f)) }
	write := func(path string, data []byte) error {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	}
	for f := range files {
		if err := write(name(f), gen(f, "")); err != nil {
			t.Fatal(err)
		}
	}
	c := registries.Common{Name: "vms", Kind: "file", Domain: "vm.internal"}
	reg, err := (&file.Config{Options: filewatch.Options{Path: dir}}).New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	return bench.S6Target{Registry: reg, Common: c, Host: "svc-0.vm.internal",
		Write: func(_ context.Context, n int) (bench.S6Change, error) {
			addr := fmt.Sprintf("10.200.%d.%d", n/250, n%250+1)
			return bench.S6Change{Host: "svc-0.vm.internal", Address: addr}, write(name(0), gen(0, addr))
		}}
}
