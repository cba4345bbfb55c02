package s6

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/file"
	"github.com/meshfed/meshfed/registries/filewatch"
)

// The file registry row: each write rewrites the services file atomically
// (temp file + rename, as config management does) with one more endpoint.
func init() {
	rows = append(rows, bench.S6Row{Name: "file", Smoke: true,
		Note: "the file registry coalesces file events for 50 ms before it reads", Setup: fileSetup})
}

func fileSetup(t testing.TB) bench.S6Target {
	dir := t.TempDir()
	path := filepath.Join(dir, "services.yaml")
	write := func(n int) error {
		var b strings.Builder
		b.WriteString("services:\n  - name: s6\n    ports: [{name: http, port: 8080, protocol: HTTP}]\n    endpoints:\n")
		for i := 0; i <= n; i++ {
			fmt.Fprintf(&b, "      - address: 10.77.%d.%d\n", i/250, i%250+1)
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	}
	if err := write(0); err != nil {
		t.Fatal(err)
	}
	c := registries.Common{Name: "vms", Kind: "file", Domain: "vm.internal"}
	reg, err := (&file.Config{Options: filewatch.Options{Path: path}}).New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	return bench.S6Target{Registry: reg, Common: c, Host: "s6.vm.internal",
		Write: func(_ context.Context, n int) (bench.S6Change, error) {
			return bench.S6Change{Host: "s6.vm.internal", Address: fmt.Sprintf("10.77.%d.%d", n/250, n%250+1)}, write(n)
		}}
}
