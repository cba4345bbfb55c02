package bench

import (
	"fmt"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
)

// MemSplit is where a process's memory is, in bytes: the Go runtime's
// memory classes (runtime/metrics /memory/classes/*) and the kernel's
// split of the resident set (/proc/self/status). Read it right after
// ReadMem, so that the heap is swept and freed pages are returned.
type MemSplit struct {
	// Objects is heap memory occupied by objects; Unused the rest of the
	// heap's in-use spans (fragmentation: slots of freed objects in spans
	// that still hold live ones); Free heap pages free but not returned
	// to the OS; Stacks goroutine stacks; Metadata the runtime's own
	// (mspan, mcache, GC bitmaps and the rest of metadata/other);
	// Profiling profiling buckets; Other the runtime's remaining classes
	// (other, os-stacks).
	Objects   int64 `json:"objects"`
	Unused    int64 `json:"unused"`
	Free      int64 `json:"free"`
	Stacks    int64 `json:"stacks"`
	Metadata  int64 `json:"metadata"`
	Profiling int64 `json:"profiling"`
	Other     int64 `json:"other"`
	// RSSAnon and RSSFile are the resident set's anonymous pages (the Go
	// runtime's memory above, and any other anonymous mappings) and
	// file-backed pages (mostly the binary's code and read-only data,
	// paged in as code first runs).
	RSSAnon int64 `json:"rssAnon"`
	RSSFile int64 `json:"rssFile"`
}

// ReadMemSplit reads the process's MemSplit.
func ReadMemSplit() MemSplit {
	names := []string{
		"/memory/classes/heap/objects:bytes",
		"/memory/classes/heap/unused:bytes",
		"/memory/classes/heap/free:bytes",
		"/memory/classes/heap/stacks:bytes",
		"/memory/classes/metadata/mcache/free:bytes",
		"/memory/classes/metadata/mcache/inuse:bytes",
		"/memory/classes/metadata/mspan/free:bytes",
		"/memory/classes/metadata/mspan/inuse:bytes",
		"/memory/classes/metadata/other:bytes",
		"/memory/classes/profiling/buckets:bytes",
		"/memory/classes/other:bytes",
		"/memory/classes/os-stacks:bytes",
	}
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s)
	v := func(i int) int64 {
		if s[i].Value.Kind() == metrics.KindUint64 {
			return int64(s[i].Value.Uint64())
		}
		return 0
	}
	m := MemSplit{Objects: v(0), Unused: v(1), Free: v(2), Stacks: v(3),
		Metadata: v(4) + v(5) + v(6) + v(7) + v(8), Profiling: v(9), Other: v(10) + v(11)}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			k, val, _ := strings.Cut(line, ":")
			var dst *int64
			switch k {
			case "RssAnon":
				dst = &m.RSSAnon
			case "RssFile":
				dst = &m.RSSFile
			default:
				continue
			}
			if f := strings.Fields(val); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				*dst = n * 1024
			}
		}
	}
	return m
}

// Sub is m − o, class by class.
func (m MemSplit) Sub(o MemSplit) MemSplit {
	return MemSplit{Objects: m.Objects - o.Objects, Unused: m.Unused - o.Unused, Free: m.Free - o.Free,
		Stacks: m.Stacks - o.Stacks, Metadata: m.Metadata - o.Metadata, Profiling: m.Profiling - o.Profiling,
		Other: m.Other - o.Other, RSSAnon: m.RSSAnon - o.RSSAnon, RSSFile: m.RSSFile - o.RSSFile}
}

// String renders m in MB (10^6 bytes), the classes that hold more than
// 0.05 MB either way.
func (m MemSplit) String() string {
	var parts []string
	for _, c := range []struct {
		what string
		n    int64
	}{
		{"heap objects", m.Objects}, {"heap fragmentation (free slots of in-use spans)", m.Unused}, {"free heap not returned", m.Free},
		{"goroutine stacks", m.Stacks}, {"runtime metadata", m.Metadata}, {"profiling", m.Profiling}, {"other runtime", m.Other},
	} {
		if c.n >= 50_000 || c.n <= -50_000 {
			parts = append(parts, fmt.Sprintf("%s %.1f MB", c.what, float64(c.n)/1e6))
		}
	}
	return fmt.Sprintf("%s; resident anonymous %.1f MB, file-backed (code first run) %.1f MB",
		strings.Join(parts, ", "), float64(m.RSSAnon)/1e6, float64(m.RSSFile)/1e6)
}
