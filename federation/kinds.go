package federation

import (
	"slices"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/consul"
	"github.com/meshfed/meshfed/registries/eureka"
	"github.com/meshfed/meshfed/registries/file"
	"github.com/meshfed/meshfed/registries/kube"
	"github.com/meshfed/meshfed/registries/nacos"
	"github.com/meshfed/meshfed/registries/zookeeper"
)

// kinds is THE kind→block table of this build: for each registry kind it
// returns a new, empty clusters.yaml block for that kind. The block key of
// a registry entry equals its kind (`kind: file` takes a `file:` block).
// Config.New of the block is the kind's factory.
//
// Adding a kind is one line here.
var kinds = map[string]func() registries.Config{
	"consul":     func() registries.Config { return new(consul.Config) },
	"eureka":     func() registries.Config { return new(eureka.Config) },
	"file":       func() registries.Config { return new(file.Config) },
	"kubernetes": func() registries.Config { return new(kube.Config) },
	"nacos":      func() registries.Config { return new(nacos.Config) },
	"zookeeper":  func() registries.Config { return new(zookeeper.Config) },
}

// schemaKinds are the kinds clusters.yaml v1 knows, whether or not this
// build supports them. Their block keys are recognized so that a registry
// of a kind missing from this build gets one clear error, not one per key.
var schemaKinds = []string{"consul", "eureka", "file", "kubernetes", "nacos", "zookeeper"}

// Kinds returns the registry kinds this build supports, sorted.
func Kinds() []string {
	out := make([]string, 0, len(kinds))
	for k := range kinds {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// blockKeys returns every key that may hold a kind block, sorted.
func blockKeys() []string {
	out := append([]string(nil), schemaKinds...)
	for k := range kinds {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
