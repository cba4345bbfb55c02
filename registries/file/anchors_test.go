package file

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshfed/meshfed/registries/filewatch"
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
