package model

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestNextEqualsNewSnapshot: over random sequences of changes (replaced,
// removed and added hostnames, before, between and after the runs), a
// snapshot made by Next lists, counts and finds the same services as one
// built from scratch.
func TestNextEqualsNewSnapshot(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 3))
			host := func(i int) string { return fmt.Sprintf("h%05d.example", i) }
			span := 2000
			cur := map[string]*Service{}
			for i := 0; i < span; i += 1 + rng.IntN(3) {
				cur[host(i)] = &Service{Hostname: host(i)}
			}
			snap := NewSnapshot(1, slices.Collect(maps.Values(cur)))
			for v := uint64(2); v < 300; v++ {
				changed := map[string]bool{}
				n := 1 + rng.IntN(5)
				if rng.IntN(10) == 0 {
					n = 600 // a change large enough to split runs
				}
				for range n {
					h := host(rng.IntN(span))
					changed[h] = true
					if _, ok := cur[h]; ok && rng.IntN(2) == 0 {
						delete(cur, h)
					} else {
						cur[h] = &Service{Hostname: h, Ports: []Port{{Number: uint32(v)}}}
					}
				}
				snap = snap.Next(v, slices.Sorted(maps.Keys(changed)), func(h string) *Service { return cur[h] })
				want := NewSnapshot(v, slices.Collect(maps.Values(cur)))
				if snap.Len() != want.Len() || !slices.Equal(snap.Services(), want.Services()) {
					t.Fatalf("version %d: %d services, want %d", v, snap.Len(), want.Len())
				}
				for range 20 {
					h := host(rng.IntN(span + 10))
					got, ok := snap.Service(h)
					if w := cur[h]; got != w || ok != (w != nil) {
						t.Fatalf("version %d: Service(%s) = %v, %v; want %v", v, h, got, ok, w)
					}
				}
				for _, c := range snap.chunks {
					if len(c) == 0 || len(c) > 2*chunkSize {
						t.Fatalf("version %d: a run of %d services", v, len(c))
					}
				}
			}
		})
	}
}

// TestNextCopiesOneRun counts it: with 10,000 services, a change of one
// service makes a snapshot that shares every run but the one holding it.
func TestNextCopiesOneRun(t *testing.T) {
	t.Parallel()
	list := make([]*Service, 10000)
	for i := range list {
		list[i] = &Service{Hostname: fmt.Sprintf("s%05d.example", i)}
	}
	prev := NewSortedSnapshot(1, list)
	changed := &Service{Hostname: list[5000].Hostname, Ports: []Port{{Number: 80}}}
	next := prev.Next(2, []string{changed.Hostname}, func(string) *Service { return changed })
	if len(next.chunks) != len(prev.chunks) {
		t.Fatalf("%d runs, want %d", len(next.chunks), len(prev.chunks))
	}
	copied := 0
	for i := range next.chunks {
		if &next.chunks[i][0] != &prev.chunks[i][0] {
			copied++
		}
	}
	if got, _ := next.Service(changed.Hostname); copied != 1 || got != changed || next.Len() != 10000 {
		t.Errorf("%d runs copied (want 1); Service = %v, Len %d", copied, got, next.Len())
	}
}
