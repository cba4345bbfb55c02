package registries

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
)

func same(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func TestLabelSetsShare(t *testing.T) {
	t.Parallel()
	var s LabelSets
	a := s.Share(map[string]string{"version": "v1", "zone": "a"})
	b := s.Share(map[string]string{"zone": "a", "version": "v1"})
	if !same(a, b) {
		t.Error("two equal sets: got two maps, want one shared")
	}
	// Sums of pair hashes must not make unequal sets equal.
	for _, m := range []map[string]string{
		{"version": "v1"},
		{"version": "v1", "zone": "b"},
		{"version": "v1", "zone": "a", "x": ""},
		{"version": "v1\x00zone", "a": ""},
		{"zone": "v1", "version": "a"},
	} {
		if got := s.Share(m); same(got, a) || !reflect.DeepEqual(got, m) {
			t.Errorf("Share(%v) = %v, the shared %v: want its own", m, got, a)
		}
	}
	if s.Share(nil) != nil || s.Share(map[string]string{}) != nil {
		t.Error("an empty set: want nil")
	}
}

func TestLabelSetsBounded(t *testing.T) {
	t.Parallel()
	s := LabelSets{Max: 100}
	first := s.Share(map[string]string{"k": "0"})
	for i := range 1000 {
		s.Share(map[string]string{"k": fmt.Sprint(i)})
		if s.n > 100 {
			t.Fatalf("after %d sets it holds %d, want at most Max 100", i+1, s.n)
		}
	}
	if got := s.Share(map[string]string{"k": "0"}); got["k"] != "0" {
		t.Errorf("after starting over: %v, want k=0", got)
	}
	if first["k"] != "0" {
		t.Errorf("a map handed out changed: %v", first)
	}
}

func TestLabelSetsConcurrent(t *testing.T) {
	t.Parallel()
	var s LabelSets
	var wg sync.WaitGroup
	got := make([]map[string]string, 8)
	for i := range got {
		wg.Go(func() {
			for range 100 {
				got[i] = s.Share(map[string]string{"app": "billing", "side": "provider"})
			}
		})
	}
	wg.Wait()
	for _, m := range got[1:] {
		if !same(m, got[0]) {
			t.Fatal("goroutines sharing one set got different maps")
		}
	}
}
