package file

import (
	"fmt"
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

// anchorService is the text of a service that defines or takes the
// anchors p (ports), l (labels) and e (endpoints), by kind.
func anchorService(name string, kind, v int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  - name: %s\n", name)
	switch kind % 3 {
	case 0:
		fmt.Fprintf(&b, "    ports: &p\n      - {name: http, port: %d, protocol: HTTP}\n", 80+v%50)
	default:
		b.WriteString("    ports: *p\n")
	}
	switch kind % 5 {
	case 0:
		fmt.Fprintf(&b, "    endpoints: &e\n      - {address: 10.1.%d.1, labels: &l {v: \"%d\"}}\n\n      - address: 10.1.%d.2\n", v%250, v, v%250)
	case 1:
		b.WriteString("    endpoints: *e\n")
	case 2:
		fmt.Fprintf(&b, "    # v%d\n    endpoints:\n      - {address: 10.2.%d.1, labels: *l}\n", v, v%250)
	default:
		fmt.Fprintf(&b, "    endpoints:\n      - {address: 10.3.%d.1, labels: {v: x}}\n", v%250)
	}
	return b.String()
}

// TestAnchorEditChains: a file whose services take anchors from earlier
// ones, edited at random (a value an anchor holds, a service added,
// removed or moved to other lines, an alias retargeted, a definition
// removed), read as the Watch reads it gives what the full parse gives
// after every edit, errors included.
func TestAnchorEditChains(t *testing.T) {
	t.Parallel()
	for seed := range uint64(24) {
		rnd := rand.New(rand.NewPCG(seed, 99))
		// With an even seed the first service, which defines every
		// anchor, stays: every file is valid. With an odd one it may go.
		lo := int(seed % 2)
		pick := func(n int) int { return 1 - lo + rnd.IntN(n-1+lo) }
		type svc struct{ kind, v int }
		var list []svc
		list = append(list, svc{0, 0})
		for i := 1; i < 40; i++ {
			list = append(list, svc{rnd.IntN(15), i})
		}
		render := func() []byte {
			var b strings.Builder
			b.WriteString("services:\n")
			for i, s := range list {
				b.WriteString(anchorService(fmt.Sprintf("s%d", i), s.kind, s.v))
			}
			return []byte(b.String())
		}
		cache := &itemCache{}
		var w work
		var data []byte
		for step := range 150 {
			switch op := rnd.IntN(6); op {
			case 0, 1: // a value changed (an anchor's, when the service defines one)
				i := rnd.IntN(len(list))
				list[i].v += 1 + rnd.IntN(7)
			case 2: // a service added
				i := pick(len(list) + 1)
				list = slices.Insert(list, i, svc{rnd.IntN(15), rnd.IntN(1000)})
			case 3: // a service removed (perhaps a definition taken later)
				if len(list) > 2 {
					i := pick(len(list))
					list = slices.Delete(list, i, i+1)
				}
			case 4: // what a service defines or takes changed
				i := pick(len(list))
				list[i].kind = rnd.IntN(15)
			case 5: // a comment line added to a service: those after it move
				i := pick(len(list))
				list[i].kind, list[i].v = 2, list[i].v+1000
			}
			prev := data
			data = render()
			items, err := parseItems("s.yaml", data, filewatch.Diff(prev, data), vms, cache, &w)
			want, wantErr := Parse("s.yaml", data, vms)
			if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
				t.Fatalf("seed %d, step %d: error %v, want %v:\n%s", seed, step, err, wantErr, data)
			}
			if err != nil {
				continue
			}
			if diff := cmp.Diff(want, services(items)); diff != "" {
				t.Fatalf("seed %d, step %d: differs from the full parse (-full +ranges):\n%s\n%s", seed, step, diff, data)
			}
		}
		if w.cut.Load() == 0 || lo == 0 && w.whole.Load() > 0 {
			t.Errorf("seed %d: %d ranges cut, %d full parses of valid files", seed, w.cut.Load(), w.whole.Load())
		}
	}
}

// TestAnchorEditWork: in a file of 300 services that take their ports
// and labels from anchors (services 0 and 150 define them), an edit of
// one service that takes them parses it with the service defining them
// and converts and compares it alone, as does an edit of service 0 outside
// what its anchors hold; an edit of what service 0's anchor
// holds converts and compares the services that take it from service 0
// (1-149), not those that take it from service 150.
func TestAnchorEditWork(t *testing.T) {
	t.Parallel()
	const n = 300
	gen := func(port, edited int) []byte {
		var b strings.Builder
		b.WriteString("services:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - name: svc-%d\n", i)
			if i%150 == 0 {
				p := 8080 + i
				if i == 0 {
					p = port
				}
				addr := addrOf(i, 0)
				if i == edited {
					addr = "10.99.0.1"
				}
				fmt.Fprintf(&b, "    ports: &p [{name: http, port: %d, protocol: HTTP}]\n    endpoints:\n      - {address: %s, labels: &l {team: \"t%d\"}}\n", p, addr, i)
				continue
			}
			addr := addrOf(i, 0)
			if i == edited {
				addr = "10.99.0.1"
			}
			fmt.Fprintf(&b, "    ports: *p\n    endpoints:\n      - {address: %s, labels: *l}\n", addr)
		}
		return []byte(b.String())
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "services.yaml")
	write := func(data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(gen(8080, -1))
	r, sink, loop := loopOver(t, dir)
	loop.Reload(true)
	// A service that takes anchors is parsed with service 0 or 150 (two
	// services), after a try alone for the first of a run.
	p0, c0, k0 := r.Work()
	if c0 != n || k0 != n || p0 > 2*n+4 {
		t.Fatalf("first read: parsed %d, converted %d, compared %d; want at most %d parsed, %d converted and compared", p0, c0, k0, 2*n+4, n)
	}
	if r.work.whole.Load() != 0 {
		t.Fatal("the first read took the full parse")
	}
	check := func(what string, wantConv uint64, host string, ok func(s model.Service) bool) {
		t.Helper()
		p0, c0, k0 := r.Work()
		loop.Reload(true)
		p1, c1, k1 := r.Work()
		if c1-c0 != wantConv || k1-k0 != wantConv || p1-p0 > 3*wantConv || r.work.whole.Load() != 0 {
			t.Errorf("%s: parsed %d, converted %d, compared %d, full parses %d; want %d converted and compared, at most 3 parsed per service, no full parse",
				what, p1-p0, c1-c0, k1-k0, r.work.whole.Load(), wantConv)
		}
		got, _, _ := sink.Last(vms.Shard())
		want, err := Parse("services.yaml", mustRead(t, path), vms)
		if err != nil {
			t.Fatal(err)
		}
		byHost := func(a, b model.Service) int { return strings.Compare(a.Hostname, b.Hostname) }
		slices.SortFunc(want, byHost)
		got = slices.SortedFunc(slices.Values(got), byHost)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: published differs from the full parse (-full +published):\n%s", what, diff)
		}
		if s, found := registrytest.Find(got, host); !found || !ok(s) {
			t.Errorf("%s: %s is %+v", what, host, s)
		}
	}
	write(gen(8080, 77))
	check("an edit of service 77", 1, "svc-77.vm.internal", func(s model.Service) bool {
		return s.Endpoints[0].Address == "10.99.0.1" && s.Ports[0].Number == 8080 && s.Endpoints[0].Labels["team"] == "t0"
	})
	write(gen(8080, 0))
	// Service 0 edited, service 77 back as it was: two services.
	check("an edit of service 0 outside its anchors", 2, "svc-0.vm.internal", func(s model.Service) bool { return s.Endpoints[0].Address == "10.99.0.1" })
	write(gen(9090, 0))
	check("service 0's anchor", 150, "svc-149.vm.internal", func(s model.Service) bool { return s.Ports[0].Number == 9090 })
	if s, _ := registrytest.Find(mustLast(sink), "svc-151.vm.internal"); s.Ports[0].Number != 8230 {
		t.Errorf("svc-151 takes its ports from service 150: %+v", s.Ports)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustLast(sink *registrytest.Sink) []model.Service {
	got, _, _ := sink.Last(vms.Shard())
	return got
}
