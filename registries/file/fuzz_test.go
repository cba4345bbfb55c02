package file

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzParse feeds arbitrary bytes to the services file parser.
// Invariants: no panic; a rejected file gets Errors whose every entry has
// a line and column (except "and N more errors", and "services: is
// required" for a file without a document); an accepted file gives a
// non-nil list whose endpoints all carry an origin line, the same on a
// second parse. Seeds: testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		svcs, err := Parse("services.yaml", data, vms)
		if err != nil {
			if svcs != nil {
				t.Fatal("services along with an error")
			}
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("error %T %v, want Errors", err, err)
			}
			for _, e := range errs {
				if (e.Line < 1 || e.Column < 1) && !strings.HasPrefix(e.Msg, "and ") && !strings.HasPrefix(e.Msg, "is required") {
					t.Fatalf("error without a position: %v", e)
				}
			}
			return
		}
		if svcs == nil {
			t.Fatal("nil services without an error")
		}
		for _, s := range svcs {
			for _, ep := range s.Endpoints {
				if !strings.HasPrefix(ep.Origin, "services.yaml:") || strings.HasSuffix(ep.Origin, ":0") {
					t.Fatalf("endpoint origin %q", ep.Origin)
				}
			}
		}
		again, err := Parse("services.yaml", data, vms)
		if err != nil || !cmp.Equal(svcs, again) {
			t.Fatalf("second parse differs: %v", err)
		}
	})
}
