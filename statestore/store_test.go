package statestore

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshfed/meshfed/model"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func services() []model.Service {
	return []model.Service{{
		Hostname: "orders.vm.internal",
		Ports:    []model.Port{{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}},
		Endpoints: []model.Endpoint{{
			Address: "10.0.0.5", Ports: map[string]uint32{"grpc": 18080}, Labels: map[string]string{"v": "1"},
			Locality: model.Locality{Region: "r", Zone: "z"}, Weight: 3, Health: model.Draining,
			Source: model.Source{Registry: "vms", Cluster: "vms"}, Origin: "services.yaml:4",
		}},
	}}
}

// run serves s until the test ends (which flushes).
func run(t *testing.T, s *Store) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func waitFile(t *testing.T, p string, present bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(p); (err == nil) == present {
			return
		}
	}
	t.Fatalf("%s present=%v never happened", p, present)
}

func TestSaveLoadRoundTrip(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	run(t, s)
	shard := model.ShardKey{Kind: "file", Name: "vms"}
	rej := []model.Rejection{{Registry: "vms", Host: "x.vm.internal", Subject: "1.2.3.4", Reason: "bad"}}
	s.Save(shard, services(), rej)
	waitFile(t, filepath.Join(dir, "vms.json"), true)

	e, ok, err := s.Load("vms", "file", time.Hour)
	if err != nil || !ok {
		t.Fatalf("Load = %v, %v", ok, err)
	}
	if !reflect.DeepEqual(e.Services, services()) || !reflect.DeepEqual(e.Rejected, rej) {
		t.Errorf("loaded %+v, want what was saved", e)
	}
	if _, ok, err := s.Load("vms", "consul", time.Hour); ok || err == nil {
		t.Errorf("Load of another kind = %v, %v; want an error", ok, err)
	}
	if _, ok, err := s.Load("other", "file", time.Hour); ok || err != nil {
		t.Errorf("Load of nothing saved = %v, %v; want false, nil", ok, err)
	}
	s.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if _, ok, err := s.Load("vms", "file", time.Hour); ok || err == nil {
		t.Errorf("Load older than maxAge = %v, %v; want an error", ok, err)
	}

	s.Delete("vms")
	waitFile(t, filepath.Join(dir, "vms.json"), false)
}

func TestOpenRemovesUnfinishedWrites(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tmp := filepath.Join(dir, "vms.123"+tmpSuffix)
	if err := os.WriteFile(tmp, []byte(`{"version":1,"regi`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); err == nil {
		t.Error("unfinished temporary file still there after Open")
	}
}

// A removal wins: a Save that arrives after Delete (the aggregator accepted
// the removed registry's last update while it was being removed) neither
// writes the file again nor makes the state loadable when the name is
// added back; once revived, the new instance's states are saved.
func TestDeleteWinsOverLateSave(t *testing.T) {
	t.Parallel()
	s, dir := openRunning(t)
	file := filepath.Join(dir, "vms.json")
	shard := model.ShardKey{Kind: "file", Name: "vms"}
	s.Save(shard, services(), nil)
	waitFile(t, file, true)

	s.Delete("vms")
	s.Save(shard, services(), nil) // in flight when the registry was removed
	waitFile(t, file, false)
	// Let Serve handle whatever is pending, then check the file stays away.
	s.Save(model.ShardKey{Kind: "file", Name: "other"}, services(), nil)
	waitFile(t, filepath.Join(dir, "other.json"), true)
	if _, err := os.Stat(file); err == nil {
		t.Fatal("the removed registry's state file was written again by a late Save")
	}
	if e, ok, err := s.Load("vms", "file", time.Hour); ok || err != nil {
		t.Fatalf("Load after Delete = %+v, %v, %v; want nothing", e, ok, err)
	}

	s.Revive("vms")
	if _, ok, _ := s.Load("vms", "file", time.Hour); ok {
		t.Fatal("Load after Revive restored the removed instance's state")
	}
	fresh := services()
	fresh[0].Hostname = "billing.vm.internal"
	s.Save(shard, fresh, nil)
	waitFile(t, file, true)
	e, ok, err := s.Load("vms", "file", time.Hour)
	if err != nil || !ok || e.Services[0].Hostname != "billing.vm.internal" {
		t.Fatalf("Load after Revive and Save = %+v, %v, %v; want the new instance's state", e, ok, err)
	}
}

// Load finds nothing for a deleted name even when its file could not be
// removed (here: written back behind the store's back).
func TestDeletedNameNotLoaded(t *testing.T) {
	t.Parallel()
	s, dir := openRunning(t)
	file := filepath.Join(dir, "vms.json")
	s.Save(model.ShardKey{Kind: "file", Name: "vms"}, services(), nil)
	waitFile(t, file, true)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s.Delete("vms")
	waitFile(t, file, false)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Load("vms", "file", time.Hour); ok || err != nil {
		t.Fatalf("Load of a deleted name = %v, %v; want nothing", ok, err)
	}
}

// openRunning opens a store in a new directory and serves it until the
// test ends.
func openRunning(t *testing.T) (*Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	run(t, s)
	return s, dir
}

// TestDeleteWinsOverWriteInFlight: a state whose write is under way when
// its registry is removed (and added back at once) is never renamed into
// place: the file shows nothing of the removed instance, only the new
// instance's state once it saves one.
func TestDeleteWinsOverWriteInFlight(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.pause = 300 * time.Millisecond // every write pauses half-way
	run(t, s)
	shard := model.ShardKey{Kind: "file", Name: "vms"}
	s.Save(shard, services(), nil)
	// Wait for the write's temporary file: the write is under way.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if m, _ := filepath.Glob(filepath.Join(dir, "vms.*"+tmpSuffix)); len(m) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the write never started")
		}
	}
	s.Delete("vms")
	s.Revive("vms")
	fresh := services()
	fresh[0].Hostname = "billing.vm.internal"
	s.Save(shard, fresh, nil)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		e, ok, err := s.Load("vms", "file", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if ok && e.Services[0].Hostname != "billing.vm.internal" {
			t.Fatalf("the removed instance's state was written after Delete and Revive: %s", e.Services[0].Hostname)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the new instance's state was never written")
		}
	}
}
