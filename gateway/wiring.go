package gateway

import (
	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/config"
)

// aggregateOptions turns an entry into what the aggregator needs to know
// about its registry.
func aggregateOptions(r config.Registry) aggregate.RegistryOptions {
	return aggregate.RegistryOptions{
		Common:         r.Common(),
		Multicluster:   config.Multicluster(r.Kind),
		Outage:         r.Outage,
		MaxDeleteRatio: maxDeleteRatio(r),
		ExportTo:       r.ExportTo,
	}
}

// maxDeleteRatio is the entry's ratio, defaulted.
func maxDeleteRatio(r config.Registry) float64 {
	if r.MaxDeleteRatio == nil {
		return config.DefaultMaxDeleteRatio
	}
	return *r.MaxDeleteRatio
}
