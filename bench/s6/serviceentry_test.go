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
	"github.com/meshfed/meshfed/registries/filewatch"
	"github.com/meshfed/meshfed/registries/serviceentry"
)

// The serviceentry row: a ServiceEntry selects WorkloadEntries by label;
// each write rewrites the WorkloadEntries file atomically with one more
// WorkloadEntry.
func init() {
	rows = append(rows, bench.S6Row{Name: "serviceentry", Smoke: true,
		Note: "the serviceentry registry coalesces file events for 50 ms before it reads, as file does", Setup: serviceEntrySetup})
}

func serviceEntrySetup(t testing.TB) bench.S6Target {
	dir := t.TempDir()
	se := "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: s6, namespace: bench}\n" +
		"spec:\n  hosts: [s6.mesh.example]\n  ports: [{number: 8080, name: http, protocol: HTTP}]\n  resolution: STATIC\n  workloadSelector: {labels: {app: s6}}\n"
	if err := os.WriteFile(filepath.Join(dir, "se.yaml"), []byte(se), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "workloads.yaml")
	write := func(n int) error {
		var b strings.Builder
		for i := 0; i <= n; i++ {
			fmt.Fprintf(&b, "---\napiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: w%d, namespace: bench}\nspec: {address: 10.78.%d.%d, labels: {app: s6}}\n",
				i, i/250, i%250+1)
		}
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	}
	if err := write(0); err != nil {
		t.Fatal(err)
	}
	c := registries.Common{Name: "istio", Kind: "serviceentry", Domain: "mesh.example"}
	reg := newRegistry(t, &serviceentry.Config{Options: filewatch.Options{Path: dir}}, c)
	return bench.S6Target{Registry: reg, Common: c, Host: "s6.mesh.example",
		Write: func(_ context.Context, n int) (bench.S6Change, error) {
			return bench.S6Change{Host: "s6.mesh.example", Address: fmt.Sprintf("10.78.%d.%d", n/250, n%250+1)}, write(n)
		}}
}
