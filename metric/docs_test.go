package metric

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// declRE finds the name of a metric declared in Go: through this
// package, prometheus.NewDesc or a GaugeFunc's options.
var declRE = regexp.MustCompile(`(?:metric\.[A-Za-z]+\(|prometheus\.NewDesc\(|Name:\s*)"(meshfed_[a-z0-9_]+)"`)

// TestMetricsDocumented (issue 24): every metric the code declares is
// named in the docs: docs/operations.md lists the shared ones, each
// registry kind's page (docs/registries/) its own.
func TestMetricsDocumented(t *testing.T) {
	t.Parallel()
	declared := map[string]string{} // name → file
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bench" || d.Name() == "test") && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range declRE.FindAllStringSubmatch(string(b), -1) {
			declared[m[1]] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(declared) < 10 {
		t.Fatalf("found only %d metric declarations: %v", len(declared), declared)
	}
	var docs strings.Builder
	for _, pattern := range []string{"../docs/*.md", "../docs/registries/*.md"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			docs.Write(b)
		}
	}
	named := regexp.MustCompile(`meshfed_[a-z0-9_]+`).FindAllString(docs.String(), -1)
	have := map[string]bool{}
	for _, n := range named {
		have[n] = true
	}
	var missing []string
	for name, file := range declared {
		if !have[name] {
			missing = append(missing, name+" ("+file+")")
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("metrics not named in docs/ (add each to docs/operations.md, or to its registry kind's page):\n%s", strings.Join(missing, "\n"))
	}
}
