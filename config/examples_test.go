package config

import (
	"path/filepath"
	"testing"
)

// TestExamplesSetStateDir: the README says every shipped config sets
// state.dir (warm start); each examples/*/clusters.yaml loads and does,
// as .meshfed/state beside it like the default clusters.yaml.
func TestExamplesSetStateDir(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../examples/*/clusters.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 6 {
		t.Fatalf("found %d examples/*/clusters.yaml (%v), want at least 6", len(files), files)
	}
	for _, f := range append(files, "../clusters.yaml") {
		cfg, err := Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		abs, err := filepath.Abs(filepath.Join(filepath.Dir(f), ".meshfed", "state"))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.State.Dir != abs {
			t.Errorf("%s: state.dir = %q, want %q (state: {dir: .meshfed/state})", f, cfg.State.Dir, abs)
		}
	}
}
