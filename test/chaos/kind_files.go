package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// writeAtomic replaces path as editors and config management do.
func writeAtomic(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// fileSet is the instances a file kind writes; every change rewrites the
// file from it.
type fileSet struct {
	mu     sync.Mutex
	path   string
	insts  map[int]Instance
	broken bool
	bad    bool
	render func(insts []Instance, bad bool) string
}

func (f *fileSet) apply(in Instance, remove bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if remove {
		delete(f.insts, in.ID)
	} else {
		f.insts[in.ID] = in
	}
	return f.write()
}

func (f *fileSet) write() error {
	if f.broken {
		return writeAtomic(f.path, "services: [ {name: broken\n  this is: not YAML: [\n")
	}
	insts := make([]Instance, 0, len(f.insts))
	for _, in := range f.insts {
		insts = append(insts, in)
	}
	slices.SortFunc(insts, func(a, b Instance) int { return a.ID - b.ID })
	return writeAtomic(f.path, f.render(insts, f.bad))
}

func (f *fileSet) Break(on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.broken = on
	return f.write()
}

func (f *fileSet) Bad(_ context.Context, on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bad = on
	return f.write()
}

// fileBounds: a file replaced by rename is read after the settle time
// (1s) and published through the debounce (docs/registries/file.md);
// Push 10s is that with slack, Heal the same plus a re-read.
var fileBounds = Bounds{Push: 10 * time.Second, Heal: 30 * time.Second}

// servicesFileKind is a `file` registry over one services file.
type servicesFileKind struct{ fileSet }

func newServicesFileKind(dir string) *servicesFileKind {
	k := &servicesFileKind{fileSet{path: filepath.Join(dir, "services.yaml"), insts: map[int]Instance{}}}
	k.render = k.renderFile
	return k
}

func (k *servicesFileKind) Name() string { return "file" }
func (k *servicesFileKind) Entry() string {
	return fmt.Sprintf("{name: file, kind: file, domain: vm, file: {path: %q}}", k.path)
}
func (k *servicesFileKind) Host(svc int) string { return fmt.Sprintf("f%d.vm", svc) }
func (k *servicesFileKind) Port(svc int) int    { return 8400 + svc }
func (k *servicesFileKind) Bounds() Bounds      { return fileBounds }
func (k *servicesFileKind) Add(_ context.Context, in Instance) error {
	return k.apply(in, false)
}
func (k *servicesFileKind) SetHealth(_ context.Context, in Instance) error {
	return k.apply(in, false)
}
func (k *servicesFileKind) Remove(_ context.Context, in Instance) error {
	return k.apply(in, true)
}

func (k *servicesFileKind) renderFile(insts []Instance, bad bool) string {
	var b strings.Builder
	b.WriteString("services:\n")
	for svc := range churnServices {
		fmt.Fprintf(&b, "  - name: f%d\n    ports: [{name: grpc, port: %d, protocol: GRPC}]\n    endpoints:\n", svc, k.Port(svc))
		for _, in := range insts {
			if in.Svc != svc {
				continue
			}
			h := "HEALTHY"
			if !in.Healthy {
				h = "UNHEALTHY"
			}
			fmt.Fprintf(&b, "      - {address: %s, health: %s, locality: r1/z1}\n", in.IP, h)
		}
		if bad && svc == 0 {
			// Broadcast: quarantined alone by the gate.
			b.WriteString("      - {address: 255.255.255.255, locality: r1/z1}\n")
		}
	}
	return b.String()
}

// serviceEntryKind is a `serviceentry` registry over one file of
// ServiceEntries with inline endpoints. ServiceEntry endpoints have no
// health: the churn only adds and removes (Healthy stays true).
type serviceEntryKind struct{ fileSet }

func newServiceEntryKind(dir string) *serviceEntryKind {
	if err := os.MkdirAll(filepath.Join(dir, "istio"), 0o755); err != nil {
		panic(err)
	}
	k := &serviceEntryKind{fileSet{path: filepath.Join(dir, "istio", "entries.yaml"), insts: map[int]Instance{}}}
	k.render = k.renderFile
	return k
}

func (k *serviceEntryKind) Name() string { return "istio" }
func (k *serviceEntryKind) Entry() string {
	return fmt.Sprintf("{name: istio, kind: serviceentry, domain: se.example, serviceentry: {path: %q}}", filepath.Dir(k.path))
}
func (k *serviceEntryKind) Host(svc int) string { return fmt.Sprintf("e%d.se.example", svc) }
func (k *serviceEntryKind) Port(svc int) int    { return 8700 + svc }
func (k *serviceEntryKind) Bounds() Bounds      { return fileBounds }
func (k *serviceEntryKind) NoHealth()           {}
func (k *serviceEntryKind) Add(_ context.Context, in Instance) error {
	return k.apply(in, false)
}
func (k *serviceEntryKind) SetHealth(_ context.Context, in Instance) error {
	return k.apply(in, false)
}
func (k *serviceEntryKind) Remove(_ context.Context, in Instance) error {
	return k.apply(in, true)
}

func (k *serviceEntryKind) renderFile(insts []Instance, bad bool) string {
	var b strings.Builder
	for svc := range churnServices {
		fmt.Fprintf(&b, "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: e%d, namespace: chaos}\nspec:\n"+
			"  hosts: [%s]\n  ports: [{number: %d, name: grpc, protocol: GRPC}]\n  resolution: STATIC\n  endpoints:\n", svc, k.Host(svc), k.Port(svc))
		for _, in := range insts {
			if in.Svc == svc {
				fmt.Fprintf(&b, "    - {address: %s, locality: r1/z1}\n", in.IP)
			}
		}
		if bad && svc == 0 {
			b.WriteString("    - {address: 999.0.0.1, locality: r1/z1}\n")
		}
		b.WriteString("---\n")
	}
	return b.String()
}

// noHealth is a Kind whose endpoints carry no health.
type noHealth interface{ NoHealth() }

// trafficSource is the `configSources` directory: a DestinationRule per
// service of the file kind, rewritten by the churn (its connection pool
// changes) and broken now and then. The checker does not follow rules; it
// sees that they never make a client NACK and never take endpoints away.
type trafficSource struct {
	dir    string
	hosts  []string
	mu     sync.Mutex
	gen    int
	broken bool
}

func (s *trafficSource) write() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for i, h := range s.hosts {
		fmt.Fprintf(&b, "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: dr-%d, namespace: chaos}\nspec:\n"+
			"  host: %s\n  trafficPolicy:\n    connectionPool: {http: {http2MaxRequests: %d}}\n---\n", i, h, 100+s.gen%50)
	}
	if s.broken {
		b.WriteString("apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: broken, namespace: chaos}\nspec:\n  host: [not, a, host]\n  trafficPolicy: 7\n")
	}
	return writeAtomic(filepath.Join(s.dir, "rules.yaml"), b.String())
}

func (s *trafficSource) edit() error {
	s.mu.Lock()
	s.gen++
	s.mu.Unlock()
	return s.write()
}

func (s *trafficSource) setBroken(on bool) error {
	s.mu.Lock()
	s.broken = on
	s.mu.Unlock()
	return s.write()
}
