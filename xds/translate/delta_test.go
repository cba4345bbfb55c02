package translate

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/model"
)

// deltaConfigs are the traffic configs TestDeltaSnapshotsTranslateAsFull
// switches between: routes between hosts (deps), subsets, and a rule that
// builds invalid resources (its host held on its last good config, the
// hosts routing to it rebuilt when that changes).
var deltaConfigs = []string{
	"",
	`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: h00, namespace: shop}
spec:
  hosts: [h00.vm.internal]
  http:
  - match: [{headers: {canary: {exact: "1"}}}]
    route: [{destination: {host: h01.vm.internal, subset: v1}}]
  - route: [{destination: {host: h02.vm.internal}, weight: 60}, {destination: {host: h03.vm.internal}, weight: 40}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: h01, namespace: shop}
spec:
  host: h01.vm.internal
  subsets: [{name: v1, labels: {v: "1"}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: h04, namespace: shop}
spec:
  hosts: [h04.vm.internal]
  http:
  - route: [{destination: {host: h05.vm.internal}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: h05, namespace: shop}
spec:
  host: h05.vm.internal
  trafficPolicy: {loadBalancer: {consistentHash: {httpCookie: {name: sid, ttl: 0s, attributes: [{name: ""}]}}}}
`,
}

// TestDeltaSnapshotsTranslateAsFull: a translator fed snapshots that say
// which hosts changed (Snapshot.DeltaFrom, as the aggregator publishes
// them) serves the same resources, changes, invalid and skipped lists
// as one fed the same snapshots without it (every host looked at), over
// random sequences of changed, removed and added services, port and
// protocol changes, and traffic config switches.
func TestDeltaSnapshotsTranslateAsFull(t *testing.T) {
	t.Parallel()
	cfgs := make([]*model.ConfigSnapshot, len(deltaConfigs))
	for i, y := range deltaConfigs {
		cfgs[i] = rawConfigSnap(t, uint64(i+1), y)
	}
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 22))
			host := func(i int) string { return fmt.Sprintf("h%02d.vm.internal", i) }
			svc := func(i int) *model.Service {
				s := testService(host(i), []uint32{80, 80, 9090}[rng.IntN(3)])
				if rng.IntN(4) == 0 {
					s.Ports[0].Protocol = model.ProtocolTCP
				}
				s.Endpoints = nil
				for j := range 1 + rng.IntN(3) {
					s.Endpoints = append(s.Endpoints, model.Endpoint{Address: fmt.Sprintf("10.0.%d.%d", i, j+1+rng.IntN(2)),
						Labels: map[string]string{"v": fmt.Sprint(1 + rng.IntN(2))}, Source: model.Source{Registry: "vms", Cluster: "vms"}})
				}
				return s
			}
			cur := map[string]*model.Service{}
			for i := range 12 {
				cur[host(i)] = svc(i)
			}
			inc, full := NewTranslator(), NewTranslator()
			cfg := cfgs[1]
			for v := uint64(1); v <= 150; v++ {
				var hosts []string
				for range 1 + rng.IntN(3) {
					i := rng.IntN(14)
					h := host(i)
					if _, ok := cur[h]; ok && rng.IntN(4) == 0 {
						delete(cur, h)
					} else {
						cur[h] = svc(i)
					}
					hosts = append(hosts, h)
				}
				if rng.IntN(20) == 0 {
					cfg = cfgs[rng.IntN(len(cfgs))]
				}
				slices.Sort(hosts)
				hosts = slices.Compact(hosts)
				list := slices.Collect(maps.Values(cur))
				a, b := model.NewSnapshot(v, slices.Clone(list)), model.NewSnapshot(v, list)
				a.Config, b.Config = cfg, cfg
				if v > 1 {
					a.DeltaFrom, a.DeltaHosts = v-1, hosts
				}
				chA, chB := inc.Translate(a), full.Translate(b)
				if d := cmp.Diff(changed(chB), changed(chA)); d != "" {
					t.Fatalf("version %d (hosts %v): changes differ (-full +delta):\n%s", v, hosts, d)
				}
				sameTranslation(t, fmt.Sprintf("version %d (hosts %v)", v, hosts), full, inc)
			}
		})
	}
}

// sameTranslation fails t unless got serves what want serves.
func sameTranslation(t *testing.T, at string, want, got *Translator) {
	t.Helper()
	for _, k := range Kinds {
		w, g := want.Resources(k), got.Resources(k)
		if d := cmp.Diff(slices.Sorted(maps.Keys(w)), slices.Sorted(maps.Keys(g))); d != "" {
			t.Fatalf("%s: %v names differ (-full +delta):\n%s", at, k, d)
		}
		for n, r := range w {
			if !proto.Equal(r, g[n]) {
				t.Fatalf("%s: %v %s differs", at, k, n)
			}
		}
	}
	if d := cmp.Diff(want.Invalid(), got.Invalid()); d != "" {
		t.Fatalf("%s: invalid differs (-full +delta):\n%s", at, d)
	}
	if d := cmp.Diff(want.Skipped(), got.Skipped()); d != "" {
		t.Fatalf("%s: skipped differs (-full +delta):\n%s", at, d)
	}
	if d := cmp.Diff(want.TrafficNotes(), got.TrafficNotes()); d != "" {
		t.Fatalf("%s: traffic notes differ (-full +delta):\n%s", at, d)
	}
}

// TestDeltaSnapshotTranslatesOneService counts it: with 1,000 services and
// no traffic config, a snapshot that changes one service looks at that
// service only; one that does not say what changed looks at all 1,000.
func TestDeltaSnapshotTranslatesOneService(t *testing.T) {
	t.Parallel()
	svcs := make([]*model.Service, 1000)
	for i := range svcs {
		svcs[i] = testService(fmt.Sprintf("s%04d.vm.internal", i), 80)
	}
	tr := NewTranslator()
	tr.Translate(model.NewSnapshot(1, slices.Clone(svcs)))
	next := *svcs[7]
	next.Endpoints = []model.Endpoint{{Address: "10.0.0.2"}}
	svcs[7] = &next
	snap := model.NewSnapshot(2, slices.Clone(svcs))
	snap.DeltaFrom, snap.DeltaHosts = 1, []string{next.Hostname}
	tr.visits = 0
	ch := tr.Translate(snap)
	if tr.visits != 1 || len(ch) != 1 {
		t.Errorf("one change: %d services looked at, %d kinds changed; want 1 and 1 (EDS)", tr.visits, len(ch))
	}
	gone := model.NewSnapshot(3, slices.Concat(svcs[:7], svcs[8:]))
	gone.DeltaFrom, gone.DeltaHosts = 2, []string{next.Hostname}
	tr.visits = 0
	tr.Translate(gone)
	if _, ok := tr.Resources(KindOf("", EndpointType))[ClusterName(next.Hostname, 80)]; tr.visits != 0 || ok {
		t.Errorf("one removal: %d services looked at (want 0), its CLA still served: %v", tr.visits, ok)
	}
	tr.visits = 0
	tr.Translate(model.NewSnapshot(4, slices.Clone(svcs)))
	if tr.visits != 1000 {
		t.Errorf("a snapshot without DeltaFrom: %d services looked at, want 1000", tr.visits)
	}
}
