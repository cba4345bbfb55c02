package s6

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/zookeeper"
	"github.com/meshfed/meshfed/test/servers"
)

// The zookeeper row: a real ZooKeeper; each write creates one ephemeral
// Curator instance znode under /services/bench, as Curator's
// ServiceDiscovery registers an instance.
func init() {
	rows = append(rows, bench.S6Row{Name: "zookeeper", Goal: 20 * time.Millisecond, Setup: zkSetup,
		Note: "Curator layout; one ephemeral znode create per write"})
}

type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

func zkSetup(t testing.TB) bench.S6Target {
	z := servers.StartZooKeeper(t)
	conn := zkConnect(t, z.Addr())
	acl := zk.WorldACL(zk.PermAll)
	for _, p := range []string{"/services", "/services/bench"} {
		if _, err := conn.Create(p, nil, zk.FlagPersistent, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
	}
	addr := func(n int) string { return fmt.Sprintf("10.7.%d.%d", n/250, n%250+1) }
	register := func(n int) error {
		id := fmt.Sprintf("bench-%d", n)
		data := fmt.Sprintf(`{"name":"bench","id":%q,"address":%q,"port":8080,"sslPort":null,"payload":null,`+
			`"registrationTimeUTC":%d,"serviceType":"DYNAMIC","uriSpec":null,"enabled":true}`, id, addr(n), time.Now().UnixMilli())
		_, err := conn.Create("/services/bench/"+id, []byte(data), zk.FlagEphemeral, acl)
		return err
	}
	if err := register(0); err != nil {
		t.Fatal(err)
	}
	c := registries.Common{Name: "dubbo", Kind: "zookeeper", Domain: "zk"}
	reg := newRegistry(t, &zookeeper.Config{Servers: []string{z.Addr()}}, c)
	return bench.S6Target{Registry: reg, Common: c, Host: "bench.zk",
		Write: func(_ context.Context, n int) (bench.S6Change, error) {
			return bench.S6Change{Host: "bench.zk", Address: addr(n)}, register(n)
		}}
}
