package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/config"
	"github.com/meshfed/meshfed/model"
)

func svcFile(addrs ...string) string {
	var b strings.Builder
	b.WriteString("services:\n  - name: a\n    ports: [{name: http, port: 80, protocol: HTTP}]\n    endpoints:\n")
	for _, a := range addrs {
		b.WriteString("      - {address: " + a + "}\n")
	}
	return b.String()
}

func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func endpointsOf(g *Gateway, host string) int {
	s, ok := g.agg.Snapshot().Service(host)
	if !ok {
		return -1
	}
	return len(s.Endpoints)
}

// TestReloadMakeBeforeBreak: a registry whose entry changed keeps its old
// instance running and served until the new instance has synced: while
// the new file does not exist yet, a change to the old file still reaches
// the model, and no snapshot ever lacks the service.
func TestReloadMakeBeforeBreak(t *testing.T) {
	dir := t.TempDir()
	old, next := filepath.Join(dir, "old.yaml"), filepath.Join(dir, "new.yaml")
	writeAtomic(t, old, svcFile("10.0.0.1"))
	clusters := func(file string) string {
		return `xds: {address: "` + freeAddr(t) + `"}
admin: {address: "` + freeAddr(t) + `"}
debounce: {quiet: 1ms, max: 10ms}
syncTimeout: 1m
registries:
  - {name: vms, kind: file, domain: vm.internal, file: {path: ` + file + `}}
`
	}
	cfg, err := config.Parse(filepath.Join(dir, "clusters.yaml"), []byte(clusters("old.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGateway(cfg, GatewayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var gaps []uint64
	g.agg.Subscribe(func(s *model.Snapshot) {
		if _, ok := s.Service("a.vm.internal"); !ok {
			mu.Lock()
			gaps = append(gaps, s.Version)
			mu.Unlock()
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- g.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitUntil(t, func() error {
		if n := endpointsOf(g, "a.vm.internal"); n != 1 {
			return fmt.Errorf("%d endpoints", n)
		}
		return nil
	})

	newCfg, err := config.Parse(filepath.Join(dir, "clusters.yaml"), []byte(clusters("new.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	applied := make(chan error, 1)
	go func() { applied <- g.Apply(ctx, newCfg) }()

	// The new instance cannot sync (its file is missing): the old one
	// still runs and is served.
	writeAtomic(t, old, svcFile("10.0.0.1", "10.0.0.2"))
	waitUntil(t, func() error {
		if n := endpointsOf(g, "a.vm.internal"); n != 2 {
			return fmt.Errorf("%d endpoints; the old instance should still be running", n)
		}
		return nil
	})
	select {
	case err := <-applied:
		t.Fatalf("Apply returned (%v) before the new instance synced", err)
	default:
	}

	writeAtomic(t, next, svcFile("10.0.0.1", "10.0.0.2", "10.0.0.3"))
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() error {
		if n := endpointsOf(g, "a.vm.internal"); n != 3 {
			return fmt.Errorf("%d endpoints, want the new file's 3", n)
		}
		return nil
	})
	// The old instance is gone: its file no longer matters.
	writeAtomic(t, old, svcFile("10.0.0.9"))
	mu.Lock()
	defer mu.Unlock()
	if len(gaps) > 0 {
		t.Errorf("snapshots %v lack a.vm.internal during the reload", gaps)
	}
	if rl := g.LastReload(); rl == nil || !rl.OK {
		t.Errorf("LastReload = %+v, want OK", rl)
	}
}

// TestReleaseEndpoint: POST /debug/registries/{name}/release answers 404
// for an unknown registry, 409 when nothing is held, and 200 with the
// registry's JSON once a held update (the default hold-down) is applied.
func TestReleaseEndpoint(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "services.yaml")
	writeAtomic(t, path, svcFile("10.0.0.1", "10.0.0.2", "10.0.0.3"))
	cfg, err := config.Parse(filepath.Join(dir, "clusters.yaml"), []byte(`xds: {address: "`+freeAddr(t)+`"}
admin: {address: "`+freeAddr(t)+`"}
debounce: {quiet: 1ms, max: 10ms}
registries:
  - {name: vms, kind: file, domain: vm.internal, file: {path: services.yaml}}
`))
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGateway(cfg, GatewayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- g.Run(ctx) }()
	defer func() { cancel(); <-runDone }()
	post := func(name string) (int, admin.RegistryHealth) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/debug/registries/"+name+"/release", nil)
		req.RemoteAddr = "127.0.0.1:40000" // without admin.tokenFile, changes come from loopback only
		g.Handler().ServeHTTP(rec, req)
		var h admin.RegistryHealth
		_ = json.Unmarshal(rec.Body.Bytes(), &h)
		return rec.Code, h
	}
	waitUntil(t, func() error {
		if n := endpointsOf(g, "a.vm.internal"); n != 3 {
			return fmt.Errorf("%d endpoints", n)
		}
		return nil
	})
	if code, _ := post("nope"); code != http.StatusNotFound {
		t.Errorf("release unknown: %d, want 404", code)
	}
	if code, _ := post("vms"); code != http.StatusConflict {
		t.Errorf("release with nothing held: %d, want 409", code)
	}
	writeAtomic(t, path, svcFile("10.0.0.1")) // drops 2 of 3: held
	waitUntil(t, func() error {
		if code := status(t, g, "vms"); code != http.StatusServiceUnavailable {
			return fmt.Errorf("/healthz/registries/vms %d, want 503 while held", code)
		}
		return nil
	})
	if n := endpointsOf(g, "a.vm.internal"); n != 3 {
		t.Errorf("%d endpoints served while held, want 3", n)
	}
	code, h := post("vms")
	if code != http.StatusOK || h.Name != "vms" || h.State.String() != "Synced" || h.Endpoints != 1 || h.Hold != nil {
		t.Errorf("release: %d %+v, want 200, Synced, 1 endpoint, no hold", code, h)
	}
	if n := endpointsOf(g, "a.vm.internal"); n != 1 {
		t.Errorf("%d endpoints after release, want 1", n)
	}
}

// TestReloadRemovedRegistryStateNotRestored: a registry removed by a
// reload and added back within state.maxAge restores nothing of its removed
// instance, even when the aggregator's last accept of the removed instance
// reached the state store after the removal (simulated by a late Save);
// the new instance's own state is saved.
func TestReloadRemovedRegistryStateNotRestored(t *testing.T) {
	dir := t.TempDir()
	vmsFile, otherFile := filepath.Join(dir, "vms.yaml"), filepath.Join(dir, "other.yaml")
	writeAtomic(t, vmsFile, svcFile("10.0.0.1"))
	writeAtomic(t, otherFile, strings.Replace(svcFile("10.0.1.1"), "name: a", "name: b", 1))
	xdsAddr, adminAddr := freeAddr(t), freeAddr(t)
	clusters := func(withVMs bool, vmsPath string) *config.Config {
		s := `xds: {address: "` + xdsAddr + `"}
admin: {address: "` + adminAddr + `"}
debounce: {quiet: 1ms, max: 10ms}
syncTimeout: 1m
state: {dir: state}
registries:
  - {name: other, kind: file, domain: other.internal, file: {path: other.yaml}}
`
		if withVMs {
			s += `  - {name: vms, kind: file, domain: vm.internal, file: {path: ` + vmsPath + `}}
`
		}
		cfg, err := config.Parse(filepath.Join(dir, "clusters.yaml"), []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	g, err := NewGateway(clusters(true, "vms.yaml"), GatewayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := runGateway(t, g)
	stateFile := filepath.Join(dir, "state", "vms.json")
	waitUntil(t, func() error {
		if _, err := os.Stat(stateFile); err != nil {
			return err
		}
		return nil
	})
	var saved struct{ Services []model.Service }
	b, err := os.ReadFile(stateFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &saved); err != nil {
		t.Fatal(err)
	}

	if err := g.Apply(ctx, clusters(false, "")); err != nil {
		t.Fatal(err)
	}
	// The aggregator's accept of the removed instance's last update, in
	// flight during the removal, reaches the store afterwards.
	g.store.Save(model.ShardKey{Kind: "file", Name: "vms"}, saved.Services, nil)
	waitUntil(t, func() error {
		if n := endpointsOf(g, "a.vm.internal"); n != -1 {
			return fmt.Errorf("a.vm.internal still served with %d endpoints", n)
		}
		return nil
	})

	// Added back with a file that does not exist yet: the new instance
	// cannot sync, and nothing of the removed one may be restored.
	if err := g.Apply(ctx, clusters(true, "vms-new.yaml")); err != nil {
		t.Fatal(err)
	}
	// A restored state would be pending now; a snapshot that shows a later
	// change of the other registry would show it too.
	writeAtomic(t, otherFile, strings.Replace(svcFile("10.0.1.1", "10.0.1.2"), "name: a", "name: b", 1))
	waitUntil(t, func() error {
		if n := endpointsOf(g, "b.other.internal"); n != 2 {
			return fmt.Errorf("b.other.internal has %d endpoints, want 2", n)
		}
		return nil
	})
	if n := endpointsOf(g, "a.vm.internal"); n != -1 {
		t.Fatalf("the removed instance's state was restored: a.vm.internal has %d endpoints", n)
	}
	// The new instance's own state is saved.
	writeAtomic(t, filepath.Join(dir, "vms-new.yaml"), svcFile("10.0.0.7", "10.0.0.8"))
	waitUntil(t, func() error {
		e, ok, err := g.store.Load("vms", "file", 0)
		if err != nil || !ok {
			return fmt.Errorf("no saved state: %v", err)
		}
		if len(e.Services) != 1 || len(e.Services[0].Endpoints) != 2 {
			return fmt.Errorf("saved %+v, want the new instance's 2 endpoints", e.Services)
		}
		return nil
	})
}
