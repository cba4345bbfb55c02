package registrytest

import (
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/meshfed/meshfed/registries"
)

// This file is the preamble every kind's tests share: its config blocks
// under testdata/config read as the clusters.yaml loader reads them, good
// and bad block tables, the defaults check, and building a registry from a
// block.

// ConfigDir is where a kind's tests keep their config blocks, relative to
// the package directory.
var ConfigDir = filepath.Join("testdata", "config")

// Block is a kind's Config block type C through its pointer.
type Block[C any] interface {
	*C
	registries.Config
}

// Load reads the block in the file name under ConfigDir into a new C with
// LoadConfig (the loader's decoding: strict, defaults, paths resolved
// against ConfigDir, validation).
func Load[C any, P Block[C]](t testing.TB, name string) (*C, error) {
	t.Helper()
	c := new(C)
	return c, LoadConfig(t, filepath.Join(ConfigDir, name), P(c))
}

// ConfigPath returns rel resolved against the absolute ConfigDir: what a
// relative path in a block under it becomes.
func ConfigPath(t testing.TB, rel string) string {
	t.Helper()
	dir, err := filepath.Abs(ConfigDir)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, rel)
}

// GoodConfig is one good block file under ConfigDir and the block it must
// load as.
type GoodConfig[C any] struct {
	File string
	Want C
	// Check, when set, checks more of the loaded block (what New makes of
	// it, its files...).
	Check func(t *testing.T, c *C)
}

// CheckGoodConfigs loads every case's file (Load), one parallel subtest a
// file, and compares the block with Want: reflect.DeepEqual, or equal
// when not nil. Then it runs the case's Check.
func CheckGoodConfigs[C any, P Block[C]](t *testing.T, cases []GoodConfig[C], equal func(got, want C) bool) {
	t.Helper()
	if equal == nil {
		equal = func(got, want C) bool { return reflect.DeepEqual(got, want) }
	}
	for _, tc := range cases {
		t.Run(tc.File, func(t *testing.T) {
			t.Parallel()
			c, err := Load[C, P](t, tc.File)
			if err != nil {
				t.Fatal(err)
			}
			if !equal(*c, tc.Want) {
				t.Errorf("config:\n got %+v\nwant %+v", *c, tc.Want)
			}
			if tc.Check != nil {
				tc.Check(t, c)
			}
		})
	}
}

// BadConfigs is CheckBadConfigs on the files under ConfigDir with fresh
// blocks of type C.
func BadConfigs[C any, P Block[C]](t *testing.T, cases []BadConfig, secrets ...string) {
	t.Helper()
	CheckBadConfigs(t, ConfigDir, func() registries.Config { return P(new(C)) }, cases, secrets...)
}

// CheckDefaults applies c's defaults and fails the test unless the block
// then validates (an empty block is a valid one).
func CheckDefaults(t testing.TB, c registries.Config) {
	t.Helper()
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("empty block after defaults: %v", err)
	}
}

// NewRegistry applies cfg's defaults, validates it and builds its
// registry for common with log (nil: none), failing the test on an error;
// R is the kind's Registry type.
func NewRegistry[R registries.Registry](t testing.TB, cfg registries.Config, common registries.Common, log *slog.Logger) R {
	t.Helper()
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	reg, err := cfg.New(common, log)
	if err != nil {
		t.Fatal(err)
	}
	return reg.(R)
}

// Logger is a test's registry logger: debug text on stderr under
// `go test -v`, else discarded.
func Logger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}
