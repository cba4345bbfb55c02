package federation

import (
	"github.com/meshfed/meshfed/aggregate"
)

// aggregateOptions turns an entry into what the aggregator needs to know
// about its registry.
func (r Registry) aggregateOptions() aggregate.RegistryOptions {
	return aggregate.RegistryOptions{
		Common:         r.Common(),
		Multicluster:   multicluster(r.Kind),
		Outage:         r.Outage,
		MaxDeleteRatio: r.maxDeleteRatio(),
	}
}

// maxDeleteRatio is the entry's ratio, defaulted.
func (r Registry) maxDeleteRatio() float64 {
	if r.MaxDeleteRatio == nil {
		return DefaultMaxDeleteRatio
	}
	return *r.MaxDeleteRatio
}
