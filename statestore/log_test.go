package statestore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/model"
)

// svcN is service i in version v.
func svcN(i, v int) model.Service {
	return model.Service{
		Hostname:  fmt.Sprintf("s%03d.vm.internal", i),
		Ports:     []model.Port{{Name: "http", Number: 8080, Protocol: model.ProtocolHTTP}},
		Endpoints: []model.Endpoint{{Address: fmt.Sprintf("10.0.%d.%d", i, v%250+1), Weight: 1, Source: model.Source{Registry: "vms", Cluster: "vms"}}},
	}
}

// waitWritten waits until s finished n writes.
func waitWritten(t *testing.T, s *Store, n uint64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); s.Written() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes, want %d", s.Written(), n)
		}
	}
}

func lines(t *testing.T, p string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.SplitAfter(b, []byte{'\n'})[:bytes.Count(b, []byte{'\n'})]
}

// TestOneChangeAppendsOneService counts it: after a full state of 100
// services, each accepted change appends one log record holding only the
// changed service (or removed hostname), the base is not written again,
// and Load restores the base with every change.
func TestOneChangeAppendsOneService(t *testing.T) {
	t.Parallel()
	s, dir := openRunning(t)
	shard := model.ShardKey{Kind: "file", Name: "vms"}
	var state []model.Service
	for i := range 100 {
		state = append(state, svcN(i, 0))
	}
	s.Accept(shard, aggregate.Accepted{Services: state})
	waitWritten(t, s, 1)
	base, err := os.ReadFile(filepath.Join(dir, "vms.json"))
	if err != nil {
		t.Fatal(err)
	}
	rej := []model.Rejection{{Registry: "vms", Host: "x.vm.internal", Reason: "bad"}}
	s.Accept(shard, aggregate.Accepted{Delta: true, Changed: []model.Service{svcN(7, 1)}})
	waitWritten(t, s, 2)
	s.Accept(shard, aggregate.Accepted{Delta: true, Removed: []string{svcN(9, 0).Hostname}, Rejected: rej})
	waitWritten(t, s, 3)
	s.Accept(shard, aggregate.Accepted{Delta: true, Changed: []model.Service{svcN(200, 0)}, Rejected: rej})
	waitWritten(t, s, 4)

	if b, _ := os.ReadFile(filepath.Join(dir, "vms.json")); !bytes.Equal(b, base) {
		t.Error("the base was written again for a change")
	}
	ls := lines(t, filepath.Join(dir, "vms"+logSuffix))
	if len(ls) != 3 {
		t.Fatalf("%d log records after 3 changes, want 3", len(ls))
	}
	for i, l := range ls {
		r, ok := parseRecord(l)
		if !ok || len(r.Changed)+len(r.Removed) != 1 {
			t.Errorf("record %d: %d services and %d removals (ok %v), want one", i, len(r.Changed), len(r.Removed), ok)
		}
	}
	want := append([]model.Service(nil), state[:7]...)
	want = append(want, svcN(7, 1), state[8])
	want = append(want, state[10:]...)
	want = append(want, svcN(200, 0))
	e, ok, err := s.Load("vms", "file", time.Hour)
	if err != nil || !ok {
		t.Fatalf("Load = %v, %v", ok, err)
	}
	if !reflect.DeepEqual(e.Services, want) || !reflect.DeepEqual(e.Rejected, rej) {
		t.Errorf("Load restored %d services %v, want the base with the three changes", len(e.Services), e.Rejected)
	}
}

// TestDamagedRecordEndsReplay: Load stops at a record cut short by a
// kill or damaged on disk, and restores the state before it; a log left
// behind by an older base is ignored.
func TestDamagedRecordEndsReplay(t *testing.T) {
	t.Parallel()
	s, dir := openRunning(t)
	shard := model.ShardKey{Kind: "file", Name: "vms"}
	s.Save(shard, []model.Service{svcN(1, 0), svcN(2, 0)}, nil)
	waitWritten(t, s, 1)
	for v := 1; v <= 3; v++ {
		s.SaveDelta(shard, []model.Service{svcN(1, v)}, nil, nil)
		waitWritten(t, s, uint64(1+v))
	}
	logPath := filepath.Join(dir, "vms"+logSuffix)
	full, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	ls := lines(t, logPath)
	loadV := func(what string, want int) {
		t.Helper()
		e, ok, err := s.Load("vms", "file", time.Hour)
		if err != nil || !ok {
			t.Fatalf("%s: Load = %v, %v", what, ok, err)
		}
		if got := e.Services[0].Endpoints[0].Address; got != svcN(1, want).Endpoints[0].Address {
			t.Errorf("%s: restored s001 at %s, want version %d", what, got, want)
		}
	}
	loadV("whole log", 3)
	cut := len(full) - len(ls[2])/2
	if err := os.WriteFile(logPath, full[:cut], 0o600); err != nil {
		t.Fatal(err)
	}
	loadV("last record cut short", 2)
	bad := bytes.Clone(full)
	bad[len(ls[0])+20] ^= 1 // in the second record's JSON
	if err := os.WriteFile(logPath, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	loadV("second record damaged", 1)

	// A new base; the old log put back (as a kill between the rename of
	// the base and the removal of the log leaves it).
	if err := os.WriteFile(logPath, full, 0o600); err != nil {
		t.Fatal(err)
	}
	s.Save(shard, []model.Service{svcN(1, 10), svcN(2, 0)}, nil)
	waitWritten(t, s, 5)
	if _, err := os.Stat(logPath); err == nil {
		t.Fatal("the log of the older base is still there after a new base")
	}
	if err := os.WriteFile(logPath, full, 0o600); err != nil {
		t.Fatal(err)
	}
	loadV("log of an older base", 10)
}

// TestRandomSavesLoadAsAccepted: over random sequences of full states and
// changes, with logs folded into new bases at a small size, Load always
// restores the last accepted state, and the log stays bounded.
func TestRandomSavesLoadAsAccepted(t *testing.T) {
	t.Parallel()
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 9))
			dir := filepath.Join(t.TempDir(), "state")
			s, err := Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			s.minCompact = 2 << 10
			t.Cleanup(s.closeLogs)
			shard := model.ShardKey{Kind: "file", Name: "vms"}
			cur := map[string]model.Service{}
			var rej []model.Rejection
			maxLog := int64(0)
			for step := range 200 {
				// Several accepts may be pending at once: they are written
				// together.
				for range 1 + rng.IntN(3) {
					if step == 0 || rng.IntN(15) == 0 {
						cur = map[string]model.Service{}
						var list []model.Service
						for i := range rng.IntN(20) {
							list = append(list, svcN(i, step))
							cur[list[i].Hostname] = list[i]
						}
						s.Save(shard, list, rej)
						continue
					}
					var changed []model.Service
					var removed []string
					for _, i := range rng.Perm(25)[:1+rng.IntN(2)] { // changed and removed are disjoint
						if h := svcN(i, 0).Hostname; rng.IntN(3) == 0 {
							removed = append(removed, h)
							delete(cur, h)
						} else {
							sv := svcN(i, step)
							changed = append(changed, sv)
							cur[h] = sv
						}
					}
					if rng.IntN(5) == 0 {
						rej = []model.Rejection{{Registry: "vms", Host: fmt.Sprint(step), Reason: "bad"}}
					}
					s.SaveDelta(shard, changed, removed, rej)
				}
				s.flush() // as Serve does, here in step with the test
				e, ok, err := s.Load("vms", "file", time.Hour)
				if err != nil || !ok {
					t.Fatalf("step %d: Load = %v, %v", step, ok, err)
				}
				if want := sortedServices(cur); len(want)+len(e.Services) > 0 && !reflect.DeepEqual(e.Services, want) || !reflect.DeepEqual(e.Rejected, rej) {
					t.Fatalf("step %d: restored %d services, want %d", step, len(e.Services), len(want))
				}
				if fi, err := os.Stat(filepath.Join(dir, "vms"+logSuffix)); err == nil {
					base, err := os.Stat(filepath.Join(dir, "vms.json"))
					if err != nil {
						t.Fatal(err)
					}
					if fi.Size() > max(base.Size(), s.minCompact) {
						t.Fatalf("step %d: log of %d bytes over a base of %d: not folded in", step, fi.Size(), base.Size())
					}
					maxLog = max(maxLog, fi.Size())
				}
			}
			if maxLog == 0 {
				t.Error("no log written: the test checks too little")
			}
		})
	}
}

// TestServeAgainWritesBase: a Serve run again (as suture does after a
// panic) still saves the changes that follow, starting with a new base.
func TestServeAgainWritesBase(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.closeLogs)
	shard := model.ShardKey{Kind: "file", Name: "vms"}
	s.Save(shard, []model.Service{svcN(1, 0)}, nil)
	s.flush()
	s.SaveDelta(shard, []model.Service{svcN(2, 0)}, nil, nil)
	s.flush()
	s.closeLogs() // Serve returned
	s.SaveDelta(shard, []model.Service{svcN(3, 0)}, nil, nil)
	s.flush()
	e, ok, err := s.Load("vms", "file", time.Hour)
	if err != nil || !ok || len(e.Services) != 3 {
		t.Fatalf("Load = %v, %v, %d services; want 3", ok, err, len(e.Services))
	}
	if _, err := os.Stat(filepath.Join(dir, "vms"+logSuffix)); err == nil {
		t.Error("the change after Serve ran again was appended, want a new base")
	}
}

// TestVersion1FileLoads: a state file of format version 1 (before the
// log) is still restored; one of an unknown version is not.
func TestVersion1FileLoads(t *testing.T) {
	t.Parallel()
	s, dir := openRunning(t)
	write := func(version int) {
		t.Helper()
		b, err := json.Marshal(Entry{Version: version, Registry: "vms", Kind: "file", SavedAt: time.Now(), Services: []model.Service{svcN(1, 0)}})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "vms.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(1)
	if e, ok, err := s.Load("vms", "file", time.Hour); err != nil || !ok || len(e.Services) != 1 {
		t.Errorf("version 1: Load = %v, %v", ok, err)
	}
	write(3)
	if _, ok, err := s.Load("vms", "file", time.Hour); ok || err == nil {
		t.Errorf("version 3: Load = %v, %v; want an error", ok, err)
	}
}
