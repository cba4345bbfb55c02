package serviceentry

import (
	"strings"
	"testing"
)

// FuzzParseConvert feeds arbitrary bytes to Parse and Convert.
// Invariants: no panic; every line of an object's error starts with its file:line; every
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
			if err := objectError(o); err != nil {
				for line := range strings.SplitSeq(err.Error(), "\n") {
					if !strings.HasPrefix(line, "f.yaml:") {
						t.Fatalf("object error line %q does not start with its file:line", line)
					}
				}
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
