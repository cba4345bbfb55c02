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

// FuzzParseFastPath: whatever the fast path accepts, the node path reads
// the same (services, endpoint origins and all). Seeds: the FuzzParse
// corpus plus generated files.
func FuzzParseFastPath(f *testing.F) {
	f.Add(genServices(3, 2))
	f.Add([]byte("services:\n- name: a\n  ports:\n  - name: http\n    port: 80\n    protocol: HTTP\n  endpoints:\n  -\n    address: 10.0.0.1\n    labels:\n      app.kubernetes.io/name: x\n    ports: {http: 8080}\n    weight: 2\n"))
	f.Add([]byte("services: # c\n  - name: a   # c\n    resolution: DNS\n    ports: [{name: tcp, port: 5432, protocol: TCP}]\n    endpoints:\n      - {address: db#1.example, locality: eu-west, health: draining}\n"))
	f.Add([]byte("services:\n  - name: a\n    ports:\n      - {name: http, port: 80, protocol: HTTP}\n    endpoints:\n      - address: 10.0.0.1\n        labels: {version: 1}\n      - address: null\n"))
	for _, seed := range []string{
		"services:\n  - name: a\n    ports:\n      - {name: http, port: 80, protocol: HTTP}\n    endpoints:\n      - address: 10.0.0.1\n        labels:\n          version : v1\n",
		"services:\n  - name: a\n    ports:\n      - {name: http, port: 80, protocol: HTTP}\n    endpoints:\n      - address: 10.0.0.1\n          continued\n",
		"services:\n  - name: a\n    ports:\n      - {name: http, port: 80, protocol: HTTP}\n    endpoints:\n",
		"services:\n  - name: a\n    ports:\n      - {name: http, port: 80, protocol: HTTP}\n    endpoints:\n      - address: 10.0.0.1\n      - address: 10.0.0.1\n        weight: 0\n",
		"---\nservices: []\n",
		"services: []\n---\nservices: []\n",
		"services:\n  - name: a\n    name: b\n",
		"services:\n  - name: a:b\n    ports:\n      - {name: http, port: 80, protocol: HTTP}\n",
		"services:\n  - name: a\n    ports:\n      - {name: http, port: 80, protocol: HTTP, }\n",
		"services:\n  - name: a\n    ports:\n      - name: http\n        port: 080\n        protocol: HTTP\n",
		"services:\n  - name: a\n    ports:\n      - {name: http, port: 80, protocol: HTTP}\n    endpoints:\n      - address: 10.0.0.1\n        ports:\n          http: 8080\n          http: 8081\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, ok := fastParse("services.yaml", data, vms)
		entries, _, decoded := fastDecode(data)
		if ok && (!decoded || len(entries) != len(fast)) {
			t.Fatalf("fastParse and fastDecode disagree:\n%s", data)
		}
		if !ok {
			return
		}
		slow, err := parseNodes("services.yaml", data, vms)
		if err != nil {
			t.Fatalf("the fast path accepted what the node path rejects (%v):\n%s", err, data)
		}
		if diff := cmp.Diff(slow, fast); diff != "" {
			t.Fatalf("fast path differs (-node +fast):\n%s\n%s", diff, data)
		}
	})
}
