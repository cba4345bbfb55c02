package aggregate

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"time"

	"github.com/meshfed/meshfed/model"
)

// Conflict categories.
const (
	// CategoryInvalid: a service, port or endpoint that breaks the model's
	// rules (bad hostname, address, port number, protocol...).
	CategoryInvalid = "invalid"
	// CategoryDuplicate: a second endpoint with the same address and ports,
	// a second port with the same name or number, a second service with the
	// same hostname in one registry, or a hostname also published by another
	// registry that does not merge with it.
	CategoryDuplicate = "duplicate"
	// CategoryDomain: a service outside its registry's domain.
	CategoryDomain = "domain"
	// CategoryPortMismatch: registries of a multicluster set publish one
	// hostname with different ports.
	CategoryPortMismatch = "port-mismatch"
	// CategoryResolutionMismatch: registries of a multicluster set publish
	// one hostname with different resolutions (EDS vs DNS).
	CategoryResolutionMismatch = "resolution-mismatch"
	// CategoryHoldDown: an update held back by maxDeleteRatio.
	CategoryHoldDown = "hold-down"
	// CategoryRegistry: an item the registry itself could not convert.
	CategoryRegistry = "registry"
)

// Conflict is one item kept out of the served model (or served only in
// part), as listed on /debug/conflictz.
type Conflict struct {
	model.Rejection
	// Category is one of the Category* constants.
	Category string
	// Since is when the conflict was first seen without interruption.
	Since time.Time
}

// MarshalJSON writes the conflict with camelCase keys: registry, host,
// subject, reason, category, since. Reasons keep their < > & verbatim
// (json.Marshal would write \u003e); an encoder that escapes HTML still
// escapes them.
func (c Conflict) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	err := enc.Encode(struct {
		Registry string    `json:"registry,omitempty"`
		Host     string    `json:"host,omitempty"`
		Subject  string    `json:"subject,omitempty"`
		Reason   string    `json:"reason"`
		Category string    `json:"category"`
		Since    time.Time `json:"since,omitzero"`
	}{c.Registry, c.Host, c.Subject, c.Reason, c.Category, c.Since})
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), err
}

func newConflict(category, registry, host, subject, reason string) Conflict {
	return Conflict{
		Rejection: model.Rejection{Registry: registry, Host: host, Subject: subject, Reason: reason},
		Category:  category,
	}
}

// conflictKey identifies a conflict across rebuilds, to keep its Since.
type conflictKey struct {
	model.Rejection
	Category string
}

func (c Conflict) key() conflictKey { return conflictKey{c.Rejection, c.Category} }

func compareConflicts(a, b Conflict) int {
	return cmp.Or(
		cmp.Compare(a.Registry, b.Registry),
		cmp.Compare(a.Host, b.Host),
		cmp.Compare(a.Category, b.Category),
		cmp.Compare(a.Subject, b.Subject),
		cmp.Compare(a.Reason, b.Reason),
	)
}

func sortConflicts(cs []Conflict) { slices.SortStableFunc(cs, compareConflicts) }
