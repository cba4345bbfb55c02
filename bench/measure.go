package bench

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

var seqKey = []byte(SeqLabel)

// MaxSeq returns the highest SeqLabel value in a serialized
// ClusterLoadAssignment, found by scanning the bytes for the label's map
// entry (key, then Value{string_value}) instead of decoding the message, so
// a single-core load generator keeps up. ok is false when none is present.
func MaxSeq(raw []byte) (seq int64, ok bool) {
	return maxAfter(raw, seqKey, parseSeqValue)
}

// maxAfter returns the highest value parse reads right after an occurrence
// of key in raw; ok is false when parse reads none.
func maxAfter(raw, key []byte, parse func([]byte) (int64, bool)) (seq int64, ok bool) {
	for {
		i := bytes.Index(raw, key)
		if i < 0 {
			return seq, ok
		}
		raw = raw[i+len(key):]
		v, good := parse(raw)
		if good && (!ok || v > seq) {
			seq, ok = v, true
		}
	}
}

// parseSeqValue reads `0x12 len 0x1a len digits` (map entry field 2, a
// google.protobuf.Value with string_value).
func parseSeqValue(b []byte) (int64, bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != 2 || typ != protowire.BytesType {
		return 0, false
	}
	val, n2 := protowire.ConsumeBytes(b[n:])
	if n2 < 0 {
		return 0, false
	}
	num, typ, n = protowire.ConsumeTag(val)
	if n < 0 || num != 3 || typ != protowire.BytesType {
		return 0, false
	}
	s, n2 := protowire.ConsumeBytes(val[n:])
	if n2 < 0 {
		return 0, false
	}
	v, err := strconv.ParseInt(string(s), 10, 64)
	return v, err == nil
}

// Summary is the distribution of one figure.
type Summary struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Summarize returns p50/p99/max of xs (nearest rank); zero for none.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return Summary{N: len(s), P50: rank(0.50), P99: rank(0.99), Max: s[len(s)-1]}
}

// Millis converts durations to float milliseconds.
func Millis(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	return out
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times (100 on Linux).
const clockTick = 100

// CPUTime returns the user+system CPU time pid has used, from
// /proc/<pid>/stat (10 ms resolution).
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after ')' are fixed.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad times", pid)
	}
	return time.Duration(ut+st) * time.Second / clockTick, nil
}

// Slope is the least-squares slope of ys over xs; 0 with fewer than two
// points or when every x is the same. The soak and the chaos run report
// resource growth with it.
func Slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// Mem returns the resident set size and its peak (VmRSS, VmHWM) of pid in
// bytes, from /proc/<pid>/status.
func Mem(pid int) (rss, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var dst *int64
		switch k {
		case "VmRSS":
			dst = &rss
		case "VmHWM":
			dst = &peak
		default:
			continue
		}
		f := strings.Fields(v)
		if len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			*dst = n * 1024
		}
	}
	return rss, peak, nil
}
