package seam_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/file"
	"github.com/meshfed/meshfed/registries/filewatch"
	"github.com/meshfed/meshfed/registries/registrytest"
	"github.com/meshfed/meshfed/test/logbuf"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func svcYAML(name, addr string) string {
	return "services:\n  - name: " + name + "\n    ports:\n      - {name: http, port: 80, protocol: HTTP}\n    endpoints:\n      - address: " + addr + "\n"
}

// seam is one file registry (config block → New → Run) publishing into a
// real aggregator that serves snapshots.
type seam struct {
	t    *testing.T
	c    registries.Common
	reg  *file.Registry
	agg  *aggregate.Aggregator
	logs *logbuf.Buffer // the registry's log, INFO and above
}

// newSeam builds the file registry name over the files of o, and an
// aggregator with opts and ro (Common is set here). Nothing runs yet.
func newSeam(t *testing.T, name string, o filewatch.Options, opts aggregate.Options, ro aggregate.RegistryOptions) *seam {
	t.Helper()
	c := registries.Common{Name: name, Kind: "file", Domain: "vm.internal"}
	cfg := &file.Config{Options: o}
	cfg.ApplyDefaults()
	logs := &logbuf.Buffer{}
	reg, err := cfg.New(c, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	agg := aggregate.New(opts)
	ro.Common = c
	agg.AddRegistry(ro)
	return &seam{t: t, c: c, reg: reg.(*file.Registry), agg: agg, logs: logs}
}

// restore hands the aggregator a saved state of one endpoint per host
// (hostname → address), as a warm start does.
func (s *seam) restore(hosts map[string]string) {
	s.t.Helper()
	var saved []model.Service
	for h, addr := range hosts {
		saved = append(saved, model.Service{Hostname: h, Ports: []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}},
			Endpoints: []model.Endpoint{{Address: addr, Source: model.Source{Registry: s.c.Name}}}})
	}
	if !s.agg.Restore(s.c.Shard(), saved, nil) {
		s.t.Fatal("Restore refused")
	}
}

// start runs the aggregator and then the registry until the test ends.
func (s *seam) start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.agg.Serve(ctx) }()
	s.t.Cleanup(func() { cancel(); <-done })
	registrytest.Start(s.t, s.reg, s.agg)
}

// served returns the first endpoint address served for host ("" if none).
func (s *seam) served(host string) string {
	svc, ok := s.agg.Snapshot().Service(host)
	if !ok || len(svc.Endpoints) == 0 {
		return ""
	}
	return svc.Endpoints[0].Address
}

// endpoints returns how many endpoints host has served (-1: not served).
func (s *seam) endpoints(host string) int {
	svc, ok := s.agg.Snapshot().Service(host)
	if !ok {
		return -1
	}
	return len(svc.Endpoints)
}

// waitFor polls the registry's status until cond holds (15s at most), and
// returns that status; watch names the host whose address a timeout shows.
func (s *seam) waitFor(what, watch string, cond func(aggregate.RegistryStatus) bool) aggregate.RegistryStatus {
	s.t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		st, _ := s.agg.Registry(s.c.Name)
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out waiting for %s; registry %+v, %s at %q", what, st, watch, s.served(watch))
		}
	}
}
