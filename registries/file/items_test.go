package file

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshfed/meshfed/model"

	"github.com/meshfed/meshfed/registries/filewatch"
	"github.com/meshfed/meshfed/registries/registrytest"
)

// flowServices is genServices written the way the 1 MB file is:
// every endpoint a compact one-line flow mapping with a nested one.
func flowServices(n, m int, addr func(i, j int) string) []byte {
	var b strings.Builder
	b.WriteString("services:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: svc-%d\n    ports: [{name: http, port: 8080, protocol: HTTP}]\n    endpoints:\n", i)
		for j := range m {
			fmt.Fprintf(&b, "      - {address: %s, ports: {http: %d}, labels: {version: v1}}\n", addr(i, j), 20000+j)
		}
	}
	return []byte(b.String())
}

func addrOf(i, j int) string { return fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1) }

// TestParseItemsStyles: a file read range by range gives what the full
// parse gives, in every style the split follows; files it does not follow
// (or whose ranges do not parse alone) take the full parse.
func TestParseItemsStyles(t *testing.T) {
	t.Parallel()
	const svc = "    ports:\n      - {name: http, port: 80, protocol: HTTP}\n"
	for _, tc := range []struct {
		name  string
		data  string
		whole bool // takes the full parse
	}{
		{name: "block", data: string(genServices(5, 3))},
		{name: "flow endpoints", data: string(flowServices(5, 3, addrOf))},
		{name: "indent 0", data: "services:\n- name: a\n  ports: [{name: http, port: 80, protocol: HTTP}]\n- name: b\n  ports: [{name: http, port: 80, protocol: HTTP}]\n"},
		{name: "quotes", data: "services:\n  - name: \"a\"\n" + svc + "    endpoints:\n      - {address: '10.0.0.1', labels: {\"app.kubernetes.io/name\": 'it''s', x: \"#[{\\\"\"}}\n  - name: 'b'\n" + svc},
		{name: "multi-line quoted scalar hiding an item", data: "services:\n  - name: a\n" + svc + "    endpoints:\n      - address: 10.0.0.1\n        labels: {note: \"x\n  - name: b\n          y\"}\n  - name: c\n" + svc},
		{name: "multi-line flow mapping", data: "services:\n  - name: a\n" + svc + "    endpoints:\n      - {address: 10.0.0.1,\n  # not an item\n  labels: {v: x}}\n  - name: b\n" + svc},
		{name: "comments", data: "# head\nservices: # list\n  # before\n  - name: a # x\n" + svc + "# between\n\n  - name: b\n" + svc + "  # trailing\n"},
		{name: "anchors within a service", data: "services:\n  - name: a\n" + svc + "    endpoints:\n      - {address: 10.0.0.1, labels: &l {v: x}}\n      - {address: 10.0.0.2, labels: *l}\n  - name: b\n" + svc},
		{name: "document start", data: "---\n" + string(genServices(2, 1))},
		{name: "flow sequence", data: "services: [\n  {name: a, ports: [{name: http, port: 80, protocol: HTTP}], endpoints: [{address: 10.0.0.1}]},\n  {name: b, ports: [{name: http, port: 80, protocol: HTTP}]}, # c\n]\n"},
		{name: "json", data: `{"services": [{"name": "a", "ports": [{"name": "http", "port": 80, "protocol": "HTTP"}], "endpoints": [{"address": "10.0.0.1", "labels": {"v": "x"}}]},` + "\n" + ` {"name": "b", "ports": [{"name": "http", "port": 80, "protocol": "HTTP"}]}]}` + "\n"},
		{name: "empty", data: "services: []\n"},
		{name: "anchor across services", data: "services:\n  - name: a\n" + svc + "    endpoints:\n      - {address: 10.0.0.1, labels: &l {v: x}}\n  - name: b\n" + svc + "    endpoints:\n      - {address: 10.0.0.2, labels: *l}\n"},
		{name: "anchors across services, taken in turn and redefined", data: "services:\n  - name: a\n    ports: &p\n      - {name: http, port: 80, protocol: HTTP}\n    endpoints:\n      - {address: 10.0.0.1, labels: &l {v: x}}\n" +
			"  - name: b\n    ports: *p\n    endpoints: &e\n      - {address: 10.0.0.2, labels: *l}\n  - name: c\n    ports: *p\n    endpoints:\n      - {address: 10.0.0.3, labels: &l {v: y}}\n" +
			"  - name: d\n    ports: *p\n    endpoints: [{address: 10.0.0.4, labels: *l}, {address: 10.0.0.5, labels: {v: z}}]\n  - name: e\n    ports: *p\n    endpoints: *e\n"},
		{name: "anchors across services in a flow sequence", data: "services: [\n  {name: a, ports: &p [{name: http, port: 80, protocol: HTTP}]},\n  {name: b, ports: *p,\n   endpoints: [{address: 10.0.0.2}]},\n]\n"},
		{name: "alias before its anchor", data: "services:\n  - name: a\n    ports: *p\n  - name: b\n    ports: &p [{name: http, port: 80, protocol: HTTP}]\n", whole: true},
		{name: "block scalar", data: "services:\n  - name: >-\n      a\n" + svc},
		{name: "block scalars hiding items, quotes, flow and comments", data: "services:\n  - name: a\n" + svc + "    endpoints:\n      - address: 10.0.0.1\n        labels:\n          note: |\n            - name: fake\n  \n            \"not closed {[\n            # not a comment\n          w: |2-  # header comment\n             x\n          v: >\n\n           folded\n\n  - name: b\n" + svc + "    endpoints:\n      - address: 10.0.0.2\n        labels: {v: y}\n        locality: |-\n          r/z"},
		{name: "block scalar in a sequence entry", data: "services:\n  - name: a\n    ports:\n      - |\n        x\n  - name: b\n" + svc, whole: true}, // invalid: the error of the full parse
		{name: "bar inside a plain scalar", data: "services:\n  - name: a\n" + svc + "    endpoints:\n      - address: 10.0.0.1\n        labels: {v: x}\n        locality: a | b\n", whole: true},
		{name: "block scalar after a tag", data: "services:\n  - name: !!str |\n      a\n" + svc, whole: true},
		{name: "block scalar on the line after its key", data: "services:\n  - name:\n      |\n      a\n" + svc, whole: true},
		{name: "crlf", data: strings.ReplaceAll(string(flowServices(3, 2, addrOf)), "\n", "\r\n")},
		{name: "lone cr", data: strings.ReplaceAll(string(genServices(3, 2)), "\n", "\r"), whole: true},
		{name: "byte-order mark", data: "\ufeff" + string(genServices(3, 2))},
		{name: "byte-order mark and CRLF (Windows)", data: "\ufeff# head\r\n" + strings.ReplaceAll(string(flowServices(3, 2, addrOf)), "\n", "\r\n")},
		{name: "byte-order mark inside", data: string(genServices(1, 1)) + "  - name: \ufeffb\n" + svc, whole: true},
		{name: "flow item line at column 0", data: "services: [\n  {name: a,\nports: [{name: http, port: 80, protocol: HTTP}]},\n]\n", whole: true},
		{name: "tab", data: "services:\n  - name: a\n" + svc + "    endpoints:\n      - {address:\t10.0.0.1}\n"},
		{name: "tabs separating, before comments and quotes", data: "services:\t# \"x\n  - name:\ta\t# it's\n" + svc + "    endpoints:\n      - address:\t'10.0.0.1'\n        labels:\t{v:\t\"x\n  - name: y\"}\t\n\t\n  - name: b\n" + svc},
		{name: "tab in indentation", data: "services:\n  - name: a\n\t" + svc, whole: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			want, wantErr := Parse("services.yaml", []byte(tc.data), vms)
			var w work
			items, err := parseItems("services.yaml", []byte(tc.data), filewatch.Edit{}, vms, &itemCache{}, &w)
			if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
				t.Fatalf("error %v, want %v", err, wantErr)
			}
			if whole := w.whole.Load() > 0; whole != tc.whole {
				t.Errorf("full parse %v, want %v", whole, tc.whole)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(want, services(items)); diff != "" {
				t.Errorf("range by range differs from the full parse (-full +ranges):\n%s", diff)
			}
		})
	}
}

// TestParseItemsErrors: an invalid file reports what Parse reports, at
// its file:line:col, whichever service is wrong.
func TestParseItemsErrors(t *testing.T) {
	t.Parallel()
	data := flowServices(20, 3, func(i, j int) string {
		if i == 17 && j == 2 {
			return "10.0.0.1, weight: 0"
		}
		return addrOf(i, j)
	})
	cache := &itemCache{}
	var w work
	if _, err := parseItems("services.yaml", flowServices(20, 3, addrOf), filewatch.Edit{}, vms, cache, &w); err != nil {
		t.Fatal(err)
	}
	_, want := Parse("services.yaml", data, vms)
	_, err := parseItems("services.yaml", data, filewatch.Edit{}, vms, cache, &w)
	if err == nil || err.Error() != want.Error() || !strings.Contains(err.Error(), "services.yaml:109:37:") {
		t.Fatalf("error %v, want %v (at line 109)", err, want)
	}
}

func services(items []*svcItem) []model.Service {
	out := make([]model.Service, len(items))
	for i, it := range items {
		out[i] = it.svc
	}
	return out
}

// TestEditWorkPerService: one edit of one service, in a file of many
// (flow style, block style) or in one of many files, parses, converts and
// compares that one service (counted, not timed); an edit that moves the
// services after it to other lines converts those again without parsing
// them.
func TestEditWorkPerService(t *testing.T) {
	t.Parallel()
	const n, m = 300, 4
	block := func(addr func(i, j int) string) []byte {
		var b strings.Builder
		b.WriteString("services:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - name: svc-%d\n    ports:\n      - name: http\n        port: 8080\n        protocol: HTTP\n    endpoints:\n", i)
			for j := range m {
				fmt.Fprintf(&b, "      - address: %s\n        labels: {version: v1}\n", addr(i, j))
			}
		}
		return []byte(b.String())
	}
	flow := func(addr func(i, j int) string) []byte { return flowServices(n, m, addr) }
	edited := func(i, j int) string {
		if i == 123 && j == 1 {
			return "10.99.0.1"
		}
		return addrOf(i, j)
	}
	for _, tc := range []struct {
		name  string
		files int
		gen   func(addr func(i, j int) string) []byte
	}{
		{"flow style, one file", 1, flow},
		{"block style, one file", 1, block},
		{"flow style, 10 files", 10, flow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			write := func(addr func(i, j int) string) {
				data := tc.gen(addr)
				if tc.files > 1 {
					// The first service is in the first file, the others
					// each in one of the other files (renamed apart).
					for f := range tc.files {
						part := strings.ReplaceAll(string(data), "name: svc-", fmt.Sprintf("name: f%d-svc-", f))
						if f > 0 {
							part = strings.ReplaceAll(string(tc.gen(addrOf)), "name: svc-", fmt.Sprintf("name: f%d-svc-", f))
						}
						if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d.yaml", f)), []byte(part), 0o644); err != nil {
							t.Fatal(err)
						}
					}
					return
				}
				if err := os.WriteFile(filepath.Join(dir, "services.yaml"), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write(addrOf)
			r, sink, loop := loopOver(t, dir)
			loop.Reload(true)
			p0, c0, k0 := r.Work()
			if want := uint64(n * tc.files); p0 != want || c0 != want || k0 != want {
				t.Fatalf("first read: parsed %d, converted %d, compared %d; want %d each", p0, c0, k0, want)
			}
			write(edited)
			loop.Reload(true)
			p1, c1, k1 := r.Work()
			if p1-p0 != 1 || c1-c0 != 1 || k1-k0 != 1 {
				t.Errorf("one edit: parsed %d, converted %d, compared %d; want 1 each", p1-p0, c1-c0, k1-k0)
			}
			got, _, _ := sink.Last(vms.Shard())
			host := "svc-123.vm.internal"
			if tc.files > 1 {
				host = "f0-svc-123.vm.internal"
			}
			s, ok := registrytest.Find(got, host)
			if len(got) != n*tc.files || !ok || s.Endpoints[1].Address != "10.99.0.1" {
				t.Fatalf("published %d services, %s: %+v", len(got), host, s)
			}
			// Reading again unchanged parses, converts and compares nothing.
			loop.Reload(true)
			if p, c, k := r.Work(); p != p1 || c != c1 || k != k1 {
				t.Errorf("unchanged re-read: parsed %d, converted %d, compared %d", p-p1, c-c1, k-k1)
			}
		})
	}
}

// TestEditMovesLines: an edit that adds a line to the first service
// parses that service alone; the services below it, unchanged but on
// other lines, are converted again (their endpoints' Origin names their
// lines) without being parsed.
func TestEditMovesLines(t *testing.T) {
	t.Parallel()
	cache := &itemCache{}
	var w work
	if _, err := parseItems("s.yaml", flowServices(50, 2, addrOf), filewatch.Edit{}, vms, cache, &w); err != nil {
		t.Fatal(err)
	}
	data := strings.Replace(string(flowServices(50, 2, addrOf)), "    endpoints:\n", "    endpoints:\n      - {address: 10.99.0.1}\n", 1)
	p0, c0 := w.parsed.Load(), w.converted.Load()
	items, err := parseItems("s.yaml", []byte(data), filewatch.Edit{}, vms, cache, &w)
	if err != nil {
		t.Fatal(err)
	}
	if p, c := w.parsed.Load()-p0, w.converted.Load()-c0; p != 1 || c != 50 {
		t.Errorf("parsed %d, converted %d; want 1 and 50", p, c)
	}
	want, _ := Parse("s.yaml", []byte(data), vms)
	if diff := cmp.Diff(want, services(items)); diff != "" {
		t.Errorf("differs from the full parse:\n%s", diff)
	}
}

// FuzzParseItems: reading a file range by range, with a cache warmed by
// another file, gives what the full parse gives: the same services or the
// same errors. Seeds: generated files in several styles.
func FuzzParseItems(f *testing.F) {
	f.Add(genServices(3, 2), flowServices(3, 2, addrOf))
	f.Add(flowServices(4, 1, addrOf), []byte("services: [{name: a, ports: [{name: http, port: 80, protocol: HTTP}]}]\n"))
	f.Add([]byte("services:\n  - name: a\n    ports: [{name: http, port: 80, protocol: HTTP}]\n    endpoints:\n      - {address: '1.2.3.4', labels: {a: \"x\n  - y\"}}\n"), genServices(2, 1))
	anchored := func(kinds ...int) []byte {
		b := []byte("services:\n")
		for i, k := range kinds {
			b = append(b, anchorService(fmt.Sprintf("s%d", i), k, i)...)
		}
		return b
	}
	f.Add(anchored(0, 1, 2, 3, 5, 7), anchored(0, 2, 1, 0, 7, 11, 4))
	f.Add(anchored(0, 6, 10, 2), anchored(0, 6, 2))
	f.Add([]byte("services:\n  - name: a\n    ports: [{name: http, port: 80, protocol: HTTP}]\n    endpoints:\n      - address: 10.0.0.1\n        labels:\n          n: |\n            - name: b\n          m: >-\n           x\n  - name: c\n    ports: [{name: http, port: 80, protocol: HTTP}]\n"),
		[]byte("services:\n  - name: a\n    ports: [{name: http, port: 80, protocol: HTTP}]\n"))
	f.Add([]byte("services:\t# \"x\n  - name:\ta\t# it's\n    ports: [{name: http, port: 80, protocol: HTTP}]\n    endpoints:\n      - {address:\t'10.0.0.1', labels:\t{v:\t\"x\n  - y\"}}\n"), genServices(2, 2))
	// Found by the anchors review: endpoints taken in flow form; a user
	// swapped before its definer.
	f.Add([]byte("services: [\n  {name: a, ports: &p [{name: http, port: 80, protocol: HTTP}], endpoints: &e [{address: 10.0.0.1}]},\n  {name: b, ports: *p, endpoints: *e}]\n"),
		[]byte("services: [\n  {name: a, ports: &p [{name: http, port: 80, protocol: HTTP}], endpoints: &e [{address: 10.0.0.1}]},\n  {name: c, ports: *p},\n  {name: b, ports: *p, endpoints: *e}]\n"))
	f.Add([]byte("services:\n"+svcPorts("a", "[{name: http, port: 80, protocol: HTTP}]")+svcPorts("b", "&h [{name: http, port: 81, protocol: HTTP}]")+svcPorts("c", "*h")),
		[]byte("services:\n"+svcPorts("c", "*h")+svcPorts("b", "&h [{name: http, port: 81, protocol: HTTP}]")+svcPorts("a", "[{name: http, port: 80, protocol: HTTP}]")))
	f.Fuzz(func(t *testing.T, warm, data []byte) {
		cache := &itemCache{}
		var w work
		_, _ = parseItems("services.yaml", warm, filewatch.Edit{}, vms, cache, &w)
		items, err := parseItems("services.yaml", data, filewatch.Edit{}, vms, cache, &w)
		want, wantErr := Parse("services.yaml", data, vms)
		if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
			t.Fatalf("error %v, want %v:\n%s", err, wantErr, data)
		}
		if err != nil {
			return
		}
		if diff := cmp.Diff(want, services(items)); diff != "" {
			t.Fatalf("range by range differs from the full parse (-full +ranges):\n%s\n%s", diff, data)
		}
	})
}

// TestKeyedMatchesMerge: over random edits of a few files in mixed styles
// — services added, changed, moved, removed, declared in two files, files
// removed — the state published key by key is, after every read, every
// file's full parse merged in path order (the first file declaring a
// hostname serves it, later ones are rejected).
func TestKeyedMatchesMerge(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(22, 2))
	svc := func(name string) string {
		addr := fmt.Sprintf("10.0.0.%d", rnd.IntN(9)+1)
		if rnd.IntN(2) == 0 {
			return fmt.Sprintf("  - name: %s\n    ports: [{name: http, port: 80, protocol: HTTP}]\n    endpoints:\n      - {address: %s, ports: {http: 81}}\n", name, addr)
		}
		return fmt.Sprintf("  - name: \"%s\"\n    ports:\n      - {name: http, port: 80, protocol: HTTP}\n    endpoints:\n      - address: %s\n", name, addr)
	}
	dir := t.TempDir()
	reg, err := (&Config{Options: filewatch.Options{Path: dir}}).New(vms, nil)
	if err != nil {
		t.Fatal(err)
	}
	sink := registrytest.NewSink()
	loop, err := reg.(*Registry).watch().NewLoop(sink)
	if err != nil {
		t.Fatal(err)
	}
	defer loop.Close()
	files := map[string]map[string]string{} // file → service name → its YAML
	for step := range 200 {
		name := fmt.Sprintf("f%d.yaml", rnd.IntN(3))
		if files[name] == nil {
			files[name] = map[string]string{}
		}
		s := fmt.Sprintf("s%d", rnd.IntN(8))
		switch op := rnd.IntN(10); {
		case op < 6:
			files[name][s] = svc(s)
		case op < 9:
			delete(files[name], s)
		default:
			delete(files, name)
		}
		path := filepath.Join(dir, name)
		if files[name] == nil {
			if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		} else {
			var b strings.Builder
			b.WriteString("services:\n")
			names := slices.Collect(maps.Keys(files[name]))
			rnd.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
			for _, n := range names {
				b.WriteString(files[name][n])
			}
			if len(names) == 0 {
				b.Reset()
				b.WriteString("services: []\n")
			}
			if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		loop.Reload(true)
		var want []model.Service
		var wantRej []string
		first := map[string]string{}
		for _, n := range slices.Sorted(maps.Keys(files)) {
			data, err := os.ReadFile(filepath.Join(dir, n))
			if err != nil {
				t.Fatal(err)
			}
			svcs, err := Parse(n, data, vms)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range svcs {
				if at, dup := first[s.Hostname]; dup {
					wantRej = append(wantRej, s.Hostname+" "+filepath.Join(dir, n)+" "+at)
					continue
				}
				first[s.Hostname] = filepath.Join(dir, n)
				want = append(want, s)
			}
		}
		got, rej, _ := sink.Last(vms.Shard())
		if diff := registrytest.DiffServices(want, got); diff != "" {
			t.Fatalf("step %d: published state differs from the merge:\n%s", step, diff)
		}
		var gotRej []string
		for _, r := range rej {
			gotRej = append(gotRej, r.Host+" "+strings.TrimPrefix(r.Subject, "service in ")+" "+strings.TrimSuffix(strings.TrimPrefix(r.Reason, "also declared in "), ", which is served (the first file in path order wins)"))
		}
		slices.Sort(wantRej)
		slices.Sort(gotRej)
		if !slices.Equal(wantRej, gotRej) {
			t.Fatalf("step %d: rejections %q, want %q", step, gotRej, wantRej)
		}
	}
}

// TestResplitEditChains: over chains of random edits — an address or a
// name changed, a service added or removed, lines added, and raw bytes
// (quotes, brackets, comments, dashes, tabs, line breaks) inserted or
// deleted anywhere — in files of every style the split follows, reading
// each version with the cache the previous ones left (the split redone
// only where the bytes changed) gives what the full parse gives: the same
// services or the same error.
func TestResplitEditChains(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(22, 7))
	jsonOf := func(n int) []byte {
		var b strings.Builder
		b.WriteString("{\"services\": [\n")
		for i := range n {
			if i > 0 {
				b.WriteString(",\n")
			}
			fmt.Fprintf(&b, "  {\"name\": \"svc-%d\", \"ports\": [{\"name\": \"http\", \"port\": 80, \"protocol\": \"HTTP\"}], \"endpoints\": [{\"address\": \"%s\"}]}", i, addrOf(i, 0))
		}
		b.WriteString("\n]}\n")
		return []byte(b.String())
	}
	flowSeq := func(n int) []byte {
		var b strings.Builder
		b.WriteString("services: [\n")
		for i := range n {
			fmt.Fprintf(&b, "  {name: svc-%d, ports: [{name: http, port: 80, protocol: HTTP}], endpoints: [{address: %s}]},  # s%d\n", i, addrOf(i, 1), i)
		}
		b.WriteString("]\n")
		return []byte(b.String())
	}
	snippets := []string{"", "\n", " ", "#", "# c\n", "'", "\"", "{", "}", "[", "]", ",", "- ", "  - ", "\t", "|", "---\n", "x",
		": |\n", ": >-\n  - name: x\n", "    note: |2\n       - a\n     b\n", "\n          |\n",
		"\r\n", "\r", "\ufeff", "&a ", "*a", "<<: *a\n", "...\n", "%YAML 1.2\n", "? ", "!!str ", `"{-#"`, "'- #'", " # {\n", "\\",
		"  - name: added\n    ports: [{name: http, port: 80, protocol: HTTP}]\n",
		"      - {address: 10.9.9.9}\n", "  {name: added, ports: [{name: http, port: 80, protocol: HTTP}]},\n",
		"      - {address: 10.9.9.8, labels: &l {v: \"x\"}}\n", "      - {address: 10.9.9.7, labels: *l}\n"}
	// Anchors, aliases, quoted scalars holding what the split looks for,
	// multi-line flow mappings, comments and CRLF line breaks.
	mixed := func(n int) []byte {
		var b strings.Builder
		b.WriteString("# head\r\nservices:\r\n")
		for i := range n {
			fmt.Fprintf(&b, "  - name: \"svc-%d\"  # '{-#\r\n    ports: [{name: http, port: 80, protocol: HTTP}]\r\n    endpoints:\r\n", i)
			fmt.Fprintf(&b, "      - {address: %s, labels: &l%d {note: \"a {b} - #c\", v: 'it''s'}}\r\n", addrOf(i, 0), i)
			fmt.Fprintf(&b, "      - {address: %s,\r\n         labels: *l%d}\r\n", addrOf(i, 1), i)
		}
		return []byte(b.String())
	}
	// Anchors defined by some services and taken by later ones, some
	// taking in turn what they take, some redefined.
	anchors := func(n int) []byte {
		var b strings.Builder
		b.WriteString("services:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - name: svc-%d\n", i)
			switch {
			case i%10 == 0:
				fmt.Fprintf(&b, "    ports: &p\n      - {name: http, port: %d, protocol: HTTP}\n", 80+i)
			default:
				b.WriteString("    ports: *p\n")
			}
			switch i % 7 {
			case 0:
				fmt.Fprintf(&b, "    endpoints: &e\n      - {address: %s, labels: &l {v: \"%d\"}}\n", addrOf(i, 0), i)
			case 3:
				b.WriteString("    endpoints: *e\n")
			default:
				fmt.Fprintf(&b, "    endpoints:\n      - {address: %s, labels: *l}\n", addrOf(i, 0))
			}
		}
		return []byte(b.String())
	}
	// Block scalars whose lines look like items, quotes, flow
	// collections and comments.
	blockScalars := func(n int) []byte {
		var b strings.Builder
		b.WriteString("services:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - name: svc-%d\n    ports: [{name: http, port: 80, protocol: HTTP}]\n    endpoints:\n", i)
			fmt.Fprintf(&b, "      - address: %s\n        labels:\n          note: |\n            - name: x%d\n            \"{[# '\n\n          w: >-\n           %d\n", addrOf(i, 0), i, i)
		}
		return []byte(b.String())
	}
	starts := map[string][]byte{
		"block": genServices(30, 2), "flow endpoints": flowServices(30, 2, addrOf),
		"flow sequence": flowSeq(30), "json": jsonOf(30), "mixed": mixed(30), "anchors": anchors(30),
		"block scalars": blockScalars(30),
		"windows":       append([]byte("\ufeff"), strings.ReplaceAll(string(genServices(30, 2)), "\n", "\r\n")...),
	}
	for _, style := range slices.Sorted(maps.Keys(starts)) {
		data := starts[style]
		cache := &itemCache{}
		var w work
		// The two buffers a Watch reads a file into, in turn
		// (filewatch.Watch.Parse): a read overwrites the bytes of the
		// read before the last one.
		var bufs [2][]byte
		for step := range 300 {
			next := slices.Clone(data)
			switch op := rnd.IntN(4); {
			case op == 0: // an address changed
				if i := strings.Index(string(next), "10."); i >= 0 {
					k := rnd.IntN(strings.Count(string(next), "10."))
					i = nthIndex(string(next), "10.", k)
					next = slices.Replace(next, i, i+3, []byte(fmt.Sprintf("1%d.", rnd.IntN(9)))...)
				}
			case op == 1 && len(next) > 0: // bytes deleted
				i := rnd.IntN(len(next))
				next = slices.Delete(next, i, min(len(next), i+rnd.IntN(40)))
			default: // a snippet inserted
				i := rnd.IntN(len(next) + 1)
				next = slices.Insert(next, i, []byte(snippets[rnd.IntN(len(snippets))])...)
			}
			if rnd.IntN(8) == 0 {
				next = starts[style] // back to a good file now and then
			}
			bufs[step%2] = append(bufs[step%2][:0], next...)
			prev := data
			data = bufs[step%2]
			// As the Watch passes it: how data differs from the last
			// bytes parsed.
			items, err := parseItems("s.yaml", data, filewatch.Diff(prev, data), vms, cache, &w)
			want, wantErr := Parse("s.yaml", data, vms)
			if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
				t.Fatalf("%s, step %d: error %v, want %v:\n%s", style, step, err, wantErr, data)
			}
			if err != nil {
				continue
			}
			if diff := cmp.Diff(want, services(items)); diff != "" {
				t.Fatalf("%s, step %d: differs from the full parse (-full +ranges):\n%s\n%s", style, step, diff, data)
			}
		}
		if w.cut.Load() == 0 || w.whole.Load() == 0 {
			t.Errorf("%s: %d ranges cut, %d full parses: the chain did not exercise both", style, w.cut.Load(), w.whole.Load())
		}
	}
}

func nthIndex(s, sub string, n int) int {
	off := 0
	for range n {
		i := strings.Index(s[off:], sub)
		off += i + len(sub)
	}
	return off + strings.Index(s[off:], sub)
}

// TestEditCostsOneService10k: in a file of 10,000 services in the compact
// flow style of issue #22, one edit of one endpoint splits, parses,
// converts and compares one service (counted, not timed): the split is
// redone only where the bytes changed (resplit), whatever the file's size.
func TestEditCostsOneService10k(t *testing.T) {
	t.Parallel()
	const n = 10000
	path := filepath.Join(t.TempDir(), "services.yaml")
	addr := func(edited bool) func(i, j int) string {
		return func(i, j int) string {
			if edited && i == 6001 && j == 1 {
				return "10.99.0.1"
			}
			return addrOf(i, j)
		}
	}
	if err := os.WriteFile(path, flowServices(n, 10, addr(false)), 0o644); err != nil {
		t.Fatal(err)
	}
	r, sink, loop := loopOver(t, path)
	loop.Reload(false)
	if got := sink.State(r.common.Shard()).Services; len(got) != n {
		t.Fatalf("first read published %d services, want %d", len(got), n)
	}
	p0, c0, k0 := r.Work()
	cut0 := r.work.cut.Load()
	if err := os.WriteFile(path, flowServices(n, 10, addr(true)), 0o644); err != nil {
		t.Fatal(err)
	}
	loop.Reload(false)
	p, c, k := r.Work()
	if p-p0 != 1 || c-c0 != 1 || k-k0 != 1 || r.work.cut.Load()-cut0 != 1 || r.work.whole.Load() != 0 {
		t.Errorf("one edit: cut %d ranges, parsed %d, converted %d, compared %d, %d full parses; want 1, 1, 1, 1, 0",
			r.work.cut.Load()-cut0, p-p0, c-c0, k-k0, r.work.whole.Load())
	}
	s, ok := registrytest.Find(sink.State(r.common.Shard()).Services, "svc-6001.vm.internal")
	if !ok || s.Endpoints[1].Address != "10.99.0.1" {
		t.Errorf("svc-6001 after the edit: %+v", s)
	}
}

// loopOver is a file Registry over path and its watch loop publishing to
// a test sink, driven by the caller (Reload); closed at the test's end.
func loopOver(t *testing.T, path string) (*Registry, *registrytest.Sink, *filewatch.Loop[[]*svcItem]) {
	t.Helper()
	reg, err := (&Config{Options: filewatch.Options{Path: path}}).New(vms, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := reg.(*Registry)
	sink := registrytest.NewSink()
	loop, err := r.watch().NewLoop(sink)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = loop.Close() })
	return r, sink, loop
}

// TestOneLineJSON10k: a minified JSON file of 10,000 services (one line)
// is cut into its services, and an edit in it cuts one range again: the
// split never scans back over the line per item.
func TestOneLineJSON10k(t *testing.T) {
	t.Parallel()
	gen := func(edited int) []byte {
		var b strings.Builder
		b.WriteString(`{"services":[`)
		for i := range 10000 {
			if i > 0 {
				b.WriteByte(',')
			}
			addr := addrOf(i, 0)
			if i == edited {
				addr = "10.99.0.1"
			}
			fmt.Fprintf(&b, `{"name":"svc-%d","ports":[{"name":"http","port":80,"protocol":"HTTP"}],"endpoints":[{"address":"%s"}]}`, i, addr)
		}
		b.WriteString("]}")
		return []byte(b.String())
	}
	cache := &itemCache{}
	var w work
	if _, err := parseItems("s.json", gen(-1), filewatch.Edit{}, vms, cache, &w); err != nil {
		t.Fatal(err)
	}
	cut0, p0 := w.cut.Load(), w.parsed.Load()
	items, err := parseItems("s.json", gen(4321), filewatch.Edit{}, vms, cache, &w)
	if err != nil {
		t.Fatal(err)
	}
	if cut, p := w.cut.Load()-cut0, w.parsed.Load()-p0; cut != 1 || p != 1 || w.whole.Load() != 0 {
		t.Errorf("one edit: cut %d ranges, parsed %d, %d full parses; want 1, 1, 0", cut, p, w.whole.Load())
	}
	if got := items[4321].svc.Endpoints[0].Address; got != "10.99.0.1" {
		t.Errorf("svc-4321's address %s after the edit", got)
	}
}
