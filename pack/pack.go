// Package pack keeps what a client decoded in few allocations.
package pack

import "strings"

// Strings makes the strings *ss point into one new allocation holding them
// all. A client decodes each object of a catalog into many small
// allocations, of which meshfed keeps a few strings (names, versions,
// addresses). Kept one by one, each keeps its allocator span alive among
// the decoded object's garbage, and the heap holds those spans mostly
// empty: before packing, the KS kubernetes row at 100,000 endpoints held
// 68 MB of such fragmentation beside 144 MB of live objects, after it
// 31 MB (bench/analysis.md). Packed, an object's kept strings are one
// allocation made after its decode. Measure before using it elsewhere:
// for the JSON-decoded Istio objects it made fragmentation worse.
//
// A packed string keeps the whole pack alive: pack only strings that
// live and die together (those of one object).
func Strings(ss ...*string) {
	n := 0
	for _, s := range ss {
		n += len(*s)
	}
	if n == 0 {
		return
	}
	var b strings.Builder
	b.Grow(n)
	for _, s := range ss {
		b.WriteString(*s)
	}
	all, off := b.String(), 0
	for _, s := range ss {
		l := len(*s)
		*s = all[off : off+l]
		off += l
	}
}
