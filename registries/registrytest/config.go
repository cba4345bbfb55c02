package registrytest

import (
	"os"
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
