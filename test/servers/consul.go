package servers

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// noKeepAlive leaves no idle connection (and goroutine) behind, for goleak.
var noKeepAlive = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// ConsulVersion is the Consul that tools/testservers builds.
const ConsulVersion = "1.22.5"

// ConsulBinary returns the path of the Consul binary built by
// `tools/testservers/build.sh consul`, and whether it exists.
func ConsulBinary() (string, bool) {
	return builtBinary("consul-"+ConsulVersion, "consul")
}

// ConsulOptions configures StartConsul.
type ConsulOptions struct {
	// Dev runs `consul agent -dev`: in-memory, fast, forgets everything on
	// restart. Otherwise a single server agent with a data dir runs, whose
	// state survives Stop and Start.
	Dev bool
	// MaxConnsPerClient sets limits.http_max_conns_per_client (Consul's
	// default is 200); 0 keeps the default.
	MaxConnsPerClient int
	// ACLToken, when set, enables ACLs with default policy deny and makes
	// this the initial management token (a UUID); the helpers send it.
	ACLToken string
	// TLS also serves the HTTP API over HTTPS (HTTPSAddr) with a
	// certificate for 127.0.0.1 signed by a test CA (CAFile). Over HTTPS
	// the agent speaks HTTP/2.
	TLS bool
	// RPCVerifyIncoming (with TLS) makes the server's RPC port refuse
	// connections without TLS (tls.internal_rpc.verify_incoming).
	RPCVerifyIncoming bool
	// Datacenter names the agent's datacenter; "" is dc1.
	Datacenter string
	// JoinWAN, when set, is another agent's SerfWANAddr: this agent's
	// datacenter joins that one's over the WAN (retry_join_wan), so that
	// each forwards queries for the other. The agent is ready (Start
	// returns) once it knows the other datacenter.
	JoinWAN string
}

// Consul is a running Consul agent owned by one test.
type Consul struct {
	// HTTPAddr is the agent's HTTP API, 127.0.0.1:port.
	HTTPAddr   string
	Datacenter string
	// Node is the agent's node name.
	Node string
	// Token is the management token when ACLs are enabled, else "".
	Token string
	// SerfWANAddr is the agent's WAN gossip address, for
	// ConsulOptions.JoinWAN.
	SerfWANAddr string
	// HTTPSAddr is the HTTPS API, 127.0.0.1:port, with ConsulOptions.TLS;
	// CAFile is the PEM file of the CA that signed its certificate.
	HTTPSAddr, CAFile string

	proc    *Process
	conf    map[string]any // the agent's config file, as written
	cfgFile string
}

// StartConsul starts a Consul agent on loopback ports, waits until it has a
// leader and its catalog answers, and stops it in t.Cleanup. It skips (or
// fails, see Missing) if the binary is not built.
func StartConsul(t testing.TB, opts ConsulOptions) *Consul {
	t.Helper()
	bin := needBinary(t, ConsulBinary, "consul "+ConsulVersion, "consul")
	dir := t.TempDir()
	pick := FreePorts(t, 7) // the last for HTTPS (opts.TLS)
	httpPort := pick[0]
	ports := map[string]int{
		"http": httpPort, "dns": pick[1], "serf_lan": pick[2], "serf_wan": pick[3],
		"server": pick[4], "grpc": pick[5], "https": -1, "grpc_tls": -1,
	}
	c := &Consul{
		HTTPAddr:    "127.0.0.1:" + strconv.Itoa(httpPort),
		SerfWANAddr: "127.0.0.1:" + strconv.Itoa(pick[3]),
		Datacenter:  cmp.Or(opts.Datacenter, "dc1"),
		Node:        "meshfed-test",
		Token:       opts.ACLToken,
	}
	conf := map[string]any{
		"datacenter":           c.Datacenter,
		"node_name":            c.Node,
		"bind_addr":            "127.0.0.1",
		"client_addr":          "127.0.0.1",
		"advertise_addr":       "127.0.0.1",
		"ports":                ports,
		"log_level":            "warn",
		"disable_update_check": true,
		"enable_script_checks": false,
	}
	if opts.JoinWAN != "" {
		conf["retry_join_wan"] = []string{opts.JoinWAN}
		conf["retry_interval_wan"] = "1s"
	}
	if opts.ACLToken != "" {
		conf["acl"] = map[string]any{
			"enabled": true, "default_policy": "deny", "enable_token_persistence": false,
			"tokens": map[string]any{"initial_management": opts.ACLToken},
		}
	}
	if opts.TLS {
		httpsPort := pick[6]
		ports["https"] = httpsPort
		c.HTTPSAddr = "127.0.0.1:" + strconv.Itoa(httpsPort)
		pki := WriteTestPKI(t, dir)
		c.CAFile = pki.CA
		conf["tls"] = map[string]any{"defaults": map[string]any{
			"ca_file": pki.CA, "cert_file": pki.ServerCert, "key_file": pki.ServerKey, "verify_incoming": false,
		}}
		if opts.RPCVerifyIncoming {
			conf["tls"].(map[string]any)["internal_rpc"] = map[string]any{"verify_incoming": true}
		}
	}
	if opts.MaxConnsPerClient > 0 {
		conf["limits"] = map[string]any{"http_max_conns_per_client": opts.MaxConnsPerClient}
	}
	args := []string{"agent", "-dev"}
	if !opts.Dev {
		conf["server"] = true
		conf["bootstrap_expect"] = 1
		conf["data_dir"] = filepath.Join(dir, "data")
		// A single server: elect quickly after a restart.
		conf["performance"] = map[string]any{"raft_multiplier": 1}
		args = []string{"agent"}
	}
	cfgFile := filepath.Join(dir, "consul.json")
	c.conf, c.cfgFile = conf, cfgFile
	c.writeConfig(t)
	c.proc = &Process{Name: "consul", Bin: bin, Args: append(args, "-config-file", cfgFile), LogPath: filepath.Join(dir, "consul.log")}
	t.Cleanup(func() { c.proc.Stop() })
	c.Start(t)
	return c
}

func (c *Consul) writeConfig(t testing.TB) {
	t.Helper()
	b, err := json.Marshal(c.conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.cfgFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// SetMaxConnsPerClient changes the running agent's
// limits.http_max_conns_per_client (a setting Consul reloads) and checks
// that the agent reports it.
func (c *Consul) SetMaxConnsPerClient(t testing.TB, n int) {
	t.Helper()
	c.conf["limits"] = map[string]any{"http_max_conns_per_client": n}
	c.writeConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+c.HTTPAddr+"/v1/agent/reload", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Token != "" {
		req.Header.Set("X-Consul-Token", c.Token)
	}
	resp, err := noKeepAlive.Do(req)
	if err != nil {
		t.Fatalf("consul: reload: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("consul: reload: %s", resp.Status)
	}
	var self struct {
		DebugConfig struct{ HTTPMaxConnsPerClient int }
	}
	if err := c.get(ctx, "/v1/agent/self", &self); err != nil {
		t.Fatal(err)
	}
	if got := self.DebugConfig.HTTPMaxConnsPerClient; got != n {
		t.Fatalf("consul: after reload the agent reports http_max_conns_per_client %d, want %d", got, n)
	}
}

// SetRPCVerifyIncoming sets tls.internal_rpc.verify_incoming (the agent
// was started with TLS) in the config file, for the next Start.
func (c *Consul) SetRPCVerifyIncoming(t testing.TB, on bool) {
	t.Helper()
	tlsConf, ok := c.conf["tls"].(map[string]any)
	if !ok {
		t.Fatal("consul: SetRPCVerifyIncoming needs ConsulOptions.TLS")
	}
	if on {
		tlsConf["internal_rpc"] = map[string]any{"verify_incoming": true}
	} else {
		delete(tlsConf, "internal_rpc")
	}
	c.writeConfig(t)
}

// Start (re)starts the agent with the same ports and data and waits until
// it serves its catalog.
func (c *Consul) Start(t testing.TB) {
	t.Helper()
	if err := c.proc.StartReady(60*time.Second, c.ready); err != nil {
		t.Fatal(err)
	}
}

// ready: a leader is elected and the agent's node is in the catalog.
func (c *Consul) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var services map[string][]string
	if err := c.get(ctx, "/v1/catalog/services", &services); err != nil {
		return err
	}
	if _, ok := services["consul"]; !ok {
		return errors.New("the catalog lacks the consul service")
	}
	if _, ok := c.conf["retry_join_wan"]; ok {
		var dcs []string
		if err := c.get(ctx, "/v1/catalog/datacenters", &dcs); err != nil {
			return err
		}
		if len(dcs) < 2 {
			return fmt.Errorf("not joined over the WAN yet: datacenters %v", dcs)
		}
	}
	return nil
}

func (c *Consul) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.HTTPAddr+path, nil)
	if err != nil {
		return err
	}
	if c.Token != "" {
		req.Header.Set("X-Consul-Token", c.Token)
	}
	resp, err := noKeepAlive.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Stop stops the agent (SIGTERM, then SIGKILL after 10s) and waits for it.
// A non-dev agent keeps its data for the next Start.
func (c *Consul) Stop(t testing.TB) {
	t.Helper()
	if !c.proc.Stop() {
		t.Fatal("consul: Stop while stopped")
	}
}

// PID is the agent's process id, 0 when it is not running.
func (c *Consul) PID() int { return c.proc.PID() }

// Process is the agent's process, for faults (Kill, Signal); Start
// restarts it after a Kill.
func (c *Consul) Process() *Process { return c.proc }

// Log returns the agent's output so far.
func (c *Consul) Log() string { return c.proc.Log() }

// RegisterBulk registers services×instances through the catalog API
// (PUT /v1/catalog/register): instance i of service s is svc-<s>-<i> of
// service svc-<s> on port 1000+s, on node node-<i> at 198.51.100.<i+1>,
// with a passing check; workers requests are in flight at once (the agent
// needs MaxConnsPerClient above that).
func (c *Consul) RegisterBulk(t testing.TB, services, instances, workers int) {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: workers}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	type job struct{ s, i int }
	jobs := make(chan job)
	var wg sync.WaitGroup
	var failed atomic.Value
	for range workers {
		wg.Go(func() {
			for j := range jobs {
				id := fmt.Sprintf("svc-%d-%d", j.s, j.i)
				body, _ := json.Marshal(map[string]any{
					"Node":           fmt.Sprintf("node-%d", j.i),
					"Address":        fmt.Sprintf("198.51.100.%d", j.i+1),
					"Service":        map[string]any{"ID": id, "Service": fmt.Sprintf("svc-%d", j.s), "Port": 1000 + j.s},
					"Check":          map[string]any{"CheckID": fmt.Sprintf("check-%d-%d", j.s, j.i), "Name": "up", "Status": "passing", "ServiceID": id},
					"SkipNodeUpdate": true,
				})
				if err := put(cl, "http://"+c.HTTPAddr+"/v1/catalog/register", body); err != nil {
					failed.Store(err)
				}
			}
		})
	}
	for s := range services {
		for i := range instances {
			jobs <- job{s, i}
		}
	}
	close(jobs)
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		t.Fatalf("consul: register: %v", err)
	}
}

func put(cl *http.Client, url string, body []byte) error {
	req, err := http.NewRequest(http.MethodPut, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT %s: %s", url, resp.Status)
	}
	return nil
}

// RegisterSpread registers services×instances like RegisterBulk (instance
// i of service s is svc-<s>-<i> of svc-<s> on port 1000+s, with a passing
// check), but spreads them over nodes of perNode instances each
// (node-<k> at 10.<k>), as real catalogs are, and writes them in
// transactions of 64 instances (PUT /v1/txn), workers at once. An agent
// slows down with thousands of services on one node (its event publisher
// reads all checks of the node for every change there), so large catalogs
// use this.
func (c *Consul) RegisterSpread(t testing.TB, services, instances, perNode, workers int) {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: workers}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	txn := func(ops []map[string]any) error {
		body, _ := json.Marshal(ops)
		return put(cl, "http://"+c.HTTPAddr+"/v1/txn", body)
	}
	node := func(k int) string { return fmt.Sprintf("node-%d", k) }
	nodes := (services*instances + perNode - 1) / perNode
	var ops []map[string]any
	for k := range nodes {
		ops = append(ops, map[string]any{"Node": map[string]any{"Verb": "set", "Node": map[string]any{
			"Node": node(k), "Address": fmt.Sprintf("10.%d.%d.%d", k>>16, (k>>8)&255, k&255)}}})
		if len(ops) == 64 || k == nodes-1 {
			if err := txn(ops); err != nil {
				t.Fatalf("consul: register nodes: %v", err)
			}
			ops = nil
		}
	}
	jobs := make(chan []map[string]any)
	var wg sync.WaitGroup
	var failed atomic.Value
	for range workers {
		wg.Go(func() {
			for ops := range jobs {
				if err := txn(ops); err != nil {
					failed.Store(err)
				}
			}
		})
	}
	for s := range services {
		for i := range instances {
			id, n := fmt.Sprintf("svc-%d-%d", s, i), node((s*instances+i)/perNode)
			ops = append(ops,
				map[string]any{"Service": map[string]any{"Verb": "set", "Node": n, "Service": map[string]any{
					"ID": id, "Service": fmt.Sprintf("svc-%d", s), "Port": 1000 + s}}},
				map[string]any{"Check": map[string]any{"Verb": "set", "Check": map[string]any{
					"Node": n, "CheckID": fmt.Sprintf("check-%d-%d", s, i), "Name": "up", "Status": "passing", "ServiceID": id}}})
			if len(ops) == 128 {
				jobs <- ops
				ops = nil
			}
		}
	}
	if len(ops) > 0 {
		jobs <- ops
	}
	close(jobs)
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		t.Fatalf("consul: register: %v", err)
	}
}
