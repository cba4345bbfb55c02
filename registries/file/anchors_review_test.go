package file

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshfed/meshfed/registries/filewatch"
)

// An adversarial review of anchors taken across services (anchors.go):
// whatever the file and its edits, each read equals the full parse.

// readsMatchParse reads files in turn, each as an edit of the one before
// (as the Watch reads them), and fails unless every read gives what the
// full parse gives for the same bytes, errors included. It returns the
// work counted and how many reads were rejected.
func readsMatchParse(t *testing.T, files ...string) (w *work, rejected int) {
	t.Helper()
	cache := &itemCache{}
	w = &work{}
	var prev []byte
	for i, f := range files {
		data := []byte(f)
		items, err := parseItems("s.yaml", data, filewatch.Diff(prev, data), vms, cache, w)
		want, wantErr := Parse("s.yaml", data, vms)
		prev = data
		if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
			t.Fatalf("read %d: error %v, want %v:\n%s", i, err, wantErr, data)
		}
		if err != nil {
			rejected++
			continue
		}
		if got := services(items); !reflect.DeepEqual(want, got) {
			diff := cmp.Diff(want, got)
			t.Fatalf("read %d: differs from the full parse (-full +ranges):\n%s\n%s", i, diff, data)
		}
	}
	return w, rejected
}

// svcPorts is a block service whose ports are the text given.
func svcPorts(name, ports string) string {
	return fmt.Sprintf("  - name: %s\n    ports: %s\n    endpoints:\n      - address: 10.0.0.1\n", name, ports)
}

// TestAnchorReviewEdits: sequences of edits of files whose services take
// anchors in the shapes the split follows give what the full parse gives
// after each edit.
func TestAnchorReviewEdits(t *testing.T) {
	t.Parallel()
	port := func(anchor string, n int) string {
		return fmt.Sprintf("%s[{name: http, port: %d, protocol: HTTP}]", anchor, n)
	}
	p := "    ports: [{name: http, port: 80, protocol: HTTP}]\n"
	cases := map[string][]string{
		// Redefined, then each definition removed in turn.
		"redefined": {
			"services:\n" + svcPorts("a", port("&h ", 80)) + svcPorts("b", "*h") + svcPorts("c", port("&h ", 81)) + svcPorts("d", "*h"),
			"services:\n" + svcPorts("a", port("&h ", 81)) + svcPorts("b", "*h") + svcPorts("c", port("&h ", 80)) + svcPorts("d", "*h"),
			"services:\n" + svcPorts("a", port("&h ", 81)) + svcPorts("b", "*h") + svcPorts("c", port("", 82)) + svcPorts("d", "*h"),
			"services:\n" + svcPorts("a", port("", 83)) + svcPorts("b", "*h") + svcPorts("c", port("", 82)) + svcPorts("d", "*h"),
			"services:\n" + svcPorts("a", port("&h ", 80)) + svcPorts("b", "*h") + svcPorts("c", port("", 82)) + svcPorts("d", "*h"),
		},
		// c takes x from b, which redefines what a defines.
		"two definers": {
			"services:\n" + svcPorts("a", port("&x ", 80)) + svcPorts("b", port("&y ", 81)) + svcPorts("c", "*x") + svcPorts("d", "*y"),
			"services:\n" + svcPorts("a", port("&x ", 80)) + svcPorts("b", port("&x ", 81)) + svcPorts("c", "*x") + svcPorts("d", "*x"),
			"services:\n" + svcPorts("a", port("&x ", 82)) + svcPorts("b", port("&x ", 81)) + svcPorts("c", "*x") + svcPorts("d", "*x"),
			"services:\n" + svcPorts("a", port("&x ", 82)) + svcPorts("b", port("&y ", 81)) + svcPorts("c", "*x") + svcPorts("d", "*x"),
		},
		// An anchor on the service itself: a second service of the same name.
		"service anchored": {
			"services:\n  - &s {name: a, ports: [{name: http, port: 80, protocol: HTTP}]}\n  - name: b\n" + p,
			"services:\n  - &s {name: a, ports: [{name: http, port: 80, protocol: HTTP}]}\n  - *s\n",
			"services:\n  - &s {name: a, ports: [{name: http, port: 80, protocol: HTTP}]}\n  - name: b\n" + p,
		},
		"flow": {
			"services: [{name: a, ports: &p [{name: http, port: 80, protocol: HTTP}]}, {name: b, ports: *p}]\n",
			"services: [{name: a, ports: &p [{name: http, port: 81, protocol: HTTP}]}, {name: b, ports: *p}]\n",
			"services: [{name: a, ports: &p [{name: http, port: 81, protocol: HTTP}]},\n {name: b, ports: *p}]\n",
			"services: [{name: a, ports: &q [{name: http, port: 81, protocol: HTTP}]},\n {name: b, ports: *p}]\n",
			"services: [{name: a, ports: &p [{name: http, port: 81, protocol: HTTP}]},\n {name: b, ports: *p}]\n",
		},
		"json": {
			`{"services": [{"name": "a", "ports": &p [{"name": "http", "port": 80, "protocol": "HTTP"}]}, {"name": "b", "ports": *p}]}` + "\n",
			`{"services": [{"name": "a", "ports": &p [{"name": "http", "port": 81, "protocol": "HTTP"}]}, {"name": "b", "ports": *p }]}` + "\n",
		},
		"odd names": {
			"services:\n" + svcPorts("a", port("&a.b ", 80)) + svcPorts("b", "*a.b") + svcPorts("c", port("&ü ", 90)) + svcPorts("d", "*ü"),
			"services:\n" + svcPorts("a", port("&a.b ", 81)) + svcPorts("b", "*a.b") + svcPorts("c", port("&ü ", 91)) + svcPorts("d", "*ü"),
			"services:\n" + svcPorts("a", port("&a/b ", 81)) + svcPorts("b", "*a/b") + svcPorts("c", port("&'x ", 91)) + svcPorts("d", "*'x"),
			"services:\n" + svcPorts("a", port("&a/b ", 82)) + svcPorts("b", "*a/b") + svcPorts("c", port("&'x ", 92)) + svcPorts("d", "*'x"),
		},
		"alias as a key": {
			"services:\n  - name: &n a\n" + p + "  - name: b\n" + p + "    endpoints:\n      - address: 10.0.0.1\n        labels: {*n : x}\n",
			"services:\n  - name: &n c\n" + p + "  - name: b\n" + p + "    endpoints:\n      - address: 10.0.0.1\n        labels: {*n : x}\n",
			"services:\n  - name: &n c\n" + p + "  - name: b\n" + p + "    endpoints:\n      - address: 10.0.0.1\n        labels:\n          *n : x\n",
		},
		// Endpoints taken from an earlier service, with lines moved above,
		// inside and between definer and user.
		"endpoints moved": {
			"services:\n  - name: a\n    ports: &p [{name: http, port: 80, protocol: HTTP}]\n    endpoints: &e\n      - address: 10.0.0.1\n  - name: b\n    ports: *p\n    endpoints: *e\n",
			"# c\nservices:\n  - name: a\n    ports: &p [{name: http, port: 80, protocol: HTTP}]\n    endpoints: &e\n      - address: 10.0.0.1\n  - name: b\n    ports: *p\n    endpoints: *e\n",
			"# c\nservices:\n  - name: a\n    ports: &p [{name: http, port: 80, protocol: HTTP}]\n    # x\n    endpoints: &e\n      - address: 10.0.0.1\n  - name: b\n    ports: *p\n    endpoints: *e\n",
			"# c\nservices:\n  - name: a\n    ports: &p [{name: http, port: 80, protocol: HTTP}]\n    # x\n    endpoints: &e\n      - address: 10.0.0.1\n  - name: m\n    ports: *p\n  - name: b\n    ports: *p\n    endpoints: *e\n",
			"# c\nservices:\n  - name: a\n    ports: &p [{name: http, port: 80, protocol: HTTP}]\n    # x\n    endpoints: &e\n      - address: 10.0.0.1\n  - name: m\n    ports: *p\n    # y\n  - name: b\n    ports: *p\n    endpoints: *e\n",
			"# c\nservices:\n  - name: a\n    ports: &p [{name: http, port: 80, protocol: HTTP}]\n    endpoints: &e\n      - address: 10.0.0.1\n  - name: m\n    ports: *p\n    # y\n  - name: b\n    ports: *p\n    endpoints: *e\n",
		},
		// An endpoint that is an alias has its Origin at the alias: a
		// definer whose alias moves to another line, its anchor's node
		// staying where it was, changes what its users show.
		"endpoint alias moves": {
			"services:\n  - name: c\n" + p + "    endpoints: [&x {address: 10.0.0.3}]\n" +
				"  - name: d\n" + p + "    endpoints: &e [{address: 10.0.0.2},\n      *x]\n    # c\n" +
				"  - name: u\n" + p + "    endpoints: *e\n",
			"services:\n  - name: c\n" + p + "    endpoints: [&x {address: 10.0.0.3}]\n" +
				"  - name: d\n" + p + "    endpoints: &e [{address: 10.0.0.2},\n\n      *x]\n" +
				"  - name: u\n" + p + "    endpoints: *e\n",
		},
		// One edit moves the definer a line down and the services after it
		// a line up: the user stays on its line, its endpoint (the
		// definer's) does not.
		"definer moves, user stays": {
			"services:\n  - name: c\n" + p + "  - name: d\n" + p + "    endpoints: &e\n      - address: 10.0.0.2\n" +
				"  - name: m\n    # m\n" + p + "  - name: u\n" + p + "    endpoints: *e\n",
			"services:\n  - name: c\n    # c\n" + p + "  - name: d\n" + p + "    endpoints: &e\n      - address: 10.0.0.2\n" +
				"  - name: m\n" + p + "  - name: u\n" + p + "    endpoints: *e\n",
		},
		"crlf": {
			strings.ReplaceAll("services:\n"+svcPorts("a", port("&h ", 80))+svcPorts("b", "*h"), "\n", "\r\n"),
			strings.ReplaceAll("services:\n"+svcPorts("a", port("&h ", 81))+svcPorts("b", "*h"), "\n", "\r\n"),
			strings.ReplaceAll("services:\n"+svcPorts("a", port("&h ", 81))+"\n"+svcPorts("b", "*h"), "\n", "\r\n"),
		},
		"invalid and back": {
			"services:\n" + svcPorts("a", port("&h ", 80)) + svcPorts("b", "*h"),
			"services:\n" + svcPorts("a", port("", 80)) + svcPorts("b", "*h"),
			"services:\n" + svcPorts("a", port("&h ", 80)) + svcPorts("b", "*h"),
			"services:\n" + svcPorts("a", port("&h ", 80)) + svcPorts("b", "*hh"),
			"services:\n" + svcPorts("a", port("&h ", 80)) + svcPorts("b", "*h"),
		},
	}
	for name, files := range cases {
		t.Run(name, func(t *testing.T) {
			readsMatchParse(t, files...)
		})
	}
}

// budgetFile is a file whose first service defines endpoints (eps, each
// with the labels, of which there are labels) that each of users takes:
// each user's alias expands to eps*labels values.
func budgetFile(labels, eps, users int) string {
	var b strings.Builder
	b.WriteString("services:\n  - name: def\n    ports: &p [{name: http, port: 80, protocol: HTTP}]\n    endpoints: &e\n      - address: 10.0.0.1\n        labels: &l {")
	for i := range labels {
		fmt.Fprintf(&b, "k%d: v,", i)
	}
	b.WriteString("}\n")
	for i := range eps {
		fmt.Fprintf(&b, "      - {address: 10.0.1.%d, labels: *l}\n", i)
	}
	for i := range users {
		fmt.Fprintf(&b, "  - name: u%d\n    ports: *p\n    endpoints: *e\n", i)
	}
	return b.String()
}

// TestAnchorReviewValueBudget: the full parse rejects a file that expands
// to more values than yamlconf.MaxValues of its size; a file whose every
// service is within it parsed with its definer, but not the file, is
// rejected the same (it was accepted), as users are added one by one and
// removed again, and whatever the definer's size.
func TestAnchorReviewValueBudget(t *testing.T) {
	t.Parallel()
	var files []string
	for _, labels := range []int{100, 101} {
		for n := 12; n <= 24; n++ {
			files = append(files, budgetFile(labels, 30, n))
		}
		for n := 23; n >= 12; n-- {
			files = append(files, budgetFile(labels, 30, n))
		}
	}
	_, rejected := readsMatchParse(t, files...)
	if rejected == 0 || rejected == len(files) {
		t.Fatalf("%d of %d reads rejected: the files do not cross the limit", rejected, len(files))
	}
}

// chainFile is n services each of which takes labels from the one before
// (*a<i-1>) and defines its own (&a<i>); edited's label differs.
func chainFile(n, edited int) string {
	var b strings.Builder
	b.WriteString("services:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: s%d\n    ports: [{name: http, port: 80, protocol: HTTP}]\n    endpoints:\n", i)
		if i > 0 {
			fmt.Fprintf(&b, "      - {address: 10.0.%d.%d, labels: *a%d}\n", i/250, i%250, i-1)
		}
		v := 0
		if i == edited {
			v = 1
		}
		fmt.Fprintf(&b, "      - {address: 10.1.%d.%d, labels: &a%d {v: \"%d\"}}\n", i/250, i%250, i, v)
	}
	return b.String()
}

// TestAnchorReviewChainWork: in a chain of services each taking an anchor
// from the one before, parsing each after all those before it would cost
// n²/2 service parses on a first read and n for an edit of the last; the
// file takes the full parse instead, after at most a bounded number of
// parses (counted, not timed).
func TestAnchorReviewChainWork(t *testing.T) {
	t.Parallel()
	const n = 400
	files := []string{chainFile(n, -1), chainFile(n, n-1), chainFile(n, n/2), chainFile(n, 3)}
	w, _ := readsMatchParse(t, files...)
	// Each read: the full parse (n) and the ranged parses tried before it.
	if max := uint64(len(files) * (n + 2*maxContext*maxContext)); w.parsed.Load() > max {
		t.Errorf("%d reads parsed %d services, want at most %d", len(files), w.parsed.Load(), max)
	}
}
