package federation

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/registries/consul"
	"github.com/meshfed/meshfed/registries/eureka"
	"github.com/meshfed/meshfed/registries/file"
	"github.com/meshfed/meshfed/registries/kube"
	"github.com/meshfed/meshfed/registries/zookeeper"
)

// kindCollectors returns the metrics of every registry kind in this build.
func kindCollectors() []prometheus.Collector {
	return slices.Concat(file.Collectors(), consul.Collectors(), zookeeper.Collectors(), eureka.Collectors(), kube.Collectors())
}

// aggregateOptions turns an entry into what the aggregator needs to know
// about its registry.
func (r Registry) aggregateOptions() aggregate.RegistryOptions {
	return aggregate.RegistryOptions{
		Common:         r.Common(),
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
