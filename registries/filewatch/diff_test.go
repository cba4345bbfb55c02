package filewatch

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestDiffEdits: what a read finds chunk by chunk (differ, readEdit) is
// the Edit that Diff finds comparing whole, and Diff's head and tail are
// the longest: on random edits at the very start, the very end and in
// between, files that grow, shrink or stay the size, empty files, files
// shorter than one chunk, and chunks of every size.
func TestDiffEdits(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(22, 1))
	// Few distinct bytes, so that heads and tails run past the edit by
	// chance.
	pool := make([]byte, 4*readChunk)
	for i := range pool {
		pool[i] = "ab\n"[rnd.IntN(3)]
	}
	randBytes := func(n int) []byte {
		at := rnd.IntN(len(pool) - n + 1)
		return slices.Clone(pool[at : at+n])
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	var buf []byte
	for step := range 2000 {
		var prev []byte
		switch step % 4 {
		case 0:
			prev = randBytes(rnd.IntN(20))
		case 1, 2:
			prev = randBytes(rnd.IntN(3 * cmpBlock))
		default:
			prev = randBytes(rnd.IntN(3 * readChunk))
		}
		data := slices.Clone(prev)
		for range 1 + rnd.IntN(3) {
			at := 0 // the very start
			switch rnd.IntN(4) {
			case 0:
				at = len(data) // the very end
			case 1, 2:
				at = rnd.IntN(len(data) + 1)
			}
			cut := min(rnd.IntN(8), len(data)-at)
			data = slices.Replace(data, at, at+cut, randBytes(rnd.IntN(8))...)
		}
		if rnd.IntN(10) == 0 {
			data = slices.Clone(prev)
		}
		if rnd.IntN(20) == 0 {
			data = nil
		}
		want := Diff(prev, data)
		p, q := want.Prefix, want.Suffix
		if p+q > min(len(prev), len(data)) || !bytes.Equal(prev[:p], data[:p]) || !bytes.Equal(prev[len(prev)-q:], data[len(data)-q:]) ||
			(p < min(len(prev), len(data)) && prev[p] == data[p]) ||
			(p+q < min(len(prev), len(data)) && prev[len(prev)-q-1] == data[len(data)-q-1]) {
			t.Fatalf("step %d: Diff of %d → %d bytes: head %d, tail %d: not the longest common head and tail", step, len(prev), len(data), p, q)
		}
		// Fed in chunks of random sizes, as reads return them.
		d := newDiffer(prev, len(data))
		for from := 0; from < len(data); {
			to := min(len(data), from+1+rnd.IntN(2*cmpBlock))
			if rnd.IntN(3) == 0 {
				to = min(len(data), from+readChunk)
			}
			d.add(data[:to], from)
			from = to
		}
		if got := d.edit(data); got.Prefix != p || got.Suffix != q {
			t.Fatalf("step %d: %d → %d bytes in chunks: head %d, tail %d, want %d, %d", step, len(prev), len(data), got.Prefix, got.Suffix, p, q)
		}
		if step%4 == 3 || step%40 == 0 {
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			got, e, err := readEdit(path, buf, prev, int64(len(data)))
			if err != nil || !bytes.Equal(got, data) || e.Prefix != p || e.Suffix != q {
				t.Fatalf("step %d: readEdit: %d bytes, head %d, tail %d, %v; want %d bytes, %d, %d", step, len(got), e.Prefix, e.Suffix, err, len(data), p, q)
			}
			buf = got
		}
	}
}

// TestReadEditWrongSize: a file whose size is not the one stat gave is
// read whole all the same, and its Edit is Diff's.
func TestReadEditWrongSize(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "f")
	prev := bytes.Repeat([]byte("abc\n"), 100000)
	data := slices.Concat(prev[:1000], []byte("x"), prev[1000:])
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{0, 10, int64(len(data)) - 1, int64(len(data)) + 1, 2 * int64(len(data))} {
		got, e, err := readEdit(path, nil, prev, size)
		want := Diff(prev, data)
		if err != nil || !bytes.Equal(got, data) || e.Prefix != want.Prefix || e.Suffix != want.Suffix {
			t.Errorf("size %d: %d bytes, head %d, tail %d, %v; want %d bytes, %d, %d", size, len(got), e.Prefix, e.Suffix, err, len(data), want.Prefix, want.Suffix)
		}
	}
}

// FuzzDiff: fed in chunks of any size, the differ finds Diff's Edit.
func FuzzDiff(f *testing.F) {
	f.Add([]byte("abc\nabc\n"), []byte("abc\nabd\nabc\n"), uint16(3))
	f.Add([]byte(""), []byte("x"), uint16(1))
	f.Add([]byte("aaaa"), []byte("aa"), uint16(7))
	f.Fuzz(func(t *testing.T, prev, data []byte, chunk uint16) {
		want := Diff(prev, data)
		d := newDiffer(prev, len(data))
		for from := 0; from < len(data); {
			to := min(len(data), from+1+int(chunk))
			d.add(data[:to], from)
			from = to
		}
		if got := d.edit(data); got.Prefix != want.Prefix || got.Suffix != want.Suffix {
			t.Fatalf("%q → %q in chunks of %d: head %d, tail %d, want %d, %d", prev, data, chunk+1, got.Prefix, got.Suffix, want.Prefix, want.Suffix)
		}
	})
}
