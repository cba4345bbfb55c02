// Package install registers every registry kind of this build: importing
// it (for its side effect) makes each platform package's init call
// registries.Register. Adding a kind is one import line here.
package install

import (
	_ "github.com/meshfed/meshfed/registries/consul"
	_ "github.com/meshfed/meshfed/registries/eureka"
	_ "github.com/meshfed/meshfed/registries/file"
	_ "github.com/meshfed/meshfed/registries/kube"
	_ "github.com/meshfed/meshfed/registries/nacos"
	_ "github.com/meshfed/meshfed/registries/serviceentry"
	_ "github.com/meshfed/meshfed/registries/zookeeper"
)
