package s6

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/nacos"
	"github.com/meshfed/meshfed/test/servers"
)

// The nacos row (written with registries/nacos over Nacos 2.x gRPC):
// Polaris serves the Nacos API and turns its store into Nacos push data
// once a second; each write registers one more ephemeral instance of
// service bench through the Nacos SDK, and the registry gets it pushed.
func init() {
	rows = append(rows, bench.S6Row{Name: "nacos", Goal: time.Second + 50*time.Millisecond,
		Note: "gRPC push; Polaris builds Nacos push data every 1s (tail up to ~5s, measured before meshfed's sink); goal = 1s + 50 ms", Setup: nacosSetup})
}

func nacosSetup(t testing.TB) bench.S6Target {
	p := servers.StartPolaris(t, servers.WithNacos())
	c := p.NacosClient(t, "")
	c.Register(t, servers.NacosInstance{Service: "bench", IP: "10.10.0.1", Port: 8080})
	common := registries.Common{Name: "bench-nacos", Kind: "nacos", Domain: "nacos"}
	reg := newRegistry(t, &nacos.Config{Servers: []string{p.NacosAddr}, ListInterval: registries.Duration(time.Second)}, common)
	return bench.S6Target{Registry: reg, Common: common, Host: "bench.nacos", Write: func(_ context.Context, n int) (bench.S6Change, error) {
		ip := fmt.Sprintf("10.10.%d.%d", n/250+1, n%250+1)
		return bench.S6Change{Host: "bench.nacos", Address: ip}, c.Put(servers.NacosInstance{Service: "bench", IP: ip, Port: 8080})
	}}
}
