package filewatch

import (
	"bytes"
	"io"
	"os"
)

// Edit is how a file's bytes differ from those of its last parse, as a
// read with Watch.ParseEdit found it: the new bytes and Prev share their
// first Prefix bytes and, after those, their last Suffix bytes (Prefix +
// Suffix is at most the shorter's length); what lies between changed.
// Prev is nil when the file was not parsed before in this Run.
type Edit struct {
	Prev           []byte
	Prefix, Suffix int
}

// Diff returns the Edit that turns prev into data, comparing them whole:
// what a read with Watch.ParseEdit finds chunk by chunk (readEdit), for
// a caller whose last bytes are not the Watch's.
func Diff(prev, data []byte) Edit {
	p := commonPrefix(prev, data)
	return Edit{Prev: prev, Prefix: p, Suffix: commonSuffix(prev[p:], data[p:])}
}

// cmpBlock: bytes.Equal runs on blocks of this many bytes (memcmp speed)
// before a byte loop finds where two blocks differ.
const cmpBlock = 4096

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i+cmpBlock <= n && bytes.Equal(a[i:i+cmpBlock], b[i:i+cmpBlock]) {
		i += cmpBlock
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// commonSuffix is the length of the longest common suffix of a and b.
func commonSuffix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i+cmpBlock <= n && bytes.Equal(a[len(a)-i-cmpBlock:len(a)-i], b[len(b)-i-cmpBlock:len(b)-i]) {
		i += cmpBlock
	}
	for i < n && a[len(a)-1-i] == b[len(b)-1-i] {
		i++
	}
	return i
}

// lastDiff is the index of the last byte where a and b (of one length)
// differ, -1 if none.
func lastDiff(a, b []byte) int {
	for hi := len(a); hi > 0; {
		lo := max(hi-cmpBlock, 0)
		if !bytes.Equal(a[lo:hi], b[lo:hi]) {
			for i := hi - 1; ; i-- {
				if a[i] != b[i] {
					return i
				}
			}
		}
		hi = lo
	}
	return -1
}

// differ computes Diff(prev, data) as data arrives, in order, in one pass
// over each: data is expected to end up n bytes long (the size stat gave;
// a read of another length is discarded by the Watch, and then Diff
// answers). The common tail is found going forward: data[x] is matched
// with prev[x-(n-len(prev))], and the tail begins after the last byte
// that does not match (or has no partner after the head in prev).
type differ struct {
	prev     []byte
	n, delta int  // data's expected length, and n - len(prev)
	diverged bool // a byte of data differs from prev, or prev ended
	prefix   int  // the common head: final once diverged
	end      int  // once diverged: data[end:n] may be the common tail; data[end-1] is not in it (unless end is prefix)
	long     bool // data grew past n
}

func newDiffer(prev []byte, n int) *differ {
	return &differ{prev: prev, n: n, delta: n - len(prev)}
}

// add takes data, of which data[:from] was added before.
func (d *differ) add(data []byte, from int) {
	e := len(data)
	if e > d.n || d.long {
		d.long = true
		return
	}
	if !d.diverged {
		lim := min(e, len(d.prev))
		k := from
		if lim > from {
			k += commonPrefix(data[from:lim], d.prev[from:lim])
		}
		if k == e {
			d.prefix = e
			return
		}
		d.diverged, d.prefix, d.end, from = true, k, k, k
	}
	// Bytes before prefix+delta have no partner after the head in prev.
	lo := max(from, d.prefix+d.delta)
	if lo > from {
		d.end = max(d.end, min(lo, e))
	}
	if lo < e {
		if j := lastDiff(data[lo:e], d.prev[lo-d.delta:e-d.delta]); j >= 0 {
			d.end = max(d.end, lo+j+1)
		}
	}
}

// edit returns the Edit of data, all of which was added.
func (d *differ) edit(data []byte) Edit {
	switch {
	case len(data) != d.n || d.long:
		return Diff(d.prev, data)
	case !d.diverged:
		// data is a prefix of prev (or equal to it).
		return Edit{Prev: d.prev, Prefix: len(data)}
	}
	return Edit{Prev: d.prev, Prefix: d.prefix, Suffix: d.n - d.end}
}

// readChunk is how much readEdit reads at a time: small enough that the
// chunk is still in the CPU's cache (L2) when it is compared with prev,
// large enough that the read syscalls, and the Go runtime's handling of
// each (sysmon), cost little. KS file-flow-onefile at 10,000: 128 KB and
// 1 MB measured the same within noise, 512 KB slightly less
// (bench/analysis.md).
const readChunk = 512 << 10

// readEdit reads the file at p into buf (readBuffer; size: the file's
// size as stat reported it; a file that grew meanwhile is read to its end
// all the same) and returns how its bytes differ from prev: each chunk
// read is compared with prev while it is in the CPU's cache, so that
// reading an edited file and finding its edit is one pass over the file
// and one over prev, not a read and then up to two compares. prev nil
// compares nothing.
func readEdit(p string, buf, prev []byte, size int64) ([]byte, Edit, error) {
	f, err := os.Open(p)
	if err != nil {
		return buf, Edit{}, err
	}
	defer f.Close()
	buf = readBuffer(buf, size)
	d := newDiffer(prev, int(size))
	for {
		from := len(buf)
		n, err := f.Read(buf[from:min(from+readChunk, cap(buf))])
		buf = buf[:from+n]
		if prev != nil {
			d.add(buf, from)
		}
		if err == io.EOF {
			if prev == nil {
				return buf, Edit{}, nil
			}
			return buf, d.edit(buf), nil
		}
		if err != nil {
			return buf, Edit{}, err
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grew since stat
		}
	}
}

// readBuffer returns buf emptied when it holds a file of size bytes
// with one byte to spare (a read sees the end of the file without
// growing it) and is not much larger, else a new buffer with room for
// the file to grow a little: editing a large file usually changes its
// size by a few bytes, and a buffer allocated per edit of an 8 MB file
// would pace the GC (bench/analysis.md, "file-flow-onefile").
func readBuffer(buf []byte, size int64) []byte {
	n := int(size)
	if cap(buf) <= n || cap(buf) > 2*n+1<<16 {
		return make([]byte, 0, n+n/32+4096)
	}
	return buf[:0]
}
