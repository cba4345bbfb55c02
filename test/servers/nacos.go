package servers

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nacos-group/nacos-sdk-go/v2/clients"
	"github.com/nacos-group/nacos-sdk-go/v2/clients/naming_client"
	"github.com/nacos-group/nacos-sdk-go/v2/common/constant"
	"github.com/nacos-group/nacos-sdk-go/v2/common/logger"
	"github.com/nacos-group/nacos-sdk-go/v2/model"
	"github.com/nacos-group/nacos-sdk-go/v2/vo"
	"go.uber.org/goleak"
)

// NacosGRPCOffset is the distance of a Nacos server's gRPC port from its
// HTTP port.
const NacosGRPCOffset = 1000

// NacosClient is a Nacos 2.x SDK naming client (nacos-sdk-go, gRPC) as
// applications use it to register themselves.
type NacosClient struct {
	c naming_client.INamingClient
}

func init() {
	// The SDK's logger is process-wide and, unless set, writes files to
	// the first client's LogDir for every later client: discard instead.
	logger.SetLogger(discardLogger{})
}

type discardLogger struct{}

func (discardLogger) Info(...any)           {}
func (discardLogger) Warn(...any)           {}
func (discardLogger) Error(...any)          {}
func (discardLogger) Debug(...any)          {}
func (discardLogger) Infof(string, ...any)  {}
func (discardLogger) Warnf(string, ...any)  {}
func (discardLogger) Errorf(string, ...any) {}
func (discardLogger) Debugf(string, ...any) {}
func (discardLogger) Close() error          { return nil }

// NacosClient connects the Nacos SDK to the server's Nacos API in
// namespace ("" is public) and closes it in t.Cleanup. Its ephemeral
// instances live as long as the client's connection, as in Nacos. The SDK
// caches under t's temp dir; its log is discarded.
func (p *Polaris) NacosClient(t testing.TB, namespace string) *NacosClient {
	t.Helper()
	if p.NacosAddr == "" {
		t.Fatal("polaris started without WithNacos")
	}
	host, port, _ := net.SplitHostPort(p.NacosAddr)
	n, _ := strconv.Atoi(port)
	dir := t.TempDir()
	// The SDK keeps its connections in a process-wide map without a lock:
	// creating and closing clients from parallel tests races.
	sdkMu.Lock()
	defer sdkMu.Unlock()
	c, err := clients.NewNamingClient(vo.NacosClientParam{
		ClientConfig: &constant.ClientConfig{
			NamespaceId:          namespace,
			TimeoutMs:            5000,
			NotLoadCacheAtStart:  true,
			UpdateCacheWhenEmpty: true,
			CacheDir:             dir + "/cache",
		},
		ServerConfigs: []constant.ServerConfig{{IpAddr: host, Port: uint64(n), ContextPath: "/nacos", Scheme: "http"}},
	})
	if err != nil {
		t.Fatalf("nacos client: %v", err)
	}
	nc := &NacosClient{c: c}
	t.Cleanup(nc.Close)
	return nc
}

// IgnoreNacosSDK is the goleak option for what the Nacos SDK leaves behind
// after CloseClient (its UDP push receiver), for the TestMain of packages
// that use NacosClient.
func IgnoreNacosSDK() goleak.Option {
	return goleak.IgnoreAnyFunction("github.com/nacos-group/nacos-sdk-go/v2/clients/naming_client/naming_http.(*PushReceiver).handleClient")
}

// NacosInstance describes an instance to register.
type NacosInstance struct {
	Service, Group string // Group "" is DEFAULT_GROUP
	IP             string
	Port           int
	Weight         float64 // 0 is 1
	// Drained registers the instance with weight 0, which Nacos clients
	// send nothing to (meshfed: DRAINING). Unlike Unhealthy it lasts on
	// Polaris: Polaris binds an ephemeral instance's health to its
	// client's connection and turns healthy=false back to true within
	// about 3s while the connection lives.
	Drained    bool
	Unhealthy  bool
	Disabled   bool
	Cluster    string
	Metadata   map[string]string
	Persistent bool // registered as a persistent (not ephemeral) instance
}

// Register registers the instance, or updates it when it is registered
// already (new weight, health, metadata), as the SDK's UpdateInstance does.
func (c *NacosClient) Register(t testing.TB, in NacosInstance) {
	t.Helper()
	if err := c.Put(in); err != nil {
		t.Fatal(err)
	}
}

// Put is Register for callers without a testing.TB (benchmarks' writers).
func (c *NacosClient) Put(in NacosInstance) error {
	w := in.Weight
	switch {
	case in.Drained:
		w = 0
	case w == 0:
		w = 1
	}
	param := vo.RegisterInstanceParam{
		Ip: in.IP, Port: uint64(in.Port), Weight: w, Enable: !in.Disabled, Healthy: !in.Unhealthy,
		Metadata: in.Metadata, ClusterName: in.Cluster, ServiceName: in.Service, GroupName: in.Group,
		Ephemeral: !in.Persistent,
	}
	// A just-started server may refuse the first registrations (Polaris
	// answers "not ok" until its caches are loaded); clients retry.
	var err error
	for attempt := range 50 {
		var ok bool
		ok, err = c.c.RegisterInstance(param)
		if err == nil && ok {
			return nil
		}
		if attempt < 49 {
			time.Sleep(200 * time.Millisecond)
		}
	}
	return fmt.Errorf("nacos register %s %s:%d: refused for 10s: %v", in.Service, in.IP, in.Port, err)
}

// Deregister removes the instance.
func (c *NacosClient) Deregister(t testing.TB, in NacosInstance) {
	t.Helper()
	if err := c.Delete(in); err != nil {
		t.Fatal(err)
	}
}

// Delete is Deregister for callers without a testing.TB (a churn
// generator's goroutines).
func (c *NacosClient) Delete(in NacosInstance) error {
	ok, err := c.c.DeregisterInstance(vo.DeregisterInstanceParam{
		Ip: in.IP, Port: uint64(in.Port), Cluster: in.Cluster, ServiceName: in.Service, GroupName: in.Group,
		Ephemeral: !in.Persistent,
	})
	if err != nil || !ok {
		return fmt.Errorf("nacos deregister %s %s:%d: %v", in.Service, in.IP, in.Port, err)
	}
	return nil
}

// NacosHost is one instance as the server lists it.
type NacosHost struct {
	IP      string  `json:"ip"`
	Port    int     `json:"port"`
	Weight  float64 `json:"weight"`
	Healthy bool    `json:"healthy"`
}

// NacosHosts lists the enabled instances of a service (group "" is
// DEFAULT_GROUP) in the public namespace, healthy or not, through the
// Nacos 1.x HTTP API: what the server itself holds, whatever any
// subscriber was told.
func (p *Polaris) NacosHosts(ctx context.Context, service, group string) ([]NacosHost, error) {
	if group == "" {
		group = "DEFAULT_GROUP"
	}
	u := "http://" + p.NacosAddr + "/nacos/v1/ns/instance/list?healthyOnly=false&serviceName=" + url.QueryEscape(group+"@@"+service)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := noKeepAlive.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", u, resp.Status)
	}
	var ans struct {
		Hosts []NacosHost `json:"hosts"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		return nil, fmt.Errorf("%s: %v", u, err)
	}
	return ans.Hosts, nil
}

// NacosSubscribes reports whether the server answers a new SDK client's
// subscription (SubscribeServiceRequest over gRPC) within the client's 5s
// timeout. Polaris 1.18.1 stops answering them for good once a push goes
// unacknowledged for 5s (a subscriber that left during a hang): its
// InFlights.notifyOutDateInFlight deletes from a map it holds read-locked,
// a deadlock that then blocks every push and subscription; only a restart
// ends it.
func (p *Polaris) NacosSubscribes(t testing.TB) bool {
	t.Helper()
	c := p.NacosClient(t, "")
	defer c.Close()
	_, err := c.c.SelectAllInstances(vo.SelectAllInstancesParam{ServiceName: "meshfed-probe"})
	return err == nil
}

// Subscribe subscribes to service (DEFAULT_GROUP) and calls f with the
// IPs of its instances on each change the server pushes, as applications
// watch a service with the SDK.
func (c *NacosClient) Subscribe(service string, f func(ips []string)) error {
	return c.c.Subscribe(&vo.SubscribeParam{ServiceName: service, SubscribeCallback: func(ins []model.Instance, err error) {
		if err != nil {
			return
		}
		ips := make([]string, len(ins))
		for i := range ins {
			ips[i] = ins[i].Ip
		}
		f(ips)
	}})
}

// Close closes the client's connection: the server drops its ephemeral
// instances.
//
// nacos-sdk-go v2.3.5's CloseClient can block for good after its
// connection failed (Shutdown sends a connection event nobody receives
// any more): Close gives up waiting after 10s and leaves it blocked.
func (c *NacosClient) Close() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		sdkMu.Lock()
		defer sdkMu.Unlock()
		c.c.CloseClient()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

var sdkMu sync.Mutex
