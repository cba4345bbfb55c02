package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// zkConn is one ZooKeeper session shared by the two layouts' kinds. The
// instances are persistent znodes (a provider's ephemeral node would leave
// with the churn generator's session when the server is killed, which is
// a removal the truth did not make); go-zookeeper reconnects by itself.
type zkConn struct {
	addr string
	mu   sync.Mutex
	conn *zk.Conn
}

func (z *zkConn) get() (*zk.Conn, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.conn != nil {
		return z.conn, nil // go-zookeeper reconnects (and renews an expired session) by itself
	}
	c, _, err := zk.Connect([]string{z.addr}, 10*time.Second, zk.WithLogger(quiet{}))
	if err != nil {
		return nil, err
	}
	z.conn = c
	return c, nil
}

func (z *zkConn) close() {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.conn != nil {
		z.conn.Close()
		z.conn = nil
	}
}

// ensure creates path and its parents (persistent, empty).
func ensure(c *zk.Conn, path string) error {
	for i := 1; i <= len(path); i++ {
		if i == len(path) || path[i] == '/' {
			if _, err := c.Create(path[:i], nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return err
			}
		}
	}
	return nil
}

// putNode creates or overwrites a persistent znode.
func (z *zkConn) putNode(path string, data []byte) error {
	c, err := z.get()
	if err != nil {
		return err
	}
	dir := path[:lastSlash(path)]
	if err := ensure(c, dir); err != nil {
		return err
	}
	_, err = c.Create(path, data, 0, zk.WorldACL(zk.PermAll))
	if errors.Is(err, zk.ErrNodeExists) {
		_, err = c.Set(path, data, -1)
	}
	return err
}

func (z *zkConn) deleteNode(path string) error {
	c, err := z.get()
	if err != nil {
		return err
	}
	if err := c.Delete(path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	return nil
}

func lastSlash(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return i
		}
	}
	return 0
}

// zkBounds: ZooKeeper watches fire at once and meshfed publishes a few
// milliseconds after a burst (docs/registries/zookeeper.md); Push 10s is
// that with slack. Heal adds the session's reconnect with backoff (up to
// 15s) and the re-read of the whole tree.
var zkBounds = Bounds{Push: 10 * time.Second, Heal: 45 * time.Second}

// curatorKind writes Curator ServiceDiscovery instances (Spring Cloud
// Zookeeper): <root>/<service>/<id>, health as enabled/instance_status.
type curatorKind struct{ z *zkConn }

func (k *curatorKind) Name() string { return "zk-curator" }
func (k *curatorKind) Entry() string {
	return fmt.Sprintf("{name: zk-curator, kind: zookeeper, domain: zk, zookeeper: {servers: [%q], layout: curator, root: /services, sessionTimeout: 4s}}", k.z.addr)
}
func (k *curatorKind) Host(svc int) string { return fmt.Sprintf("z%d.zk", svc) }
func (k *curatorKind) Port(svc int) int    { return 8200 + svc }
func (k *curatorKind) Bounds() Bounds      { return zkBounds }

func (k *curatorKind) path(in Instance) string {
	return fmt.Sprintf("/services/z%d/i-%d", in.Svc, in.ID)
}

func (k *curatorKind) write(in Instance) error {
	status := "UP"
	if !in.Healthy {
		status = "OUT_OF_SERVICE"
	}
	data, err := json.Marshal(map[string]any{
		"name": fmt.Sprintf("z%d", in.Svc), "id": fmt.Sprintf("i-%d", in.ID), "address": in.IP, "port": in.Port, "sslPort": nil,
		"payload": map[string]any{
			"@class":   "org.springframework.cloud.zookeeper.discovery.ZookeeperInstance",
			"id":       fmt.Sprintf("z%d-%d", in.Svc, in.ID),
			"name":     fmt.Sprintf("z%d", in.Svc),
			"metadata": map[string]string{"instance_status": status},
		},
		"registrationTimeUTC": 1700000000000, "serviceType": "DYNAMIC",
	})
	if err != nil {
		return err
	}
	return k.z.putNode(k.path(in), data)
}

func (k *curatorKind) Add(_ context.Context, in Instance) error       { return k.write(in) }
func (k *curatorKind) SetHealth(_ context.Context, in Instance) error { return k.write(in) }
func (k *curatorKind) Remove(_ context.Context, in Instance) error    { return k.z.deleteNode(k.path(in)) }

// Bad writes an instance whose data is not JSON: quarantined alone.
func (k *curatorKind) Bad(_ context.Context, on bool) error {
	if on {
		return k.z.putNode("/services/z0/bad", []byte("{not json"))
	}
	return k.z.deleteNode("/services/z0/bad")
}

// dubboKind writes Dubbo providers: <root>/<interface>/providers/<encoded
// URL>; health is the URL's enabled parameter, so a flip replaces the
// znode (delete and create in one multi, as a provider's re-export).
type dubboKind struct {
	z  *zkConn
	mu sync.Mutex
	at map[int]string // instance → its current znode
}

func (k *dubboKind) Name() string { return "zk-dubbo" }
func (k *dubboKind) Entry() string {
	return fmt.Sprintf("{name: zk-dubbo, kind: zookeeper, domain: dubbo, zookeeper: {servers: [%q], layout: dubbo, root: /dubbo, sessionTimeout: 4s}}", k.z.addr)
}

// Host: com.chaos.D<n> reversed → d<n>.chaos.com.dubbo.
func (k *dubboKind) Host(svc int) string { return fmt.Sprintf("d%d.chaos.com.dubbo", svc) }
func (k *dubboKind) Port(svc int) int    { return 8300 + svc }
func (k *dubboKind) Bounds() Bounds      { return zkBounds }

func (k *dubboKind) node(in Instance) string {
	iface := fmt.Sprintf("com.chaos.D%d", in.Svc)
	u := fmt.Sprintf("tri://%s:%d/%s?application=chaos&interface=%s&methods=Get&side=provider&enabled=%v&inst=%d",
		in.IP, in.Port, iface, iface, in.Healthy, in.ID)
	return fmt.Sprintf("/dubbo/%s/providers/%s", iface, url.QueryEscape(u))
}

func (k *dubboKind) Add(_ context.Context, in Instance) error {
	p := k.node(in)
	if err := k.z.putNode(p, nil); err != nil {
		return err
	}
	k.mu.Lock()
	k.at[in.ID] = p
	k.mu.Unlock()
	return nil
}

func (k *dubboKind) SetHealth(_ context.Context, in Instance) error {
	k.mu.Lock()
	old := k.at[in.ID]
	k.mu.Unlock()
	p := k.node(in)
	if old == p {
		return nil
	}
	c, err := k.z.get()
	if err != nil {
		return err
	}
	if err := ensure(c, p[:lastSlash(p)]); err != nil {
		return err
	}
	ops := []any{&zk.CreateRequest{Path: p, Acl: zk.WorldACL(zk.PermAll)}}
	if old != "" {
		ops = append([]any{&zk.DeleteRequest{Path: old, Version: -1}}, ops...)
	}
	if _, err := c.Multi(ops...); err != nil {
		// A retry after a multi that was applied: the new node is there.
		if ok, _, _ := c.Exists(p); !ok {
			return err
		}
		_ = k.z.deleteNode(old)
	}
	k.mu.Lock()
	k.at[in.ID] = p
	k.mu.Unlock()
	return nil
}

func (k *dubboKind) Remove(_ context.Context, in Instance) error {
	k.mu.Lock()
	p := k.at[in.ID]
	k.mu.Unlock()
	if err := k.z.deleteNode(p); err != nil {
		return err
	}
	k.mu.Lock()
	delete(k.at, in.ID)
	k.mu.Unlock()
	return nil
}

// Bad writes a provider URL that does not parse: quarantined alone.
func (k *dubboKind) Bad(_ context.Context, on bool) error {
	p := "/dubbo/com.chaos.D0/providers/" + url.QueryEscape("tri://%zz:bad/com.chaos.D0")
	if on {
		return k.z.putNode(p, nil)
	}
	return k.z.deleteNode(p)
}

// quiet drops go-zookeeper's log lines (its reconnects while the server is
// killed on purpose).
type quiet struct{}

func (quiet) Printf(string, ...any) {}
