package s6

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/eureka"
	"github.com/meshfed/meshfed/test/servers"
)

// The eureka row (written with registries/eureka): Polaris serves the
// Eureka API and refreshes what it serves every second; each write
// registers one more instance of app BENCH.
func init() {
	rows = append(rows, bench.S6Row{Name: "eureka", Goal: time.Second + 50*time.Millisecond,
		Note: "pollInterval 1s; Polaris refreshes every 1s; goal = poll interval + 50 ms", Setup: eurekaSetup})
}

func eurekaSetup(t testing.TB) bench.S6Target {
	p := servers.StartPolaris(t)
	p.Register(t, servers.EurekaInstance{App: "BENCH", ID: "bench-0", IP: "10.9.0.1", Port: 8080})
	common := registries.Common{Name: "bench-eureka", Kind: "eureka", Domain: "eureka"}
	reg := newRegistry(t, &eureka.Config{URLs: []string{p.URL}, PollInterval: registries.Duration(time.Second)}, common)
	return bench.S6Target{Registry: reg, Common: common, Host: "bench.eureka", Write: func(_ context.Context, n int) (bench.S6Change, error) {
		ip := fmt.Sprintf("10.9.%d.%d", n/250+1, n%250+1)
		in := servers.EurekaInstance{App: "BENCH", ID: fmt.Sprintf("bench-%d", n), IP: ip, Port: 8080}.Fargo()
		return bench.S6Change{Host: "bench.eureka", Address: ip}, p.Conn().ReregisterInstance(in)
	}}
}
