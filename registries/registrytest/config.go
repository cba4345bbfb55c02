package registrytest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/yamlconf"
)

// LoadConfig reads a kind block from path into c with the clusters.yaml
// loader's own decoding path (package yamlconf: strict, defaults, paths
// resolved against the file's directory, validation). It returns a
// *yamlconf.Error listing every problem, keys relative to the block; a
// file that cannot be read fails the test.
func LoadConfig(t testing.TB, path string, c registries.Config) error {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	return yamlconf.Decode(path, dir, b, c)
}

// BadConfig is one bad kind-block file and the error it must give.
type BadConfig struct {
	File string // under the directory given to CheckBadConfigs
	Key  string // the key of the problem (a *registries.FieldError's key); "" to not check it
	Err  string // a substring of the error
}

// CheckBadConfigs loads every case's file into a fresh block from
// newConfig with LoadConfig and checks that it fails with a problem with
// the case's key and message, that every problem has a line, and that no
// error shows any of secrets.
func CheckBadConfigs(t *testing.T, dir string, newConfig func() registries.Config, cases []BadConfig, secrets ...string) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.File, func(t *testing.T) {
			t.Parallel()
			err := LoadConfig(t, filepath.Join(dir, tc.File), newConfig())
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.Err) {
				t.Errorf("error %q does not contain %q", err, tc.Err)
			}
			for _, s := range secrets {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q shows the secret %q", err, s)
				}
			}
			var ye *yamlconf.Error
			if !errors.As(err, &ye) {
				t.Fatalf("error is %T, want *yamlconf.Error: %v", err, err)
			}
			found := false
			for _, p := range ye.Problems {
				if p.Line == 0 {
					t.Errorf("problem without a line: %s", p)
				}
				if strings.Contains(p.Msg, tc.Err) && (tc.Key == "" || p.Key == tc.Key) {
					found = true
				}
			}
			if !found && tc.Key != "" {
				t.Errorf("error %v: want a problem for key %q containing %q", err, tc.Key, tc.Err)
			}
		})
	}
}
