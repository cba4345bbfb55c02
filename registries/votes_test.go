package registries

import (
	"slices"
	"testing"
)

func TestMajorityAndRanked(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		votes      map[uint32]int
		wantMajor  uint32
		wantRanked []uint32
	}{
		{name: "no votes: the default", votes: nil, wantMajor: 7, wantRanked: []uint32{}},
		{name: "one key", votes: map[uint32]int{8080: 3}, wantMajor: 8080, wantRanked: []uint32{8080}},
		{name: "most votes win", votes: map[uint32]int{80: 1, 8080: 3, 9090: 2}, wantMajor: 8080, wantRanked: []uint32{8080, 9090, 80}},
		{name: "tie: the smallest", votes: map[uint32]int{9090: 2, 8080: 2, 80: 1}, wantMajor: 8080, wantRanked: []uint32{8080, 9090, 80}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Majority(tc.votes, 7); got != tc.wantMajor {
				t.Errorf("Majority = %d, want %d", got, tc.wantMajor)
			}
			if got := Ranked(tc.votes); !slices.Equal(got, tc.wantRanked) {
				t.Errorf("Ranked = %v, want %v", got, tc.wantRanked)
			}
		})
	}
}
