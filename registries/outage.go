package registries

import (
	"errors"
	"time"
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
// type for it: clusters.yaml decodes it, the aggregator applies it.
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
		errs = append(errs, FieldErr("policy", "unknown outage policy %q (want keep or expire)", o.Policy))
	}
	if o.ExpireAfter <= 0 {
		errs = append(errs, FieldErr("expireAfter", "must be positive"))
	}
	return errors.Join(errs...)
}
