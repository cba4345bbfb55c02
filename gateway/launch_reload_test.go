package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/meshfed/meshfed/config"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// discoveringBlock is a registry block whose registry launches one runtime
// registry per name in remotes, as kubernetes secretDiscovery does: the
// launched registries outlive the parent's Run and publish addr.
type discoveringBlock struct {
	remotes []string
	addr    string
	running *runningSet
}

func (b *discoveringBlock) ApplyDefaults()  {}
func (b *discoveringBlock) Validate() error { return nil }
func (b *discoveringBlock) New(c registries.Common, _ *slog.Logger) (registries.Registry, error) {
	return &discoveringParent{block: b, common: c, launched: map[string]bool{}}, nil
}

type discoveringParent struct {
	block    *discoveringBlock
	common   registries.Common
	mu       sync.Mutex
	launcher registries.Launcher
	launched map[string]bool // kept across Runs, like kube's discovery state
}

func (p *discoveringParent) SetLauncher(l registries.Launcher) { p.launcher = l }

func (p *discoveringParent) Run(ctx context.Context, sink registries.Sink) error {
	sink.Publish(p.common.Shard(), registries.FullState([]model.Service{}, nil))
	p.mu.Lock()
	for _, name := range p.block.remotes {
		if p.launched[name] {
			continue
		}
		c := registries.Common{Name: name, Kind: p.common.Kind, Domain: p.common.Domain}
		if _, err := p.launcher.Launch(p.common.Name, c, &remoteRegistry{shard: c.Shard(), addr: p.block.addr, running: p.block.running}); err == nil {
			p.launched[name] = true
		}
	}
	p.mu.Unlock()
	<-ctx.Done()
	return ctx.Err()
}

// runningSet counts the runtime registries whose Run is running, by address.
type runningSet struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *runningSet) add(addr string, d int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[addr] += d
}

func (r *runningSet) get(addr string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[addr]
}

type remoteRegistry struct {
	shard   model.ShardKey
	addr    string
	running *runningSet
}

func (r *remoteRegistry) Run(ctx context.Context, sink registries.Sink) error {
	r.running.add(r.addr, 1)
	defer r.running.add(r.addr, -1)
	sink.Publish(r.shard, registries.FullState([]model.Service{{
		Hostname:  "orders.shop.svc.cluster.local",
		Ports:     []model.Port{{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}},
		Endpoints: []model.Endpoint{{Address: r.addr}},
	}}, nil))
	<-ctx.Done()
	return ctx.Err()
}

// TestReloadHandsRuntimeRegistriesOver: a reload that changes the entry of
// a registry that launched registries at runtime (secretDiscovery) hands
// them to its new instance make-before-break: the new instance's launch of
// the same name replaces the old one once it published, with no snapshot
// lacking the service and one instance left running. One the new instance
// does not launch again stops after syncTimeout; a reload that removes the
// entry stops the registries it launched at once.
func TestReloadHandsRuntimeRegistriesOver(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte("services: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	xdsAddr, adminAddr := freeAddr(t), freeAddr(t)
	running := &runningSet{n: map[string]int{}}
	config := func(addr string, remotes ...string) *config.Config {
		cfg, err := config.Parse(filepath.Join(dir, "clusters.yaml"), []byte(`xds: {address: "`+xdsAddr+`"}
admin: {address: "`+adminAddr+`"}
debounce: {quiet: 1ms, max: 10ms}
syncTimeout: 300ms
registries:
  - {name: vms, kind: file, domain: vm.internal, file: {path: services.yaml}}
`))
		if err != nil {
			t.Fatal(err)
		}
		if addr != "" {
			east := config.Registry{Name: "east", Kind: "kubernetes", Domain: "svc.cluster.local",
				Block: &discoveringBlock{remotes: remotes, addr: addr, running: running}}
			east.ApplyDefaults()
			cfg.Registries = append(cfg.Registries, east)
		}
		return cfg
	}
	g, err := NewGateway(config("192.0.2.1", "west"), GatewayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const host = "orders.shop.svc.cluster.local"
	served := func() string {
		s, ok := g.agg.Snapshot().Service(host)
		if !ok || len(s.Endpoints) != 1 {
			return ""
		}
		return s.Endpoints[0].Address
	}
	ctx := runGateway(t, g)
	waitUntil(t, func() error {
		if a := served(); a != "192.0.2.1" {
			return fmt.Errorf("served %q, want 192.0.2.1", a)
		}
		return nil
	})
	var mu sync.Mutex
	var gaps []uint64
	g.agg.Subscribe(func(s *model.Snapshot) {
		if _, ok := s.Service(host); !ok {
			mu.Lock()
			gaps = append(gaps, s.Version)
			mu.Unlock()
		}
	})

	if err := g.Apply(ctx, config("192.0.2.2", "west")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() error {
		if a := served(); a != "192.0.2.2" {
			return fmt.Errorf("served %q, want the new instance's 192.0.2.2", a)
		}
		if n := running.get("192.0.2.1"); n != 0 {
			return fmt.Errorf("%d old instances of west still run", n)
		}
		if n := running.get("192.0.2.2"); n != 1 {
			return fmt.Errorf("%d new instances of west run, want 1", n)
		}
		return nil
	})
	mu.Lock()
	if len(gaps) > 0 {
		t.Errorf("snapshots %v lack %s during the reload", gaps, host)
	}
	mu.Unlock()

	// The new instance no longer discovers west: it stops after syncTimeout.
	if err := g.Apply(ctx, config("192.0.2.3")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() error {
		if n := running.get("192.0.2.2"); n != 0 {
			return fmt.Errorf("%d instances of west still run, no instance of its parent discovers it", n)
		}
		if a := served(); a != "" {
			return errors.New("west's service still served")
		}
		return nil
	})

	if err := g.Apply(ctx, config("192.0.2.4", "west")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() error {
		if a := served(); a != "192.0.2.4" {
			return fmt.Errorf("served %q, want 192.0.2.4", a)
		}
		return nil
	})
	if err := g.Apply(ctx, config("")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() error {
		if n := running.get("192.0.2.4"); n != 0 {
			return fmt.Errorf("%d instances of west still run after its parent was removed", n)
		}
		if a := served(); a != "" {
			return errors.New("west's service still served after its parent was removed")
		}
		return nil
	})
}
