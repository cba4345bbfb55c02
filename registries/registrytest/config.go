package registrytest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"

	"github.com/meshfed/meshfed/registries"
)

// LoadConfig reads a kind block from path into c the way the clusters.yaml
// loader does (strict: unknown keys are errors), then applies defaults and
// validates. It returns the decode or validation error; a file that cannot
// be read fails the test.
func LoadConfig(t testing.TB, path string, c registries.Config) error {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalWithOptions(b, c, yaml.DisallowUnknownField()); err != nil {
		return err
	}
	c.ApplyDefaults()
	return c.Validate()
}

// BadConfig is one bad kind-block file and the error it must give.
type BadConfig struct {
	File string // under the directory given to CheckBadConfigs
	Key  string // the *registries.FieldError key; "" for a decode error
	Err  string // a substring of the error
}

// CheckBadConfigs loads every case's file into a fresh block from
// newConfig with LoadConfig and checks that it fails with the case's key
// and message, and that no error shows any of secrets.
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
			var fe *registries.FieldError
			if tc.Key != "" && (!errors.As(err, &fe) || fe.Key != tc.Key) {
				t.Errorf("error %v: want a FieldError for key %q", err, tc.Key)
			}
		})
	}
}
