package servers

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hudl/fargo"
	logging "github.com/op/go-logging"
)

// PolarisVersion is the Polaris that tools/testservers builds. Polaris
// serves the Eureka REST API; Netflix's own Eureka server (Java) cannot be
// installed here.
const PolarisVersion = "1.18.1"

func init() {
	// fargo talks through a package-level client and logs every request at
	// INFO: no idle connections (for goleak) and warnings only.
	fargo.HttpClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	logging.SetLevel(logging.WARNING, "fargo")
}

// PolarisBinary returns the path of the Polaris server built by
// `tools/testservers/build.sh polaris`, and whether it exists.
func PolarisBinary() (string, bool) {
	return builtBinary("polaris-"+PolarisVersion, "polaris-server")
}

// Polaris is a running Polaris server, standalone with a bolt store in a
// temp dir and its Eureka API (and, WithNacos, its Nacos API) on loopback
// ports, owned by one test. Its state survives Stop and Start.
type Polaris struct {
	// URL is the Eureka service URL, http://127.0.0.1:port/eureka.
	URL string
	// NacosAddr is the Nacos HTTP API's host:port (the gRPC API listens on
	// port+1000, as Nacos'); "" without WithNacos.
	NacosAddr string

	proc *Process
}

// PolarisOption changes what StartPolaris serves.
type PolarisOption func(*polarisOptions)

type polarisOptions struct{ nacos bool }

// WithNacos also serves the Nacos API (Polaris' service-nacos apiserver:
// v1 HTTP on a free port, v2 gRPC on that port + 1000).
func WithNacos() PolarisOption { return func(o *polarisOptions) { o.nacos = true } }

// nacosAPIServer is the service-nacos apiserver block of polarisConfig.
const nacosAPIServer = `  - name: service-nacos
    option:
      listenIP: 127.0.0.1
      listenPort: %d
      defaultNamespace: default
      connLimit: {openConnLimit: false, maxConnPerHost: 128, maxConnLimit: 10240}
`

// polarisConfig is a minimal standalone polaris-server.yaml: the Eureka
// apiserver only (refreshed every second, so registrations show within
// ~1-2s), a bolt store, in-memory heartbeats, no self-registration.
const polarisConfig = `bootstrap:
  logger:
    default: {rotateOutputPath: log/default.log, errorRotateOutputPath: log/default-error.log, outputLevel: warn}
    eureka: {rotateOutputPath: log/eureka.log, errorRotateOutputPath: log/eureka-error.log, outputLevel: info}
    nacos-apiserver: {rotateOutputPath: log/nacos.log, errorRotateOutputPath: log/nacos-error.log, outputLevel: info}
  startInOrder: {open: true, key: sz}
  polaris_service: {enable_register: false}
apiservers:
  - name: service-eureka
    option:
      listenIP: 127.0.0.1
      listenPort: %d
      namespace: default
      refreshInterval: 1
      deltaExpireInterval: 60
      enableSelfPreservation: false
%snamespace: {autoCreate: true}
naming:
  autoCreate: true
  batch:
    register: {open: true, queueSize: 1024, waitTime: 32ms, maxBatchCount: 128, concurrency: 4, dropExpireTask: true, taskLife: 30s}
    deregister: {open: true, queueSize: 1024, waitTime: 32ms, maxBatchCount: 128, concurrency: 4}
healthcheck:
  open: true
  service: polaris.checker
  slotNum: 30
  minCheckInterval: 1s
  maxCheckInterval: 30s
  batch:
    heartbeat: {open: true, queueSize: 1024, waitTime: 32ms, maxBatchCount: 32, concurrency: 4}
  checkers:
    - name: heartbeatMemory
config: {open: %t}
cache: {diffTime: 5s}
store:
  name: boltdbStore
  option: {path: %s}
auth:
  user: {name: defaultUser, option: {salt: polarismesh@2021}}
  strategy: {name: defaultStrategy, option: {consoleOpen: false, clientOpen: false}}
plugin:
  history:
    entries: [{name: HistoryLogger}]
  statis:
    entries: [{name: local, option: {interval: 60}}]
`

// StartPolaris starts Polaris on free loopback ports, waits until its APIs
// answer, and stops it in t.Cleanup. It skips (or fails, see Missing) if
// the binary is not built.
func StartPolaris(t testing.TB, opts ...PolarisOption) *Polaris {
	t.Helper()
	var o polarisOptions
	for _, f := range opts {
		f(&o)
	}
	bin := needBinary(t, PolarisBinary, "polaris "+PolarisVersion, "polaris")
	dir := t.TempDir()
	port := FreePort(t)
	var extra string
	p := &Polaris{URL: "http://127.0.0.1:" + strconv.Itoa(port) + "/eureka"}
	logs := []string{"log/eureka.log"} // Polaris writes its logs under ./log
	if o.nacos {
		np := FreePortPair(t, NacosGRPCOffset)
		extra = fmt.Sprintf(nacosAPIServer, np)
		p.NacosAddr = "127.0.0.1:" + strconv.Itoa(np)
		logs = append(logs, "log/nacos.log")
	}
	// The Nacos apiserver needs the config module running.
	conf := fmt.Sprintf(polarisConfig, port, extra, o.nacos, filepath.Join(dir, "polaris.bolt"))
	if err := os.WriteFile(filepath.Join(dir, "polaris-server.yaml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	p.proc = &Process{Name: "polaris", Bin: bin, Args: []string{"start", "-c", "polaris-server.yaml"},
		Dir: dir, LogPath: filepath.Join(dir, "polaris.out"), MoreLogs: logs}
	t.Cleanup(func() { p.proc.Stop() })
	p.Start(t)
	return p
}

// Start (re)starts the server with the same port and store and waits until
// its Eureka API answers.
func (p *Polaris) Start(t testing.TB) {
	t.Helper()
	if err := p.proc.StartReady(60*time.Second, p.ready); err != nil {
		t.Fatal(err)
	}
}

func (p *Polaris) ready() error {
	if err := httpOK(noKeepAlive, p.URL+"/apps", ""); err != nil {
		return err
	}
	if p.NacosAddr == "" {
		return nil
	}
	return httpOK(noKeepAlive, "http://"+p.NacosAddr+"/nacos/v1/ns/service/list?pageNo=1&pageSize=1", "")
}

// Stop stops the server (SIGTERM, then SIGKILL after 10s) and waits for it;
// its store is kept for the next Start.
func (p *Polaris) Stop(t testing.TB) {
	t.Helper()
	if !p.proc.Stop() {
		t.Fatal("polaris: Stop while stopped")
	}
}

// Process is the server's process, for faults (Kill, Signal); Start
// restarts it after a Kill.
func (p *Polaris) Process() *Process { return p.proc }

// Log returns the server's output and its Eureka log so far.
func (p *Polaris) Log() string { return p.proc.Log() }

// Conn returns a fargo connection to the server in XML mode, the format
// Eureka clients register with.
func (p *Polaris) Conn() *fargo.EurekaConnection {
	c := fargo.NewConn(p.URL)
	return &c
}

// EurekaInstance describes an instance to register.
type EurekaInstance struct {
	App, ID, IP, HostName string
	Port, SecurePort      int // 0: disabled
	Metadata              map[string]string
	Status                fargo.StatusType // default UP
}

// Fargo returns the instance as fargo registers it: MyOwn data center and
// a one-hour lease, so no heartbeats are needed during a test.
func (e EurekaInstance) Fargo() *fargo.Instance {
	in := &fargo.Instance{
		InstanceId: e.ID, App: e.App, IPAddr: e.IP, HostName: e.HostName,
		VipAddress: e.App, Status: e.Status,
		Port: e.Port, PortEnabled: e.Port != 0,
		SecurePort: e.SecurePort, SecurePortEnabled: e.SecurePort != 0,
		DataCenterInfo: fargo.DataCenterInfo{Name: fargo.MyOwn},
		LeaseInfo:      fargo.LeaseInfo{RenewalIntervalInSecs: 30, DurationInSecs: 3600},
	}
	if in.Status == "" {
		in.Status = fargo.UP
	}
	if in.HostName == "" {
		in.HostName = e.IP
	}
	for k, v := range e.Metadata {
		in.SetMetadataString(k, v)
	}
	return in
}

// Register registers (or re-registers) the instance through the Eureka
// REST API and returns it for later status changes and deregistration.
func (p *Polaris) Register(t testing.TB, e EurekaInstance) *fargo.Instance {
	t.Helper()
	in := e.Fargo()
	if err := p.Conn().ReregisterInstance(in); err != nil {
		t.Fatalf("eureka register %s/%s: %v", e.App, e.ID, err)
	}
	return in
}

// SetStatus changes an instance's status (PUT .../status?value=S), as
// Eureka's admin tooling does for OUT_OF_SERVICE.
func (p *Polaris) SetStatus(t testing.TB, in *fargo.Instance, s fargo.StatusType) {
	t.Helper()
	if err := p.Conn().UpdateInstanceStatus(in, s); err != nil {
		t.Fatalf("eureka status %s/%s=%s: %v", in.App, in.Id(), s, err)
	}
}

// Deregister removes an instance (DELETE).
func (p *Polaris) Deregister(t testing.TB, in *fargo.Instance) {
	t.Helper()
	if err := p.Conn().DeregisterInstance(in); err != nil {
		t.Fatalf("eureka deregister %s/%s: %v", in.App, in.Id(), err)
	}
}
