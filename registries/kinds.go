package registries

import (
	"fmt"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Kind describes one registry kind: its clusters.yaml name and block, its
// metrics and its capabilities. Each platform package registers its Kind
// from an init function; registries/install imports every platform
// package, so adding a kind is one new package plus one import line there
// (docs/architecture.md §3.2).
type Kind struct {
	// Name is the `kind:` value and the key of its block (`kind: consul`
	// takes a `consul:` block).
	Name string
	// NewConfig returns a new, empty block; its New is the kind's factory.
	NewConfig func() Config
	// Collectors are the kind's Prometheus metrics, registered once by the
	// wiring. Nil for none.
	Collectors func() []prometheus.Collector
	// Multicluster: registries of this kind that name the same domain form
	// one multicluster set whose same-named services merge their endpoints
	// (each keeping its cluster, network and locality), instead of being an
	// overlap error and a duplicate conflict.
	Multicluster bool
}

var (
	kindsMu sync.RWMutex
	kinds   = map[string]Kind{}
)

// Register adds a kind. It panics on an empty name, a nil NewConfig or a
// name registered twice: those are programming errors of the build.
func Register(k Kind) {
	if k.Name == "" || k.NewConfig == nil {
		panic(fmt.Sprintf("registries.Register: kind %q needs a name and NewConfig", k.Name))
	}
	kindsMu.Lock()
	defer kindsMu.Unlock()
	if _, dup := kinds[k.Name]; dup {
		panic(fmt.Sprintf("registries.Register: kind %q registered twice", k.Name))
	}
	kinds[k.Name] = k
}

// LookupKind returns the registered kind called name.
func LookupKind(name string) (Kind, bool) {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	k, ok := kinds[name]
	return k, ok
}

// KindNames returns the names of every registered kind, sorted.
func KindNames() []string {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	out := make([]string, 0, len(kinds))
	for n := range kinds {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// KindCollectors returns the metrics of every registered kind.
func KindCollectors() []prometheus.Collector {
	var out []prometheus.Collector
	for _, n := range KindNames() {
		k, _ := LookupKind(n)
		if k.Collectors != nil {
			out = append(out, k.Collectors()...)
		}
	}
	return out
}
