package xds

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/ads"
	"github.com/meshfed/meshfed/xds/internal/testfixture"
	"github.com/meshfed/meshfed/xds/translate"
)

const (
	ordersCLA = "outbound|8080||orders.vm.internal"
	zzCluster = "outbound|6000||zz.vm.internal"
	zzLDS     = "0.0.0.0_6000"
)

// fixtureSnapshots returns the fixture, the fixture with one orders
// endpoint changed, and that plus a new TCP service zz on port 6000.
func fixtureSnapshots() (first, endpointChanged, withZZ *model.Snapshot) {
	svcs := testfixture.Services()
	o := testfixture.Orders()
	o.Endpoints[1].Health = model.Healthy
	changed := testfixture.Replace(svcs, "orders.vm.internal", o)
	zz := append(slices.Clone(changed), &model.Service{Hostname: "zz.vm.internal",
		Ports:     []model.Port{{Name: "tcp", Number: 6000, Protocol: model.ProtocolTCP}},
		Endpoints: []model.Endpoint{{Address: "10.0.9.9"}}})
	return model.NewSnapshot(1, slices.Clone(svcs)), model.NewSnapshot(2, changed), model.NewSnapshot(3, zz)
}

// envoySubscribe subscribes an Envoy-like client: wildcard CDS and LDS,
// named EDS and RDS (as Envoy derives them from clusters and listeners).
func envoySubscribe(c *adsClient, srv *Server) {
	srv.mu.RLock()
	clas := resourceNames(srv.Resources(translate.KindOf(translate.ClassEnvoy, translate.EndpointType)))
	routes := resourceNames(srv.Resources(translate.KindOf(translate.ClassEnvoy, translate.RouteType)))
	srv.mu.RUnlock()
	c.subscribe(translate.ClusterType)
	c.subscribe(translate.ListenerType)
	c.subscribe(translate.EndpointType, clas...)
	c.subscribe(translate.RouteType, routes...)
}

// servedEnvoy is a condition: the client holds every Envoy resource the
// server has now.
func servedEnvoy(srv *Server) func(map[string]map[string]proto.Message) bool {
	srv.mu.RLock()
	defer srv.mu.RUnlock()
	var conds []func(map[string]map[string]proto.Message) bool
	for _, url := range translate.TypeURLs {
		conds = append(conds, holds(url, resourceNames(srv.Resources(translate.KindOf(translate.ClassEnvoy, url)))...))
	}
	return all(conds...)
}

// hasCurrentCLA is a condition: the client holds the server's current
// orders CLA.
func hasCurrentCLA(srv *Server) func(map[string]map[string]proto.Message) bool {
	srv.mu.RLock()
	want := srv.Resources(translate.KindOf("", translate.EndpointType))[ordersCLA]
	srv.mu.RUnlock()
	return func(st map[string]map[string]proto.Message) bool {
		return proto.Equal(st[translate.EndpointType][ordersCLA], want)
	}
}

// holdsCurrent is a condition: the client holds every Envoy resource of
// typeURL the server has now.
func holdsCurrent(srv *Server, typeURL string) func(map[string]map[string]proto.Message) bool {
	srv.mu.RLock()
	defer srv.mu.RUnlock()
	return holds(typeURL, resourceNames(srv.Resources(translate.KindOf(translate.ClassEnvoy, typeURL)))...)
}

// synced reports whether every type of every stream of proxy id has
// acknowledged the last response sent.
func synced(srv *Server, id string) bool {
	for _, p := range srv.Proxies() {
		if p.ID != id {
			continue
		}
		if len(p.Types) != 4 {
			return false
		}
		for _, ts := range p.Types {
			if ts.SentNonce == "" || ts.AckedNonce != ts.SentNonce {
				return false
			}
		}
		return true
	}
	return false
}

func sameState(t *testing.T, a, b map[string]map[string]proto.Message) {
	t.Helper()
	for _, url := range translate.TypeURLs {
		if len(a[url]) != len(b[url]) {
			t.Errorf("%s: %d vs %d resources", url, len(a[url]), len(b[url]))
		}
		for n, r := range a[url] {
			if !proto.Equal(r, b[url][n]) {
				t.Errorf("%s %s differs between the clients", url, n)
			}
		}
	}
}

func TestDeltaAndSotwSeeSameResources(t *testing.T) {
	t.Parallel()
	srv := NewServer(Options{})
	first, changed, withZZ := fixtureSnapshots()
	srv.Update(first)
	addr := startServer(t, srv)

	const sotwID, deltaID = "sidecar~10.1.0.1~sotw~default.svc.cluster.local", "sidecar~10.1.0.2~delta~default.svc.cluster.local"
	sotw := dialADS(t, addr, envoyNode(sotwID), false)
	delta := dialADS(t, addr, envoyNode(deltaID), true)
	envoySubscribe(sotw, srv)
	envoySubscribe(delta, srv)
	sotw.until(servedEnvoy(srv), nil)
	delta.until(servedEnvoy(srv), nil)
	sameState(t, sotw.state, delta.state)
	eventually(t, "both clients ACKed", func() bool { return synced(srv, sotwID) && synced(srv, deltaID) })

	srv.Update(changed)
	srv.Update(withZZ)
	if got := srv.Version(); got != 3 {
		t.Errorf("Version() = %d, want 3", got)
	}
	// The delta client receives the one changed CLA and the new cluster and
	// listener of zz, and nothing else.
	got := map[string][]string{}
	seen := delta.until(func(st map[string]map[string]proto.Message) bool {
		_, z := st[translate.ClusterType][zzCluster]
		_, l := st[translate.ListenerType][zzLDS]
		return z && l && hasCurrentCLA(srv)(st)
	}, nil)
	for _, m := range seen {
		got[m.typeURL] = append(got[m.typeURL], m.names()...)
		if len(m.removed) > 0 {
			t.Errorf("delta %s removed %v, want no removals", m.typeURL, m.removed)
		}
	}
	want := map[string][]string{translate.EndpointType: {ordersCLA}, translate.ClusterType: {zzCluster}, translate.ListenerType: {zzLDS}}
	for url, names := range want {
		if !slices.Equal(got[url], names) {
			t.Errorf("delta client got %s %v, want only %v", translate.TypeLabel(url), got[url], names)
		}
	}
	if len(got) != len(want) {
		t.Errorf("delta client got types %v, want %v", got, want)
	}

	// SotW catches up too (it gets the full clusters and listeners), and
	// both clients hold the same resources again.
	seen = sotw.until(all(hasCurrentCLA(srv), holdsCurrent(srv, translate.ClusterType), holdsCurrent(srv, translate.ListenerType)), nil)
	sameState(t, sotw.state, delta.state)
	// SotW EDS is not full-state: it too carries only the changed CLA.
	for _, m := range seen {
		if m.typeURL == translate.EndpointType && !slices.Equal(m.names(), []string{ordersCLA}) {
			t.Errorf("sotw EDS response carries %v, want only %s", m.names(), ordersCLA)
		}
		if m.typeURL == translate.RouteType {
			t.Errorf("sotw got RDS %v, want none (no route changed)", m.names())
		}
	}
}

func TestNackIsRecordedAndDoesNotStopUpdates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		delta bool
	}{
		{name: "sotw", delta: false},
		{name: "delta", delta: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := NewServer(Options{})
			first, changed, withZZ := fixtureSnapshots()
			srv.Update(first)
			addr := startServer(t, srv)

			const goodID, badID = "sidecar~10.1.0.3~good~ns", "router~10.1.0.4~bad~ns"
			const reason = "endpoint 10.0.0.5: rejected by test"
			nack := map[string]string{translate.EndpointType: reason}
			good := dialADS(t, addr, envoyNode(goodID), false)
			bad := dialADS(t, addr, envoyNode(badID), tc.delta)
			envoySubscribe(good, srv)
			envoySubscribe(bad, srv)
			good.until(servedEnvoy(srv), nil)
			// The NACKing client holds everything but endpoints.
			srv.mu.RLock()
			clusters := resourceNames(srv.Resources(translate.KindOf(translate.ClassEnvoy, translate.ClusterType)))
			srv.mu.RUnlock()
			seen := bad.until(all(holds(translate.ClusterType, clusters...), func(st map[string]map[string]proto.Message) bool {
				return len(st[translate.ListenerType]) == 4 && len(st[translate.RouteType]) == 3
			}), nack)
			// The EDS response may come after the others: read until it
			// was received (and NACKed).
			for !slices.ContainsFunc(seen, func(m message) bool { return m.typeURL == translate.EndpointType }) {
				seen = append(seen, bad.step(nack))
			}
			eventually(t, "the NACK in Proxies()", func() bool {
				p := proxy(srv, badID)
				return p != nil && typeStatus(p, translate.EndpointType).LastNack != nil
			})
			bad.drainEDS(seen, nack)

			srv.Update(changed)
			srv.Update(withZZ)
			// The good client gets the new endpoints and the new cluster.
			good.until(all(hasCurrentCLA(srv), holdsCurrent(srv, translate.ClusterType), holdsCurrent(srv, translate.ListenerType)), nil)
			// The NACKing client still gets its other types: the new cluster.
			seen = bad.until(func(st map[string]map[string]proto.Message) bool {
				_, ok := st[translate.ClusterType][zzCluster]
				return ok
			}, nack)
			// After a NACK the server does not resend the rejected resources
			// at once: the next EDS response carries the changed CLA.
			for _, m := range seen {
				if m.typeURL == translate.EndpointType && !slices.Contains(m.names(), ordersCLA) {
					t.Errorf("EDS response %v after the NACK does not carry the changed %s", m.names(), ordersCLA)
				}
			}

			eventually(t, "status of both proxies", func() bool {
				p := proxy(srv, badID)
				if p == nil {
					return false
				}
				eds, cds := typeStatus(p, translate.EndpointType), typeStatus(p, translate.ClusterType)
				return eds.LastNack != nil && eds.LastNack.Nonce == eds.SentNonce &&
					cds.AckedNonce == cds.SentNonce && synced(srv, goodID)
			})
			p := proxy(srv, badID)
			eds := typeStatus(p, translate.EndpointType)
			if eds.LastNack.Error != reason || eds.LastNack.Version != eds.SentVersion || eds.LastNack.At.IsZero() {
				t.Errorf("LastNack = %+v, want error %q for version %q", eds.LastNack, reason, eds.SentVersion)
			}
			if eds.AckedNonce != "" {
				t.Errorf("EDS AckedNonce = %q, want none (every EDS response was NACKed)", eds.AckedNonce)
			}
			if cds := typeStatus(p, translate.ClusterType); cds.LastNack != nil || cds.AckedVersion == "" || cds.AckedVersion != cds.SentVersion {
				t.Errorf("CDS status = %+v, want acked at the sent version without NACK", cds)
			}
			wantStream := map[bool]string{false: "sotw", true: "delta"}[tc.delta]
			if p.Class != "envoy" || p.NodeType != "router" || p.Stream != wantStream || p.Connected.IsZero() {
				t.Errorf("proxy = %+v, want class envoy, node type router, stream %s", p, wantStream)
			}
			if g := proxy(srv, goodID); typeStatus(g, translate.EndpointType).LastNack != nil {
				t.Errorf("good proxy has a NACK: %+v", typeStatus(g, translate.EndpointType))
			}
			// /debug/syncz renders camelCase JSON.
			b, err := json.Marshal(srv.Proxies())
			if err != nil || !strings.Contains(string(b), `"lastNack":{"version"`) {
				t.Errorf("Proxies() JSON = %s (%v), want lastNack", b, err)
			}
		})
	}
}

// drainEDS NACKs EDS responses already in flight so that the following
// updates are what the client reads next.
func (c *adsClient) drainEDS(seen []message, nack map[string]string) {
	c.t.Helper()
	for _, m := range seen {
		if m.typeURL == translate.EndpointType {
			return
		}
	}
	for {
		m := c.next()
		if msg := nack[m.typeURL]; msg != "" {
			c.answer(m, msg)
			return
		}
		c.apply(m)
		c.answer(m, "")
	}
}

func proxy(srv *Server, id string) *ads.ProxyStatus {
	for _, p := range srv.Proxies() {
		if p.ID == id {
			return &p
		}
	}
	return nil
}

func typeStatus(p *ads.ProxyStatus, url string) ads.TypeStatus {
	for _, ts := range p.Types {
		if ts.TypeURL == url {
			return ts
		}
	}
	return ads.TypeStatus{}
}
