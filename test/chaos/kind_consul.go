package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// consulKind registers instances through Consul's catalog API on nodes of
// their own (node-<id>, so the agent's anti-entropy leaves them alone),
// with a catalog check whose status is the health: docs/registries/consul.md.
// Consul runs as a server agent with a data dir, so a restart keeps the
// catalog.
type consulKind struct {
	addr string
	cl   *http.Client
}

func (k *consulKind) Name() string { return "consul" }

func (k *consulKind) Entry() string {
	return fmt.Sprintf("{name: consul, kind: consul, domain: consul, consul: {address: %q, waitTime: 30s}}", k.addr)
}

func (k *consulKind) Host(svc int) string { return fmt.Sprintf("c%d.consul", svc) }
func (k *consulKind) Port(svc int) int    { return 8100 + svc }

// Bounds: Consul blocking queries answer at once on a change (the service
// list and every watched service's health); meshfed's debounce is 100ms at
// most. Push 10s is that with slack for a loaded machine; Heal adds the
// registry's reconnect backoff (up to 15s) and a leader election.
func (k *consulKind) Bounds() Bounds { return Bounds{Push: 10 * time.Second, Heal: 45 * time.Second} }

func (k *consulKind) register(ctx context.Context, in Instance) error {
	id := fmt.Sprintf("c%d-%d", in.Svc, in.ID)
	status := "passing"
	if !in.Healthy {
		status = "critical"
	}
	body, _ := json.Marshal(map[string]any{
		"Node":    fmt.Sprintf("node-%d", in.ID),
		"Address": in.IP,
		"Service": map[string]any{"ID": id, "Service": fmt.Sprintf("c%d", in.Svc), "Address": in.IP, "Port": in.Port,
			"Meta": map[string]string{"protocol": "grpc"}},
		"Check":          map[string]any{"CheckID": "chk-" + id, "Name": "up", "Status": status, "ServiceID": id},
		"SkipNodeUpdate": false,
	})
	return k.put(ctx, "/v1/catalog/register", body)
}

func (k *consulKind) Add(ctx context.Context, in Instance) error       { return k.register(ctx, in) }
func (k *consulKind) SetHealth(ctx context.Context, in Instance) error { return k.register(ctx, in) }

func (k *consulKind) Remove(ctx context.Context, in Instance) error {
	body, _ := json.Marshal(map[string]any{"Node": fmt.Sprintf("node-%d", in.ID)})
	return k.put(ctx, "/v1/catalog/deregister", body)
}

// Bad registers a service whose only instance has a multicast address:
// the normalization gate quarantines it (docs/registries/README.md).
func (k *consulKind) Bad(ctx context.Context, on bool) error {
	if !on {
		body, _ := json.Marshal(map[string]any{"Node": "node-bad"})
		return k.put(ctx, "/v1/catalog/deregister", body)
	}
	body, _ := json.Marshal(map[string]any{
		"Node": "node-bad", "Address": "224.0.0.9",
		"Service": map[string]any{"ID": "bad", "Service": "c0", "Address": "224.0.0.9", "Port": k.Port(0)},
	})
	return k.put(ctx, "/v1/catalog/register", body)
}

func (k *consulKind) put(ctx context.Context, path string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+k.addr+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := k.cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT %s: %s: %s", path, resp.Status, b)
	}
	return nil
}
