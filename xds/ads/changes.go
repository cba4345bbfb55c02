package ads

import (
	"maps"
	"slices"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
)

// Class is the kind of xDS client a stream serves; Config.Classify decides
// it from the stream's first node. Each class reads its own collections,
// except the shared ones (Kind.Class "").
type Class string

// Kind names one collection of resources: a client class and a type URL.
// A collection with Class "" is shared by every class.
type Kind struct {
	Class   Class
	TypeURL string
}

// Change lists what changed in one collection: resources to add or
// replace, and names to delete.
type Change struct {
	Updated map[string]types.Resource
	Removed []string // sorted
}

// Changes holds the changes of one update per collection; collections
// without changes are absent. They are what Server.Apply installs.
type Changes map[Kind]*Change

func (c Changes) get(k Kind) *Change {
	ch := c[k]
	if ch == nil {
		ch = &Change{Updated: map[string]types.Resource{}}
		c[k] = ch
	}
	return ch
}

// Update records r as the new resource name of k.
func (c Changes) Update(k Kind, name string, r types.Resource) {
	ch := c.get(k)
	ch.Updated[name] = r
	ch.Removed = slices.DeleteFunc(ch.Removed, func(n string) bool { return n == name })
}

// Remove records that k no longer holds name.
func (c Changes) Remove(k Kind, name string) {
	ch := c.get(k)
	delete(ch.Updated, name)
	ch.Removed = append(ch.Removed, name)
}

// Names returns the names of updated and removed resources of k, sorted.
func (c Changes) Names(k Kind) (updated, removed []string) {
	ch := c[k]
	if ch == nil {
		return nil, nil
	}
	return slices.Sorted(maps.Keys(ch.Updated)), ch.Removed
}

// Collection describes one collection the server holds.
type Collection struct {
	Kind Kind
	// FullState: a SotW response carries every resource the subscription
	// matches, absence meaning removal (LDS, CDS, Istio's MCP
	// collections); otherwise only the changed ones (EDS, RDS).
	FullState bool
	// AnyTypeURL is the type URL of the Any that wraps each resource; ""
	// is Kind.TypeURL.
	AnyTypeURL string
}
