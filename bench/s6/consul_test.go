package s6

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/consul"
	"github.com/meshfed/meshfed/test/servers"
)

// The consul row: a real Consul agent holding 1,000 services × 10
// instances (catalog registrations); each write is an agent registration
// of one more instance of svc-0.
func init() {
	rows = append(rows, bench.S6Row{Name: "consul", Goal: 50 * time.Millisecond, Setup: consulSetup,
		Note: "1,000 services × 10 instances; one agent service registration per write"})
}

const consulServices, consulInstances = 1000, 10

func consulSetup(t testing.TB) bench.S6Target {
	agent := servers.StartConsul(t, servers.ConsulOptions{Dev: true, MaxConnsPerClient: 4096})
	agent.RegisterBulk(t, consulServices, consulInstances, 32)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cl, err := api.NewClient(&api.Config{Address: agent.HTTPAddr, HttpClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	c := registries.Common{Name: "dc1", Kind: "consul", Domain: "consul"}
	reg := newRegistry(t, &consul.Config{Address: agent.HTTPAddr, MaxConcurrentWatches: consulServices + 100}, c)
	addr := func(n int) string { return fmt.Sprintf("10.8.%d.%d", n/250, n%250+1) }
	return bench.S6Target{Registry: reg, Common: c, Host: "svc-0.consul",
		Write: func(_ context.Context, n int) (bench.S6Change, error) {
			err := cl.Agent().ServiceRegister(&api.AgentServiceRegistration{
				ID: fmt.Sprintf("bench-%d", n), Name: "svc-0", Address: addr(n), Port: 1000,
			})
			return bench.S6Change{Host: "svc-0.consul", Address: addr(n)}, err
		}}
}
