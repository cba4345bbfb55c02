package chaos

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshfed/meshfed/xds/translate"
)

// ADSClient is a raw ADS client acting as an Envoy sidecar: wildcard CDS
// and LDS, EDS for every EDS cluster, over SotW or delta. It validates
// every resource it receives (ValidateAll, as Envoy does) and NACKs one
// that fails, keeps what it holds across reconnects (delta: it names what
// it holds in initial_resource_versions, as Envoy does), and records every
// change of the endpoints it holds in the History.
type ADSClient struct {
	ID    string
	Delta bool
	Addr  string // meshfed's xDS address
	hist  *History
	// onNack is called with what a NACK rejected.
	onNack func(client, detail string)
	// watched says which hosts' endpoints are recorded (the churned ones:
	// Consul's own service, say, is not).
	watched func(host string) bool

	mu        sync.Mutex
	versions  map[string]map[string]string // type → name → version held (delta)
	clusters  map[string]bool              // EDS clusters held
	cla       map[string]map[string]bool   // cluster → ip:port → healthy
	cancel    context.CancelFunc           // ends the current session
	pause     time.Duration                // before the next session
	stall     chan struct{}                // closed when a stall ends; nil when not stalled
	downEnd   func()                       // closes the client's open Down interval
	sotwVer   map[string]string            // SotW: type → last version ACKed
	sotwNonce map[string]string            // SotW: type → last nonce received
	sessions  int
}

// NewADSClient returns a client; Run connects it.
func NewADSClient(id, addr string, delta bool, h *History, watched func(host string) bool, onNack func(client, detail string)) *ADSClient {
	c := &ADSClient{ID: id, Delta: delta, Addr: addr, hist: h, onNack: onNack, watched: watched,
		versions: map[string]map[string]string{}, clusters: map[string]bool{}, cla: map[string]map[string]bool{},
		sotwVer: map[string]string{}, sotwNonce: map[string]string{}}
	c.downEnd = h.Joins("client:" + id)
	return c
}

// Run keeps a session open until ctx ends, reconnecting after errors and
// after Disconnect.
func (c *ADSClient) Run(ctx context.Context) {
	conn, err := grpc.NewClient(c.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return
	}
	defer conn.Close()
	cl := discovery.NewAggregatedDiscoveryServiceClient(conn)
	for ctx.Err() == nil {
		sctx, cancel := context.WithCancel(ctx)
		c.mu.Lock()
		c.cancel = cancel
		c.sessions++
		c.mu.Unlock()
		if c.Delta {
			_ = c.delta(sctx, cl)
		} else {
			_ = c.sotw(sctx, cl)
		}
		cancel()
		c.mu.Lock()
		pause := c.pause
		c.pause = 0
		if c.downEnd == nil {
			c.downEnd = c.hist.Down("client:"+c.ID, "disconnected")
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(max(pause, 200*time.Millisecond)):
		}
	}
	c.mu.Lock()
	if c.downEnd != nil {
		c.downEnd()
		c.downEnd = nil
	}
	c.mu.Unlock()
}

// Disconnect ends the session; the client reconnects after d.
func (c *ADSClient) Disconnect(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.downEnd == nil {
		c.downEnd = c.hist.Down("client:"+c.ID, "disconnected")
	}
	c.pause = d
	if c.cancel != nil {
		c.cancel()
	}
}

// Stall stops reading responses for d (a proxy that hangs).
func (c *ADSClient) Stall(d time.Duration) {
	c.mu.Lock()
	if c.stall != nil {
		c.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	c.stall = ch
	end := c.hist.Down("client:"+c.ID, "stalled")
	c.mu.Unlock()
	time.AfterFunc(d, func() {
		c.mu.Lock()
		c.stall = nil
		c.mu.Unlock()
		close(ch)
		end()
	})
}

// waitStall blocks while the client is stalled.
func (c *ADSClient) waitStall(ctx context.Context) {
	c.mu.Lock()
	ch := c.stall
	c.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
}

// synced marks the client connected and current (its Down interval ends).
func (c *ADSClient) synced() {
	c.mu.Lock()
	if c.downEnd != nil {
		c.downEnd()
		c.downEnd = nil
	}
	c.mu.Unlock()
}

// Connected reports whether the client holds a current session.
func (c *ADSClient) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.downEnd == nil && c.stall == nil
}

// View returns the endpoints the client holds for hosts accepted by want.
func (c *ADSClient) View(want func(host string) bool) map[Key]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[Key]bool{}
	for name, eps := range c.cla {
		host, ok := plainClusterHost(name)
		if !ok || !want(host) {
			continue
		}
		for a, h := range eps {
			out[Key{host, a}] = h
		}
	}
	return out
}

// Name is the client's ID.
func (c *ADSClient) Name() string { return c.ID }

// Subscribes is true: the client holds every EDS cluster (wildcard CDS).
func (c *ADSClient) Subscribes(string) bool { return true }

// Sessions is how many sessions the client opened.
func (c *ADSClient) Sessions() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessions
}

func (c *ADSClient) node() *core.Node {
	return &core.Node{Id: fmt.Sprintf("sidecar~127.0.0.1~%s.chaos~chaos.svc.cluster.local", c.ID), Cluster: "chaos"}
}

// plainClusterHost returns the host of a cluster outbound|<port>||<host>
// (not a subset cluster).
func plainClusterHost(name string) (string, bool) {
	parts := strings.Split(name, "|")
	if len(parts) != 4 || parts[0] != "outbound" || parts[2] != "" {
		return "", false
	}
	return parts[3], true
}

// validate decodes and validates a resource of typ; it returns the EDS
// cluster name for a Cluster of type EDS, the CLA for an endpoint.
func validate(typ string, a *anypb.Any) (name string, edsCluster bool, cla *endpoint.ClusterLoadAssignment, err error) {
	switch typ {
	case translate.ClusterType:
		var m cluster.Cluster
		if err := proto.Unmarshal(a.GetValue(), &m); err != nil {
			return "", false, nil, err
		}
		return m.GetName(), m.GetType() == cluster.Cluster_EDS, nil, m.ValidateAll()
	case translate.EndpointType:
		var m endpoint.ClusterLoadAssignment
		if err := proto.Unmarshal(a.GetValue(), &m); err != nil {
			return "", false, nil, err
		}
		return m.GetClusterName(), false, &m, m.ValidateAll()
	case translate.ListenerType:
		var m listener.Listener
		if err := proto.Unmarshal(a.GetValue(), &m); err != nil {
			return "", false, nil, err
		}
		return m.GetName(), false, nil, m.ValidateAll()
	}
	return "", false, nil, nil
}

// endpointsOf returns ip:port → healthy of a CLA.
func endpointsOf(cla *endpoint.ClusterLoadAssignment) map[string]bool {
	out := map[string]bool{}
	for _, loc := range cla.GetEndpoints() {
		for _, lb := range loc.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			hs := lb.GetHealthStatus()
			out[net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue())))] = hs == core.HealthStatus_HEALTHY || hs == core.HealthStatus_UNKNOWN
		}
	}
	return out
}

// setCLA replaces what the client holds for cluster name (nil: removed) and
// records the changes; the caller holds c.mu.
func (c *ADSClient) setCLA(name string, eps map[string]bool) {
	old := c.cla[name]
	if eps == nil {
		delete(c.cla, name)
	} else {
		c.cla[name] = eps
	}
	host, ok := plainClusterHost(name)
	if !ok || !c.watched(host) {
		return
	}
	keys := func(eps map[string]bool) map[Key]bool {
		out := make(map[Key]bool, len(eps))
		for a, h := range eps {
			out[Key{host, a}] = h
		}
		return out
	}
	c.hist.Observe(diffObs(c.ID, time.Now(), keys(old), keys(eps), false)...)
}

func (c *ADSClient) sotw(ctx context.Context, cl discovery.AggregatedDiscoveryServiceClient) error {
	st, err := cl.StreamAggregatedResources(ctx, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	node := c.node()
	c.mu.Lock()
	held := slices.Sorted(maps.Keys(c.clusters))
	c.mu.Unlock()
	for _, typ := range []string{translate.ClusterType, translate.ListenerType} {
		if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: typ}); err != nil {
			return err
		}
		node = nil
	}
	edsNames := held
	if len(held) > 0 {
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: translate.EndpointType, ResourceNames: held}); err != nil {
			return err
		}
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		c.waitStall(ctx)
		typ := resp.GetTypeUrl()
		var bad []string
		names := map[string]bool{}
		clas := map[string]*endpoint.ClusterLoadAssignment{}
		for _, a := range resp.GetResources() {
			name, eds, cla, err := validate(typ, a)
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s %s: %v", typ, name, err))
				continue
			}
			if typ == translate.ClusterType && eds {
				names[name] = true
			}
			if cla != nil {
				clas[name] = cla
			}
		}
		req := &discovery.DiscoveryRequest{TypeUrl: typ, ResponseNonce: resp.GetNonce()}
		c.mu.Lock()
		c.sotwNonce[typ] = resp.GetNonce()
		if len(bad) > 0 {
			req.VersionInfo = c.sotwVer[typ]
			req.ErrorDetail = &status.Status{Code: 3, Message: strings.Join(bad, "; ")}
		} else {
			req.VersionInfo = resp.GetVersionInfo()
			c.sotwVer[typ] = resp.GetVersionInfo()
			switch typ {
			case translate.ClusterType:
				for n := range c.clusters {
					if !names[n] {
						delete(c.clusters, n)
						c.setCLA(n, nil)
					}
				}
				for n := range names {
					c.clusters[n] = true
				}
			case translate.EndpointType:
				for n, cla := range clas {
					if c.clusters[n] {
						c.setCLA(n, endpointsOf(cla))
					}
				}
			}
		}
		cur := slices.Sorted(maps.Keys(c.clusters))
		c.mu.Unlock()
		if typ == translate.EndpointType {
			req.ResourceNames = edsNames
		}
		if len(bad) > 0 && c.onNack != nil {
			c.onNack(c.ID, strings.Join(bad, "; "))
		}
		if err := st.Send(req); err != nil {
			return err
		}
		if typ == translate.ClusterType && len(bad) == 0 {
			if !slices.Equal(cur, edsNames) {
				edsNames = cur
				// A new subscription carries the last version and nonce of
				// its type, as Envoy sends it.
				ver, nonce := c.sotwLast(translate.EndpointType)
				if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: translate.EndpointType, ResourceNames: edsNames,
					VersionInfo: ver, ResponseNonce: nonce}); err != nil {
					return err
				}
			}
			c.synced()
		}
	}
}

func (c *ADSClient) sotwLast(typ string) (version, nonce string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sotwVer[typ], c.sotwNonce[typ]
}

func (c *ADSClient) delta(ctx context.Context, cl discovery.AggregatedDiscoveryServiceClient) error {
	st, err := cl.DeltaAggregatedResources(ctx, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	node := c.node()
	c.mu.Lock()
	initial := map[string]map[string]string{}
	for typ, vs := range c.versions {
		initial[typ] = maps.Clone(vs)
	}
	held := slices.Sorted(maps.Keys(c.clusters))
	c.mu.Unlock()
	for _, typ := range []string{translate.ClusterType, translate.ListenerType} {
		if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: typ, InitialResourceVersions: initial[typ]}); err != nil {
			return err
		}
		node = nil
	}
	subscribed := map[string]bool{}
	if len(held) > 0 {
		for _, n := range held {
			subscribed[n] = true
		}
		if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: translate.EndpointType, ResourceNamesSubscribe: held,
			InitialResourceVersions: initial[translate.EndpointType]}); err != nil {
			return err
		}
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		c.waitStall(ctx)
		typ := resp.GetTypeUrl()
		var bad []string
		type item struct {
			name, version string
			eds           bool
			cla           *endpoint.ClusterLoadAssignment
		}
		var items []item
		for _, r := range resp.GetResources() {
			name, eds, cla, err := validate(typ, r.GetResource())
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s %s: %v", typ, r.GetName(), err))
				continue
			}
			_ = name
			items = append(items, item{r.GetName(), r.GetVersion(), eds, cla})
		}
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: typ, ResponseNonce: resp.GetNonce()}
		var sub, unsub []string
		c.mu.Lock()
		if len(bad) > 0 {
			req.ErrorDetail = &status.Status{Code: 3, Message: strings.Join(bad, "; ")}
		} else {
			vs := c.versions[typ]
			if vs == nil {
				vs = map[string]string{}
				c.versions[typ] = vs
			}
			for _, it := range items {
				vs[it.name] = it.version
				switch typ {
				case translate.ClusterType:
					if it.eds {
						c.clusters[it.name] = true
						if !subscribed[it.name] {
							subscribed[it.name] = true
							sub = append(sub, it.name)
						}
					} else if c.clusters[it.name] {
						delete(c.clusters, it.name)
						c.setCLA(it.name, nil)
					}
				case translate.EndpointType:
					if c.clusters[it.name] {
						c.setCLA(it.name, endpointsOf(it.cla))
					}
				}
			}
			for _, n := range resp.GetRemovedResources() {
				delete(vs, n)
				switch typ {
				case translate.ClusterType:
					if c.clusters[n] {
						delete(c.clusters, n)
						c.setCLA(n, nil)
						delete(c.versions[translate.EndpointType], n)
					}
					if subscribed[n] {
						delete(subscribed, n)
						unsub = append(unsub, n)
					}
				case translate.EndpointType:
					if c.clusters[n] {
						c.setCLA(n, map[string]bool{})
					}
				}
			}
		}
		c.mu.Unlock()
		if len(bad) > 0 && c.onNack != nil {
			c.onNack(c.ID, strings.Join(bad, "; "))
		}
		if err := st.Send(req); err != nil {
			return err
		}
		if len(sub) > 0 || len(unsub) > 0 {
			if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: translate.EndpointType,
				ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub}); err != nil {
				return err
			}
		}
		if typ == translate.ClusterType && len(bad) == 0 {
			c.synced()
		}
	}
}
