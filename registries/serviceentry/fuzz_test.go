package serviceentry

import (
	"strings"
	"testing"
)

// FuzzParseConvert feeds arbitrary bytes to Parse and Convert.
// Invariants: no panic; an object error starts with its file:line; every
// rejection has a subject and a reason; every served host is within the
// domain and every endpoint names its origin in the file.
func FuzzParseConvert(f *testing.F) {
	for _, s := range []string{seStatic, seSelector, workloads, seSelector + "---\n" + workloads, "kind: ServiceEntry\nspec: [\n", "---\n---\n", "a: &a [*a]\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := Parse("f.yaml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.yaml: ") {
				t.Fatalf("file error %q does not name the file", err)
			}
			return
		}
		for _, o := range objs {
			if o.Err != nil && !strings.HasPrefix(o.Err.Error(), o.Source+": ") {
				t.Fatalf("object error %q does not start with %s", o.Err, o.Source)
			}
			if !strings.HasPrefix(o.Source, "f.yaml:") {
				t.Fatalf("source %q", o.Source)
			}
		}
		svcs, rej := Convert(objs, common)
		for _, r := range rej {
			if r.Subject == "" || r.Reason == "" {
				t.Fatalf("rejection without subject or reason: %+v", r)
			}
		}
		for _, s := range svcs {
			if s.Hostname != common.Domain && !strings.HasSuffix(s.Hostname, "."+common.Domain) {
				t.Fatalf("served %q outside the domain", s.Hostname)
			}
			for _, e := range s.Endpoints {
				if !strings.HasPrefix(e.Origin, "f.yaml:") {
					t.Fatalf("endpoint origin %q", e.Origin)
				}
			}
		}
	})
}
