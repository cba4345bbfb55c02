package chaos

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hudl/fargo"

	"github.com/meshfed/meshfed/test/servers"
)

// eurekaKind registers instances through Polaris' Eureka REST API as a
// Eureka client does (fargo, XML), with a one-hour lease so that no
// heartbeats are needed; health is the instance status (UP, or
// OUT_OF_SERVICE: DRAINING). It never removes: Polaris 1.18.1 answers 200
// to DELETE /eureka/apps/<APP>/<ID> and keeps the instance (seen here
// once the app's instances had been listed for a few seconds; /apps still
// lists it), so a removal's truth cannot be had from it.
type eurekaKind struct{ p *servers.Polaris }

func (k *eurekaKind) NoRemoves() {}

func (k *eurekaKind) Name() string { return "eureka" }
func (k *eurekaKind) Entry() string {
	return fmt.Sprintf("{name: eureka, kind: eureka, domain: eureka, eureka: {urls: [%q], pollInterval: 1s}}", k.p.URL)
}
func (k *eurekaKind) Host(svc int) string { return fmt.Sprintf("u%d.eureka", svc) }
func (k *eurekaKind) Port(svc int) int    { return 8600 + svc }

// Bounds: meshfed polls /apps/delta every pollInterval (1s here) and
// Polaris makes a change visible to the Eureka API after its refresh
// (1s) and cache diff (up to ~5s): Push 20s is that with slack. Heal adds
// the Polaris restart (its store reloaded) and a full fetch.
func (k *eurekaKind) Bounds() Bounds { return Bounds{Push: 20 * time.Second, Heal: 60 * time.Second} }

func (k *eurekaKind) instance(in Instance) *fargo.Instance {
	e := servers.EurekaInstance{App: fmt.Sprintf("U%d", in.Svc), ID: fmt.Sprintf("u%d-%d", in.Svc, in.ID), IP: in.IP, Port: in.Port}
	if !in.Healthy {
		e.Status = fargo.OUTOFSERVICE
	}
	return e.Fargo()
}

func (k *eurekaKind) Add(_ context.Context, in Instance) error {
	return k.p.Conn().ReregisterInstance(k.instance(in))
}

// SetHealth registers the instance again with its new status: Polaris'
// status endpoint (PUT .../status) changes every instance of the app and
// leaves the instance undeletable afterwards (seen here, Polaris 1.18.1).
func (k *eurekaKind) SetHealth(_ context.Context, in Instance) error {
	return k.p.Conn().ReregisterInstance(k.instance(in))
}

// Restore sends each live instance a heartbeat and registers it again
// when Polaris answers 404, as a Eureka client does; it returns how many
// it registered again.
func (k *eurekaKind) Restore(ctx context.Context, live []Instance) (int, error) {
	n := 0
	for _, in := range live {
		for {
			err := k.p.Conn().HeartBeatInstance(k.instance(in))
			if code, ok := fargo.HTTPResponseStatusCode(err); ok && code == http.StatusNotFound {
				err = k.p.Conn().ReregisterInstance(k.instance(in))
				if err == nil {
					n++
				}
			}
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return n, fmt.Errorf("eureka: %s: %v: %w", in.IP, err, ctx.Err())
			case <-time.After(time.Second):
			}
		}
	}
	return n, nil
}

func (k *eurekaKind) Remove(_ context.Context, in Instance) error {
	err := k.p.Conn().DeregisterInstance(k.instance(in))
	if err != nil && strings.Contains(err.Error(), "404") {
		return nil
	}
	return err
}

// nacosKind registers ephemeral instances through the Nacos 2.x SDK
// (gRPC) against Polaris' Nacos API, as applications do (Polaris refuses
// persistent ones over the SDK with a 500). A Nacos 2.x connection holds
// one instance per service, so the kind keeps a pool of SDK clients, each
// the home of at most one instance of each service. It is static after
// its seed: under churn Polaris 1.18.1 kept instances deregistered through
// their connection and lost others registered again (its instance list
// disagreed with the SDK calls' answers), so no truth of changes can be
// had from it; the registry still lives through every Polaris fault.
// Health is the weight (0: DRAINING, as Nacos clients send such an
// instance nothing).
//
// Ephemeral instances live as long as their connection, and Polaris loses
// them in a kill or a hang (seen here, Polaris 1.18.1 with nacos-sdk-go
// 2.3.5): after a SIGSTOP/SIGCONT the SDK reconnects and registers its
// instances on the new connection, then Polaris handles the old
// connection's close and deletes the same instances (by ID, whichever
// connection holds them now); after a SIGKILL it reloads them bound to
// connections that no longer exist and marks them unhealthy until the
// SDK's redo, which nacos-sdk-go tries once and never again if it fails.
// Either way Polaris' own instance list lacks them for good, the SDK
// believes them registered, and meshfed, which follows Polaris, rightly
// stops serving them. Real Nacos keys an instance to its connection, so
// an old connection's close cannot take a new registration with it. So a
// Polaris kill or hang is amnesia for this kind (Interval.Amnesia: the
// checker does not count that window's removals) and Restore then does
// what a Nacos client's redo is for: it registers again every instance
// Polaris no longer lists, until Polaris lists them all.
type nacosKind struct {
	t       testing.TB
	p       *servers.Polaris
	clients []*servers.NacosClient // maxInstances+1 of them

	mu    sync.Mutex
	home  map[int]int // instance ID → its client
	svcOf map[int]int // instance ID → its service
}

func newNacosKind(t testing.TB, p *servers.Polaris) *nacosKind {
	k := &nacosKind{t: t, p: p, home: map[int]int{}, svcOf: map[int]int{}}
	for range maxInstances + 1 {
		k.clients = append(k.clients, p.NacosClient(t, ""))
	}
	return k
}

func (k *nacosKind) Static()      {}
func (k *nacosKind) Name() string { return "nacos" }
func (k *nacosKind) Entry() string {
	return fmt.Sprintf("{name: nacos, kind: nacos, domain: nacos, nacos: {servers: [%q], listInterval: 2s, resyncInterval: 10s}}", k.p.NacosAddr)
}
func (k *nacosKind) Host(svc int) string { return fmt.Sprintf("n%d.nacos", svc) }
func (k *nacosKind) Port(svc int) int    { return 8800 + svc }

// Bounds: instance changes are pushed over the SDK's gRPC stream; lost
// pushes are repaired by the resync (10s here): Push 25s is a resync with
// slack. Heal adds Polaris' restart, the SDK's re-registration and the
// registry's reconnect and full re-read.
func (k *nacosKind) Bounds() Bounds { return Bounds{Push: 25 * time.Second, Heal: 60 * time.Second} }

func (k *nacosKind) instance(in Instance) servers.NacosInstance {
	return servers.NacosInstance{Service: fmt.Sprintf("n%d", in.Svc), IP: in.IP, Port: in.Port, Drained: !in.Healthy,
		Metadata: map[string]string{"meshfed.protocol": "grpc", "chaos.svc": strconv.Itoa(in.Svc)}}
}

// client returns the home of an instance, choosing a client without an
// instance of its service for a new one.
func (k *nacosKind) client(in Instance) (*servers.NacosClient, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if i, ok := k.home[in.ID]; ok {
		return k.clients[i], nil
	}
	used := map[int]bool{}
	for id, i := range k.home {
		if k.svcOf[id] == in.Svc {
			used[i] = true
		}
	}
	for i := range k.clients {
		if !used[i] {
			k.home[in.ID] = i
			k.svcOf[in.ID] = in.Svc
			return k.clients[i], nil
		}
	}
	return nil, fmt.Errorf("nacos: no free client for service n%d", in.Svc)
}

func (k *nacosKind) put(in Instance) error {
	c, err := k.client(in)
	if err != nil {
		return err
	}
	return c.Put(k.instance(in))
}

func (k *nacosKind) Add(_ context.Context, in Instance) error       { return k.put(in) }
func (k *nacosKind) SetHealth(_ context.Context, in Instance) error { return k.put(in) }
func (k *nacosKind) Remove(_ context.Context, in Instance) error {
	c, err := k.client(in)
	if err != nil {
		return err
	}
	if err := c.Delete(k.instance(in)); err != nil {
		return err
	}
	k.mu.Lock()
	delete(k.home, in.ID)
	delete(k.svcOf, in.ID)
	k.mu.Unlock()
	return nil
}

// restoreSettle is how long Polaris must list every instance before
// Restore trusts it: more than two rounds of its connection checker (3s),
// which marks an instance whose connection is gone unhealthy.
const restoreSettle = 8 * time.Second

// Restore registers again every live instance Polaris does not list as
// registered (missing, unhealthy or with another weight) until it has
// listed them all for restoreSettle, and returns how many registrations
// it made. First, a Polaris that answers no subscription (its push
// deadlock, see servers.Polaris.NacosSubscribes) is restarted, as an
// operator would: no client could follow it otherwise.
func (k *nacosKind) Restore(ctx context.Context, live []Instance) (int, error) {
	if !k.p.NacosSubscribes(k.t) {
		k.t.Logf("nacos: Polaris answers no subscription (its push deadlock): restarting it")
		k.p.Process().Kill()
		k.p.Start(k.t)
	}
	n := 0
	var since time.Time
	for {
		lost, err := k.lost(ctx, live)
		switch {
		case err != nil:
			since = time.Time{}
		case len(lost) == 0:
			if since.IsZero() {
				since = time.Now()
			}
			if time.Since(since) >= restoreSettle {
				return n, nil
			}
		default:
			since = time.Time{}
			for _, in := range lost {
				if err = k.put(in); err == nil {
					n++
				}
			}
		}
		select {
		case <-ctx.Done():
			return n, fmt.Errorf("nacos: Polaris still lacks instances (%v): %w", err, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// lost returns the instances of live that Polaris does not list as they
// were registered.
func (k *nacosKind) lost(ctx context.Context, live []Instance) ([]Instance, error) {
	listed := map[int]map[string]servers.NacosHost{}
	var out []Instance
	for _, in := range live {
		hosts, ok := listed[in.Svc]
		if !ok {
			l, err := k.p.NacosHosts(ctx, fmt.Sprintf("n%d", in.Svc), "")
			if err != nil {
				return nil, err
			}
			hosts = map[string]servers.NacosHost{}
			for _, h := range l {
				hosts[fmt.Sprintf("%s:%d", h.IP, h.Port)] = h
			}
			listed[in.Svc] = hosts
		}
		h, ok := hosts[fmt.Sprintf("%s:%d", in.IP, in.Port)]
		if !ok || !h.Healthy || (h.Weight > 0) != in.Healthy {
			out = append(out, in)
		}
	}
	return out, nil
}
