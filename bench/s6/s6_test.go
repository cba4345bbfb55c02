// Package s6 holds the rows of benchmark S6 (a registry write → the last
// ADS client's ACK of it, through meshfed's aggregate and xds), one per
// registry kind, each a bench.S6Row registered from its own <kind>_test.go
// file. The debounce is clusters.yaml's default unless -s6.quiet and
// -s6.max say otherwise. `make bench` runs them through benchreport
// (go test -run '^TestS6$' ./bench/s6 -args -s6.out=FILE); a plain
// `go test ./bench/...` runs only the smoke rows with a few writes.
package s6

import (
	"encoding/json"
	"flag"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/config"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/test/servers"
)

// The Nacos SDK that the nacos row registers with leaves a goroutine
// behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, servers.IgnoreNacosSDK()) }

var (
	out     = flag.String("s6.out", "", "write the S6 results (JSON) here and run every row in full")
	n       = flag.Int("s6.n", 200, "writes per row (with -s6.out)")
	clients = flag.Int("s6.clients", 10, "ADS clients subscribed to the row's host")
	only    = flag.String("s6.only", "", "run only this row")
	quiet   = flag.Duration("s6.quiet", config.DefaultDebounceQuiet.Std(), "debounce quiet")
	maxWait = flag.Duration("s6.max", config.DefaultDebounceMax.Std(), "debounce max")
)

// rows are registered by the <kind>_test.go files.
var rows []bench.S6Row

func TestS6(t *testing.T) {
	full := *out != ""
	var results []bench.S6Result
	for _, row := range rows {
		if (!full && !row.Smoke) || (*only != "" && row.Name != *only) {
			continue
		}
		writes := *n
		if !full {
			writes = 5
		}
		var res bench.S6Result
		ran := t.Run(row.Name, func(t *testing.T) {
			res = bench.RunS6(t, row, bench.S6Options{
				Writes: writes, Gap: 50 * time.Millisecond, Clients: *clients,
				Quiet: *quiet, MaxWait: *maxWait,
			})
			if res.Latency.N+res.Lost != writes {
				t.Errorf("%s: %d latencies + %d lost, want %d writes", row.Name, res.Latency.N, res.Lost, writes)
			}
			if res.Lost > 0 {
				t.Errorf("%s: %d writes never reached the sink", row.Name, res.Lost)
			}
			t.Logf("%s: write → last client ACK %+v; write → Replace %+v", row.Name, res.Latency, res.Ingest)
		})
		if !ran && res.Name == "" {
			res = bench.S6Result{Name: row.Name, Goal: int64(row.Goal), Skipped: "failed or skipped (backend not installed?)"}
		}
		results = append(results, res)
	}
	if full {
		b, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*out, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// newRegistry defaults, validates and builds a registry block as the
// clusters.yaml loader does.
func newRegistry(t testing.TB, cfg registries.Config, c registries.Common) registries.Registry {
	t.Helper()
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	reg, err := cfg.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}
