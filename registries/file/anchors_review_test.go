package file

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
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
			t.Fatalf("read %d: error %v, want %v:\n%s\nafter:\n%s", i, err, wantErr, data, files[max(i-1, 0)])
		}
		if err != nil {
			rejected++
			continue
		}
		if got := services(items); !reflect.DeepEqual(want, got) {
			diff := cmp.Diff(want, got)
			t.Fatalf("read %d: differs from the full parse (-full +ranges):\n%s\n%s\nafter:\n%s", i, diff, data, files[max(i-1, 0)])
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
		// In flow form an endpoint taken from an earlier service has its
		// Origin there, not on the user's line.
		"flow endpoints taken": {
			"services: [\n  {name: a, ports: [{name: http, port: 81, protocol: HTTP}], endpoints: &e [{address: 10.1.1.2}]},\n" +
				"  {name: b, ports: [{name: http, port: 80, protocol: HTTP}], endpoints: *e},\n  {name: c,\n    # gap\n    ports: [{name: http, port: 80, protocol: HTTP}], endpoints: *e}\n]\n",
		},
		// Two services swapped around their definer, which stays where it
		// was: the user, its bytes unchanged, now comes before what it
		// takes, or takes it from another definition.
		"user moved before its definer": {
			"services:\n" + svcPorts("a", port("", 80)) + svcPorts("b", port("&h ", 81)) + svcPorts("c", "*h") + svcPorts("d", port("", 82)),
			"services:\n" + svcPorts("c", "*h") + svcPorts("b", port("&h ", 81)) + svcPorts("a", port("", 80)) + svcPorts("d", port("", 82)),
			"services:\n" + svcPorts("a", port("", 80)) + svcPorts("b", port("&h ", 81)) + svcPorts("c", "*h") + svcPorts("d", port("", 82)),
			"services:\n" + svcPorts("a", port("&h ", 79)) + svcPorts("b", port("&h ", 81)) + svcPorts("c", "*h") + svcPorts("d", port("", 82)),
			"services:\n" + svcPorts("a", port("&h ", 79)) + svcPorts("c", "*h") + svcPorts("b", port("&h ", 81)) + svcPorts("d", port("", 82)),
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

// reviewSvc is one service of TestAnchorReviewRandomEdits: which anchors
// it defines and takes, and where it has comment lines.
type reviewSvc struct {
	name                       int
	ports, eps, labels, member int // 0: own value; 1..3: define anchor k-1; 4..6: take anchor k-4
	v                          int // a value the anchors it defines hold
	gaps                       int // bit i: a comment line at place i
}

// reviewNames are the anchor names, odd characters included (the YAML
// scanner refuses "ü").
var reviewNames = []string{"a", "a.b", "a/b:1"}

func (s reviewSvc) render(b *strings.Builder, flow bool) {
	def := func(kind string, k int) string { return "&" + kind + reviewNames[k-1] + " " }
	use := func(kind string, k int) string { return "*" + kind + reviewNames[k-4] }
	gap := func(i int) {
		if s.gaps&(1<<i) != 0 {
			b.WriteString("\n    # gap\n   ")
		}
	}
	fmt.Fprintf(b, "{name: s%d,", s.name)
	gap(0)
	b.WriteString(" ports: ")
	switch {
	case s.ports >= 4:
		b.WriteString(use("p", s.ports))
	case s.ports >= 1:
		fmt.Fprintf(b, "%s[{name: http, port: %d, protocol: HTTP}]", def("p", s.ports), 80+s.v%7)
	default:
		b.WriteString("[{name: http, port: 80, protocol: HTTP}]")
	}
	b.WriteString(",")
	gap(1)
	labels := "{v: x}"
	switch {
	case s.labels >= 4:
		labels = use("l", s.labels)
	case s.labels >= 1:
		labels = fmt.Sprintf("%s{v: \"%d\"}", def("l", s.labels), s.v%5)
	}
	member := fmt.Sprintf("{address: 10.3.%d.1}", s.name%250)
	switch {
	case s.member >= 4:
		member = use("m", s.member)
	case s.member >= 1:
		member = fmt.Sprintf("%s{address: 10.4.%d.%d}", def("m", s.member), s.name%250, 1+s.v%3)
	}
	b.WriteString(" endpoints: ")
	switch {
	case s.eps >= 4:
		b.WriteString(use("e", s.eps))
	default:
		if s.eps >= 1 {
			b.WriteString(def("e", s.eps))
		}
		fmt.Fprintf(b, "[{address: 10.1.%d.%d, labels: %s},", s.name%250, 1+s.v%3, labels)
		gap(2)
		b.WriteString(" " + member)
		gap(3)
		b.WriteString("]")
	}
	b.WriteString("}")
	_ = flow
}

// TestAnchorReviewRandomEdits: files of services that define and take
// anchors of several names (ports, endpoints, labels, single endpoints),
// with comment lines that move what follows, in block and flow form,
// edited at random (a service changed, added, removed, two swapped, its
// comment lines changed, the file's line breaks changed), give what the
// full parse gives after every edit, errors included.
func TestAnchorReviewRandomEdits(t *testing.T) {
	t.Parallel()
	for seed := range uint64(reviewSeeds) {
		rnd := rand.New(rand.NewPCG(seed, 7))
		flow, crlf := seed%2 == 1, false
		kind := func() int {
			if rnd.IntN(3) == 0 {
				return 0
			}
			return 1 + rnd.IntN(6)
		}
		next := 0
		svc := func() reviewSvc {
			next++
			return reviewSvc{next, kind(), kind(), kind(), kind(), rnd.IntN(100), rnd.IntN(16)}
		}
		// Three services first define every anchor; edits seldom touch
		// them, so that most files are valid.
		var list []reviewSvc
		for k := 1; k <= 3; k++ {
			next++
			list = append(list, reviewSvc{next, k, k, k, k, 0, 0})
		}
		for range 12 {
			list = append(list, svc())
		}
		render := func() string {
			var b strings.Builder
			if flow {
				b.WriteString("services: [\n")
			} else {
				b.WriteString("services:\n")
			}
			for i, s := range list {
				if flow {
					b.WriteString("  ")
				} else {
					b.WriteString("  - ")
				}
				s.render(&b, flow)
				if flow && i < len(list)-1 {
					b.WriteString(",")
				}
				b.WriteString("\n")
			}
			if flow {
				b.WriteString("]\n")
			}
			out := b.String()
			if crlf {
				out = strings.ReplaceAll(out, "\n", "\r\n")
			}
			return out
		}
		files := []string{render()}
		for range 60 {
			i := rnd.IntN(len(list))
			if i < 3 && rnd.IntN(4) != 0 {
				i = 3 + rnd.IntN(len(list)-3)
			}
			switch rnd.IntN(8) {
			case 0, 1:
				list[i].v++
			case 2:
				list[i].ports, list[i].eps, list[i].labels, list[i].member = kind(), kind(), kind(), kind()
			case 3:
				list = slices.Insert(list, i, svc())
			case 4:
				if len(list) > 4 {
					list = slices.Delete(list, i, i+1)
				}
			case 5:
				j := rnd.IntN(len(list))
				if j < 3 && rnd.IntN(4) != 0 {
					j = 3 + rnd.IntN(len(list)-3)
				}
				list[i], list[j] = list[j], list[i]
			case 6:
				list[i].gaps = rnd.IntN(16)
			case 7:
				if rnd.IntN(4) == 0 {
					crlf = !crlf
				} else {
					list[i].gaps ^= 1 << rnd.IntN(4)
				}
			}
			files = append(files, render())
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			w, rejected := readsMatchParse(t, files...)
			t.Logf("%d reads, %d rejected, %d full parses, %d services parsed", len(files), rejected, w.whole.Load(), w.parsed.Load())
		})
	}
}

// reviewSeeds is how many files TestAnchorReviewRandomEdits edits (400
// were run once).
var reviewSeeds = 40

// sharedFile is n services that take their ports from the first
// (endpoints too, with takeEps), which has a comment line above its
// anchors with comment.
func sharedFile(n int, comment, takeEps bool) string {
	var b strings.Builder
	b.WriteString("services:\n  - name: s0\n")
	if comment {
		b.WriteString("    # what every service takes\n")
	}
	b.WriteString("    ports: &p [{name: http, port: 80, protocol: HTTP}]\n    endpoints: &e [{address: 10.0.0.1}]\n")
	for i := 1; i < n; i++ {
		eps := fmt.Sprintf("[{address: 10.1.%d.%d}]", i/250, i%250)
		if takeEps && i%2 == 0 {
			eps = "*e"
		}
		fmt.Fprintf(&b, "  - name: s%d\n    ports: *p\n    endpoints: %s\n", i, eps)
	}
	return b.String()
}

// TestAnchorReviewLineOnlyWork: a line added in the service defining the
// anchors, above them, moves what they hold without changing it: the
// services taking only ports are converted on their new lines, not
// parsed again; those taking endpoints, whose Origin is the definer's
// line, are (counted, not timed).
func TestAnchorReviewLineOnlyWork(t *testing.T) {
	t.Parallel()
	const n = 300
	for _, takeEps := range []bool{false, true} {
		w, _ := readsMatchParse(t, sharedFile(n, false, takeEps), sharedFile(n, true, takeEps), sharedFile(n, false, takeEps))
		// A first read parses each service after its definer (2 parses);
		// each edit parses the definer and the services taking endpoints
		// (half of them, with their definer) and converts every service.
		// (Those taking endpoints are converted on their new line, then
		// again once parsed.)
		want, conv := uint64(2*n+2*2), uint64(3*n)
		if takeEps {
			const foreign = (n - 1) / 2
			want += 2 * 2 * foreign
			conv += 2 * foreign
		}
		if w.parsed.Load() > want || w.converted.Load() != conv || w.whole.Load() != 0 {
			t.Errorf("endpoints taken %v: parsed %d, converted %d, full parses %d; want at most %d parsed, %d converted, none", takeEps, w.parsed.Load(), w.converted.Load(), w.whole.Load(), want, conv)
		}
	}
}
