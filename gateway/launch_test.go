package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/config"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/test/servers"
)

// oneService publishes one service and blocks until ctx ends.
type oneService struct {
	shard model.ShardKey
	done  chan struct{}
}

func (o *oneService) Run(ctx context.Context, sink registries.Sink) error {
	defer close(o.done)
	sink.Publish(o.shard, registries.FullState([]model.Service{{
		Hostname:  "orders.shop.svc.cluster.local",
		Ports:     []model.Port{{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}},
		Endpoints: []model.Endpoint{{Address: "192.0.2.1"}},
	}}, nil))
	<-ctx.Done()
	return ctx.Err()
}

func status(t *testing.T, g *Gateway, name string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	g.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz/registries/"+name, nil))
	return rec.Code
}

// TestLaunchAtRuntime starts and stops a registry while the gateway runs,
// as secretDiscovery does for remote clusters.
func TestLaunchAtRuntime(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte("services: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(filepath.Join(dir, "clusters.yaml"), []byte(`xds: {address: "`+freeAddr(t)+`"}
admin: {address: "`+freeAddr(t)+`"}
debounce: {quiet: 1ms, max: 10ms}
registries:
  - name: east
    kind: file
    domain: vm.internal
    file: {path: services.yaml}
`))
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGateway(cfg, GatewayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	west := registries.Common{Name: "west", Kind: "kubernetes", Domain: "svc.cluster.local"}
	if _, err := g.Launch("east", west, &oneService{}); err == nil {
		t.Error("Launch before Run succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	reg := &oneService{shard: west.Shard(), done: make(chan struct{})}
	var stop func()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if stop, err = g.Launch("east", west, reg); err == nil {
			break
		}
		if !strings.Contains(err.Error(), "not running") || time.Now().After(deadline) {
			t.Fatalf("Launch: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, name := range []string{"west", "east"} {
		if _, err := g.Launch("east", registries.Common{Name: name, Kind: "kubernetes", Domain: "svc.cluster.local"}, &oneService{}); err == nil {
			t.Errorf("second Launch of %q succeeded", name)
		}
	}
	waitUntil(t, func() error {
		if c := status(t, g, "west"); c != http.StatusOK {
			return errors.New("/healthz/registries/west is not 200 yet")
		}
		if _, ok := g.agg.Snapshot().Service("orders.shop.svc.cluster.local"); !ok {
			return errors.New("service not served yet")
		}
		return nil
	})

	for _, name := range []string{"east", "west"} {
		if m, want := metrics(t, g), `meshfed_registry_restarts_total{registry="`+name+`"} 0`; !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	stop()
	if m := metrics(t, g); strings.Contains(m, `registry="west"`) || !strings.Contains(m, `meshfed_registry_restarts_total{registry="east"}`) {
		t.Errorf("after stop, /metrics still counts west or lost east:\n%s", grepLines(m, "meshfed_registry_restarts_total"))
	}
	select {
	case <-reg.done:
	default:
		t.Error("stop returned before the registry's Run did")
	}
	if c := status(t, g, "west"); c != http.StatusNotFound {
		t.Errorf("/healthz/registries/west after stop = %d, want 404", c)
	}
	waitUntil(t, func() error {
		if _, ok := g.agg.Snapshot().Service("orders.shop.svc.cluster.local"); ok {
			return errors.New("service still served")
		}
		return nil
	})
	stop() // a second call is harmless
}

func metrics(t *testing.T, g *Gateway) string {
	t.Helper()
	rec := httptest.NewRecorder()
	g.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l := servers.LowListener(t)
	defer l.Close()
	return l.Addr().String()
}

func waitUntil(t *testing.T, f func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runGateway runs g until the test ends, then checks that Run returned
// cleanly; the context is Run's.
func runGateway(t *testing.T, g *Gateway) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return ctx
}
