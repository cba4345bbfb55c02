package s6

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/zookeeper"
	"github.com/meshfed/meshfed/test/servers"
)

// KS rows of the zookeeper registry, one per layout: a real ZooKeeper
// holding services services of zkPerService ephemeral instances each, as
// Curator's ServiceDiscovery (JSON instance znodes under
// /services/<name>) or Dubbo's ZookeeperRegistry (provider URLs under
// /dubbo/<interface>/providers) writes them; the registry at its
// defaults. Each change registers one more instance of one service, a
// different service each time.
func init() {
	for _, layout := range []zookeeper.Layout{zookeeper.LayoutCurator, zookeeper.LayoutDubbo} {
		kindScaleRows = append(kindScaleRows, bench.KindScaleRow{Kind: "zookeeper-" + string(layout), Goal: 50 * time.Millisecond,
			Setup: func(t testing.TB, services int) bench.KindScaleTarget { return zkScaleSetup(t, layout, services) },
			Note:  "registries/zookeeper at its defaults (" + string(layout) + " layout)"})
	}
}

// zkPerService is the instances per service of the fixture.
const zkPerService = 10

// zkLoaders are the sessions (and zkLoaders×16 goroutines) loading the
// fixture: requests on one session are pipelined.
const zkLoaders = 4

// zkConnect opens a session and waits for it; closed in t.Cleanup.
func zkConnect(t testing.TB, addr string) *zk.Conn {
	conn, events, err := zk.Connect([]string{addr}, 30*time.Second, zk.WithLogger(zkQuiet{}), zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		for range events {
		}
	})
	deadline := time.After(time.Minute)
	for session := false; !session; {
		select {
		case ev := <-events:
			session = ev.State == zk.StateHasSession
		case <-deadline:
			t.Fatal("no ZooKeeper session within a minute")
		}
	}
	go func() { // keep the channel drained
		for range events {
		}
	}()
	return conn
}

// zkAddr is the address of instance k of service s (k ≥ zkPerService:
// the changes').
func zkAddr(s, k int) string {
	i := s*64 + k
	return fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
}

func zkScaleSetup(t testing.TB, layout zookeeper.Layout, services int) bench.KindScaleTarget {
	// A tree of 10,000 services × 10 instances is ~100 MB of heap in
	// ZooKeeper; servers.StartZooKeeper's JVM has 256 MB.
	z := servers.StartZooKeeper(t)
	conns := make([]*zk.Conn, zkLoaders)
	for i := range conns {
		conns[i] = zkConnect(t, z.Addr())
	}
	acl := zk.WorldACL(zk.PermAll)
	root := zookeeper.DefaultCuratorRoot
	if layout == zookeeper.LayoutDubbo {
		root = zookeeper.DefaultDubboRoot
	}
	// dir is the znode holding service s's instances; host its hostname.
	dir := func(s int) string {
		if layout == zookeeper.LayoutDubbo {
			return root + "/" + url.QueryEscape(fmt.Sprintf("com.example.bench.Service%d", s)) + "/providers"
		}
		return fmt.Sprintf("%s/svc-%d", root, s)
	}
	host := func(s int) string {
		if layout == zookeeper.LayoutDubbo {
			return fmt.Sprintf("service%d.bench.example.com.zk", s)
		}
		return fmt.Sprintf("svc-%d.zk", s)
	}
	// instance returns the znode name and data of instance k of service s.
	instance := func(s, k int) (string, []byte) {
		addr := zkAddr(s, k)
		if layout == zookeeper.LayoutDubbo {
			iface := fmt.Sprintf("com.example.bench.Service%d", s)
			u := fmt.Sprintf("tri://%s:50051/%s?anyhost=true&application=bench-%d&interface=%s&methods=get,put&pid=%d&side=provider&timestamp=%d",
				addr, iface, s, iface, 1000+k, time.Now().UnixMilli())
			return url.QueryEscape(u), []byte(addr)
		}
		id := fmt.Sprintf("%08x-%04x", s, k)
		return id, fmt.Appendf(nil, `{"name":"svc-%d","id":%q,"address":%q,"port":8080,"sslPort":null,`+
			`"payload":{"@class":"org.springframework.cloud.zookeeper.discovery.ZookeeperInstance","id":"svc-%d-%s","name":"svc-%d","metadata":{"version":"v1","instance_status":"UP"}},`+
			`"registrationTimeUTC":%d,"serviceType":"DYNAMIC","uriSpec":{"parts":[{"value":"scheme","variable":true},{"value":"://","variable":false},{"value":"address","variable":true},{"value":":","variable":false},{"value":"port","variable":true}]},"enabled":true}`,
			s, id, addr, s, id, s, time.Now().UnixMilli())
	}
	create := func(c *zk.Conn, p string, data []byte, flags int32) error {
		_, err := c.Create(p, data, flags, acl)
		if errors.Is(err, zk.ErrNodeExists) {
			return nil
		}
		return err
	}
	t0 := time.Now()
	if err := create(conns[0], root, nil, zk.FlagPersistent); err != nil {
		t.Fatal(err)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for g := range zkLoaders * 16 {
		c := conns[g%zkLoaders]
		wg.Go(func() {
			for s := int(next.Add(1)) - 1; s < services; s = int(next.Add(1)) - 1 {
				d := dir(s)
				if layout == zookeeper.LayoutDubbo {
					if err := create(c, d[:len(d)-len("/providers")], nil, zk.FlagPersistent); err != nil {
						select {
						case errs <- err:
						default:
						}
						return
					}
				}
				if err := create(c, d, nil, zk.FlagPersistent); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
				for k := range zkPerService {
					name, data := instance(s, k)
					if err := create(c, d+"/"+name, data, zk.FlagEphemeral); err != nil {
						select {
						case errs <- err:
						default:
						}
						return
					}
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("loading the fixture: %v", err)
	default:
	}
	load := time.Since(t0)

	c := registries.Common{Name: "zk", Kind: "zookeeper", Domain: "zk"}
	reg := newRegistry(t, &zookeeper.Config{Servers: []string{z.Addr()}, Layout: layout}, c)
	return bench.KindScaleTarget{Load: load, Services: services, Endpoints: services * zkPerService, Run: bench.RegistryRun(reg),
		Note: fmt.Sprintf("fixture: %d services × %d ephemeral instance znodes, written by %d sessions", services, zkPerService, zkLoaders),
		Change: func(_ context.Context, n int) (bench.ScaleChange, error) {
			s := (n * 7919) % services
			name, data := instance(s, zkPerService+n)
			err := create(conns[0], dir(s)+"/"+name, data, zk.FlagEphemeral)
			return bench.ScaleChange{Host: host(s), Value: zkAddr(s, zkPerService+n)}, err
		}}
}
