package registries

import (
	"cmp"
	"maps"
	"slices"
)

// Platforms whose instances each state their own port or protocol (Consul,
// Eureka, ZooKeeper) derive a service's port from what most of its
// instances say; the helpers below make that choice the same everywhere.

// Majority returns the key with the most votes, the smallest on a tie; def
// if there are no votes.
func Majority[K cmp.Ordered](votes map[K]int, def K) K {
	best, n := def, 0
	for k, v := range votes {
		if v > n || (v == n && k < best) {
			best, n = k, v
		}
	}
	return best
}

// Ranked returns the keys by votes, most first, smaller first on a tie:
// Ranked(votes)[0] is Majority(votes, _). Callers that cannot take the
// majority (the number is taken by another port) take the next.
func Ranked[K cmp.Ordered](votes map[K]int) []K {
	keys := slices.Collect(maps.Keys(votes))
	slices.SortFunc(keys, func(a, b K) int { return cmp.Or(cmp.Compare(votes[b], votes[a]), cmp.Compare(a, b)) })
	return keys
}
