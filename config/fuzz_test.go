package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/meshfed/meshfed/registries"
)

// FuzzParse feeds arbitrary bytes to the clusters.yaml loader. Invariants:
// no panic; a rejected file gets a *LoadError whose every problem has a
// line and column (only an empty file has none); an accepted config
// re-validates (each type's Validate passes again) and parses the same
// way twice. Seeds: testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("/cfg/clusters.yaml", data)
		if err != nil {
			if cfg != nil {
				t.Fatal("a config along with an error")
			}
			var le *LoadError
			if !errors.As(err, &le) || len(le.Problems) == 0 {
				t.Fatalf("error %T %v, want a *LoadError with problems", err, err)
			}
			for _, p := range le.Problems {
				if (p.Line < 1 || p.Column < 1) && !strings.HasPrefix(p.Msg, "the file is empty") {
					t.Fatalf("problem without a position: %s", p)
				}
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted config does not re-validate: %v", err)
		}
		for i := range cfg.Registries {
			r := &cfg.Registries[i]
			if err := r.Validate(); err != nil {
				t.Fatalf("registries[%d] does not re-validate: %v", i, err)
			}
			if err := r.Outage.Validate(); err != nil {
				t.Fatalf("registries[%d].outage does not re-validate: %v", i, err)
			}
			if r.Block == nil {
				t.Fatalf("registries[%d] accepted without a block", i)
			}
			if err := r.Block.Validate(); err != nil {
				t.Fatalf("registries[%d] block does not re-validate: %v", i, err)
			}
			var _ registries.Config = r.Block
		}
		again, err := Parse("/cfg/clusters.yaml", data)
		if err != nil {
			t.Fatalf("second parse failed: %v", err)
		}
		if d := cmp.Diff(cfg, again, cmpopts.IgnoreUnexported(Config{})); d != "" {
			t.Fatalf("two parses differ:\n%s", d)
		}
	})
}
