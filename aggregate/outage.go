package aggregate

import (
	"errors"
	"fmt"
	"time"

	"github.com/meshfed/meshfed/registries"
)

// Defaults of a registry's `outage:` block.
const (
	DefaultOutagePolicy = OutageKeep
	DefaultExpireAfter  = 10 * time.Minute
)

// OutagePolicy says what happens to a Stale registry's endpoints.
type OutagePolicy string

// Outage policies.
const (
	// OutageKeep keeps serving a Stale registry's last endpoints, flagged.
	OutageKeep OutagePolicy = "keep"
	// OutageExpire withdraws a Stale registry's endpoints until it syncs
	// again.
	OutageExpire OutagePolicy = "expire"
)

// Outage is a registry's `outage:` block, its freshness policy: what
// happens to its endpoints while its backend is unreachable. It is the one
// type for it: clusters.yaml decodes it (federation), the aggregator
// applies it; registries know nothing of it.
type Outage struct {
	// Policy is keep (default) or expire.
	Policy OutagePolicy `yaml:"policy"`
	// ExpireAfter is how long a registry may be Degraded before it is
	// Stale. Default 10m.
	ExpireAfter time.Duration `yaml:"expireAfter"`
}

// ApplyDefaults fills unset fields: policy keep, expireAfter 10m.
func (o *Outage) ApplyDefaults() {
	if o.Policy == "" {
		o.Policy = DefaultOutagePolicy
	}
	if o.ExpireAfter <= 0 {
		o.ExpireAfter = DefaultExpireAfter
	}
}

// Validate checks o after defaults.
func (o *Outage) Validate() error {
	var errs []error
	switch o.Policy {
	case OutageKeep, OutageExpire:
	default:
		errs = append(errs, registries.FieldErr("policy", "unknown outage policy %q (want keep or expire)", o.Policy))
	}
	if o.ExpireAfter <= 0 {
		errs = append(errs, registries.FieldErr("expireAfter", "must be positive"))
	}
	return errors.Join(errs...)
}

// State is a registry's health as shown on /healthz/registries.
type State int

// States, all derived by the aggregator from the registry's Updates:
// Starting (no state received yet), Synced (its latest update had a
// healthy backend), Degraded (its backend fails: the last good state stays
// served), Stale (Degraded longer than the outage window), Failed (its Run
// ended with a Permanent error, or it could not be built) and Held
// (Synced, but its latest update would drop more than maxDeleteRatio of
// its endpoints and is held back; the previous state is served until it
// is confirmed, times out or is released).
const (
	Starting State = iota
	Synced
	Degraded
	Stale
	Failed
	Held
)

var stateNames = [...]string{"Starting", "Synced", "Degraded", "Stale", "Failed", "Held"}

// AllStates lists every State, for one-hot metrics.
var AllStates = []State{Starting, Synced, Degraded, Stale, Failed, Held}

func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "Unknown"
}

// MarshalText writes the state's name, for JSON.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a state's name, as MarshalText writes it.
func (s *State) UnmarshalText(b []byte) error {
	for i, n := range stateNames {
		if n == string(b) {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("unknown registry state %q", b)
}
