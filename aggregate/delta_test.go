package aggregate

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

const debugDelta = false

// fullOnly hides that the wrapped Sink takes deltas: a Publisher sends it
// full states.
type fullOnly struct{ registries.Sink }

// deltaService is a random service for host: sometimes invalid (no port,
// a bad address, a duplicate endpoint), with 0–3 endpoints.
func deltaService(r *rand.Rand, host string) model.Service {
	s := model.Service{Hostname: host, Ports: []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}}}
	switch r.IntN(12) {
	case 0:
		s.Ports = nil // rejected whole
	case 1:
		s.Ports = append(s.Ports, model.Port{Name: "http", Number: 81}) // a port dropped
	}
	for range r.IntN(4) {
		addr := fmt.Sprintf("10.0.0.%d", 1+r.IntN(6))
		if r.IntN(15) == 0 {
			addr = "not-an-ip"
		}
		s.Endpoints = append(s.Endpoints, model.Endpoint{Address: addr, Health: model.Health(r.IntN(2))})
	}
	return s
}

// TestDeltaEqualsFull publishes random sequences of changes through two
// Publishers, one to an aggregator as deltas and one to another as full
// states, and checks after every snapshot build that both serve the same
// (digest), list the same conflicts and show the same status. The hosts
// include ones that collide once normalized (case), ones outside the
// domain and invalid ones, keys that yield two services, hostnames that
// move between keys, rejections, partial states, new Runs and the
// hold-down.
func TestDeltaEqualsFull(t *testing.T) {
	t.Parallel()
	hosts := []string{"A.test", "B.test.", "x.other", "bad_host-.test"}
	for i := range 30 {
		hosts = append(hosts, fmt.Sprintf("%c.test", 'a'+i%26)+strings.Repeat("x", i/26))
	}
	var inPlace, savedDeltas atomic.Int64
	t.Cleanup(func() {
		if inPlace.Load() < 1000 {
			t.Errorf("%d steps ended with a delta applied in place, want ≥ 1000: the test checks too little", inPlace.Load())
		}
		if savedDeltas.Load() < 50 {
			t.Errorf("%d accepted inputs handed as deltas, want ≥ 50: the test checks too little", savedDeltas.Load())
		}
	})
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(seed, 7))
			o := reg("r", "file", "test")
			if seed%2 == 1 {
				o.MaxDeleteRatio = 0.5
			}
			clock := newFakeClock()
			// As OnAccepted hands them to the state store: da's changes are
			// applied to what it handed before.
			var dSaved, fSaved []model.Service
			da := New(Options{Registries: []RegistryOptions{o}, Now: clock.Now,
				OnAccepted: func(_ model.ShardKey, acc Accepted) {
					if !acc.Delta {
						dSaved = acc.Services
						return
					}
					savedDeltas.Add(1)
					m := map[string]model.Service{}
					for _, s := range dSaved {
						m[s.Hostname] = s
					}
					for _, h := range acc.Removed {
						delete(m, h)
					}
					for _, s := range acc.Changed {
						m[s.Hostname] = s
					}
					dSaved = slices.Collect(maps.Values(m))
				}})
			fa := New(Options{Registries: []RegistryOptions{o}, Now: clock.Now,
				OnAccepted: func(_ model.ShardKey, acc Accepted) {
					if acc.Delta {
						t.Fatal("a full-only registry's input was handed as a delta")
					}
					fSaved = acc.Services
				}})
			var dp, fp *registries.Publisher[string]
			newRun := func() {
				popts := registries.PublisherOptions[string]{Compare: strings.Compare}
				if seed%4 >= 2 {
					// An Assemble that rejects colliding hostnames (as Nacos').
					popts.Assemble, popts.ConcatUnlessDuplicate = rejectCollisions, true
				}
				dp = registries.NewPublisher(o.Common, da, nil, popts)
				fp = registries.NewPublisher(o.Common, fullOnly{fa}, nil, popts)
			}
			newRun()
			deltas := 0
			both := func(f func(p *registries.Publisher[string])) { f(dp); f(fp) }
			for step := range 300 {
				key := fmt.Sprintf("k%d", r.IntN(25))
				switch op := r.IntN(20); {
				case op < 9:
					c := registries.Converted{Services: []model.Service{deltaService(r, hosts[r.IntN(len(hosts))])}}
					if r.IntN(10) == 0 {
						c.Services = append(c.Services, deltaService(r, hosts[r.IntN(len(hosts))]))
					}
					if r.IntN(8) == 0 {
						c.Rejected = []model.Rejection{{Host: key, Subject: key, Reason: "cannot convert"}}
					}
					both(func(p *registries.Publisher[string]) { p.Set(key, c) })
					if debugDelta {
						t.Logf("step %d: set %s %v", step, key, c)
					}
				case op < 12:
					both(func(p *registries.Publisher[string]) { p.Delete(key) })
					if debugDelta {
						t.Logf("step %d: delete %s", step, key)
					}
				case op == 12:
					keep := r.IntN(25)
					both(func(p *registries.Publisher[string]) {
						p.Retain(func(k string) bool { return k != fmt.Sprintf("k%d", keep) })
					})
				case op < 17:
					cond := registries.Condition{}
					if r.IntN(6) == 0 {
						cond.Err = "part of the backend fails"
					}
					both(func(p *registries.Publisher[string]) { p.Flush(cond) })
					if debugDelta {
						t.Logf("step %d: flush %v", step, cond)
					}
				case op == 18 && r.IntN(4) == 0:
					// New options: what is served and held is made again.
					o.Locality = model.Locality{Region: fmt.Sprint("region", step)}
					da.AddRegistry(o)
					fa.AddRegistry(o)
				case op == 17:
					// A new Run: the registry's own state starts anew.
					end := registries.Update{Condition: registries.Condition{Err: "restarted"}, Ended: true}
					da.Publish(o.Shard(), end)
					fa.Publish(o.Shard(), end)
					newRun()
				default:
					if r.IntN(3) == 0 {
						clock.Advance(2 * DefaultHoldDown) // a held update is applied
					}
					da.rebuild(clock.Now())
					fa.rebuild(clock.Now())
					if debugDelta {
						t.Logf("step %d: rebuild", step)
					}
					compareAggregates(t, step, da, fa)
					byHost := func(a, b model.Service) int { return strings.Compare(a.Hostname, b.Hostname) }
					if d, f := slices.SortedFunc(slices.Values(dSaved), byHost), slices.SortedFunc(slices.Values(fSaved), byHost); !reflect.DeepEqual(d, f) {
						t.Fatalf("step %d: states saved differ:\ndelta: %v\nfull:  %v", step, d, f)
					}
				}
				if lr := da.loop["r"]; lr != nil && lr.raw != nil && lr.raw.delta != nil {
					deltas++
				}
			}
			da.rebuild(clock.Now())
			fa.rebuild(clock.Now())
			compareAggregates(t, -1, da, fa)
			inPlace.Add(int64(deltas))
			t.Logf("steps ending with a delta applied in place: %d", deltas)
		})
	}
}

// rejectCollisions is Concat but for services whose hostname (as DNS
// names compare) another service has: those are rejected.
func rejectCollisions(es []registries.Entry[string]) ([]model.Service, []model.Rejection) {
	n := map[string]int{}
	for _, e := range es {
		for _, s := range e.Services {
			n[strings.ToLower(strings.TrimSuffix(s.Hostname, "."))]++
		}
	}
	services := []model.Service{}
	var rejected []model.Rejection
	for _, e := range es {
		rejected = append(rejected, e.Rejected...)
		for _, s := range e.Services {
			if n[strings.ToLower(strings.TrimSuffix(s.Hostname, "."))] > 1 {
				rejected = append(rejected, model.Rejection{Host: s.Hostname, Subject: e.Key, Reason: "hostname collides"})
				continue
			}
			services = append(services, s)
		}
	}
	return services, rejected
}

// compareAggregates fails t unless a and b serve and show the same.
func compareAggregates(t *testing.T, step int, a, b *Aggregator) {
	t.Helper()
	as, bs := a.Snapshot(), b.Snapshot()
	if da, db := model.DigestOf(as), model.DigestOf(bs); !reflect.DeepEqual(da, db) {
		t.Fatalf("step %d: delta and full states serve different services:\ndelta: %v\nfull:  %v", step, hostsOf(as), hostsOf(bs))
	}
	for _, s := range as.Services() {
		if got, ok := as.Service(s.Hostname); !ok || got != s {
			t.Fatalf("step %d: Service(%q) does not find the listed service", step, s.Hostname)
		}
	}
	if ca, cb := a.Conflicts(), b.Conflicts(); !reflect.DeepEqual(ca, cb) {
		t.Fatalf("step %d: conflicts differ:\ndelta: %v\nfull:  %v", step, ca, cb)
	}
	if ra, rb := a.Registries(), b.Registries(); !reflect.DeepEqual(ra, rb) {
		t.Fatalf("step %d: statuses differ:\ndelta: %+v\nfull:  %+v", step, ra, rb)
	}
}

func hostsOf(s *model.Snapshot) []string {
	var out []string
	for _, svc := range s.Services() {
		out = append(out, fmt.Sprintf("%s%v", svc.Hostname, svc.Endpoints))
	}
	return out
}

// TestDeltaTouchesOneService: with 1,000 services published by a
// Publisher, a change of one service makes the aggregate look at that one
// service only (compare it, normalize it), not at the shard, the
// snapshot serves the change, and the state store is handed the change
// (one service, one removal), not the shard.
func TestDeltaTouchesOneService(t *testing.T) {
	t.Parallel()
	o := reg("bench", "bench", "bench.local")
	var accepted []Accepted // as the state store gets them
	a := New(Options{Registries: []RegistryOptions{o}, OnAccepted: func(_ model.ShardKey, acc Accepted) { accepted = append(accepted, acc) }})
	p := registries.NewPublisher(o.Common, a, nil, registries.PublisherOptions[string]{Compare: strings.Compare})
	state := benchShard(1000, 3)
	for _, s := range state {
		p.Put(s.Hostname, registries.One(s, true, nil))
	}
	p.Flush(registries.Condition{})
	a.rebuild(a.now())
	if len(accepted) != 1 || accepted[0].Delta || len(accepted[0].Services) != 1000 {
		t.Fatalf("first state handed to OnAccepted as %d calls, want one of 1000 services in full", len(accepted))
	}
	memo := a.loop["bench"].memo
	if memo.visits != 1000 || memo.calls != 1000 {
		t.Fatalf("first state: %d services looked at, %d normalized; want 1000, 1000", memo.visits, memo.calls)
	}

	s := state[500]
	s.Endpoints = append([]model.Endpoint{}, s.Endpoints...)
	s.Endpoints[1].Address = "10.99.0.1"
	p.Put(s.Hostname, registries.One(s, true, nil))
	p.Delete(state[7].Hostname)
	p.Flush(registries.Condition{})
	a.rebuild(a.now())

	if memo != a.loop["bench"].memo || memo.visits != 1002 || memo.calls != 1001 {
		t.Fatalf("a change of one service and a removal: %d services looked at, %d normalized; want 2 and 1 more", memo.visits-1000, memo.calls-1000)
	}
	if acc := accepted[len(accepted)-1]; len(accepted) != 2 || !acc.Delta || acc.Services != nil ||
		len(acc.Changed) != 1 || acc.Changed[0].Hostname != s.Hostname || !slices.Equal(acc.Removed, []string{state[7].Hostname}) {
		t.Fatalf("the change handed to OnAccepted: delta %v, %d services in full, %d changed, removed %v (%d calls); want a delta of %s and the removal of %s",
			acc.Delta, len(acc.Services), len(acc.Changed), acc.Removed, len(accepted), s.Hostname, state[7].Hostname)
	}
	snap := a.Snapshot()
	if snap.Len() != 999 {
		t.Fatalf("%d services served, want 999", snap.Len())
	}
	if _, ok := snap.Service(state[7].Hostname); ok {
		t.Fatalf("removed service %s still served", state[7].Hostname)
	}
	if got := addrs(snap, s.Hostname); !slices.Contains(got, "10.99.0.1") || len(got) != 3 {
		t.Fatalf("changed service serves %v", got)
	}
	if st, _ := a.Registry("bench"); st.Services != 999 || st.Endpoints != 999*3 {
		t.Fatalf("status counts %d services, %d endpoints; want 999, %d", st.Services, st.Endpoints, 999*3)
	}
}

// TestDeltaWhileHeldDown: a delta that the hold-down holds, and one that
// changes the held state, give what full states give: the held update is
// served once confirmed, with the later change.
func TestDeltaWhileHeldDown(t *testing.T) {
	t.Parallel()
	o := reg("r", "file", "test")
	o.MaxDeleteRatio = 0.5
	clock := newFakeClock()
	da := New(Options{Registries: []RegistryOptions{o}, Now: clock.Now})
	fa := New(Options{Registries: []RegistryOptions{o}, Now: clock.Now})
	popts := registries.PublisherOptions[string]{Compare: strings.Compare}
	dp := registries.NewPublisher(o.Common, da, nil, popts)
	fp := registries.NewPublisher(o.Common, fullOnly{fa}, nil, popts)
	both := func(f func(p *registries.Publisher[string])) {
		f(dp)
		f(fp)
		da.rebuild(clock.Now())
		fa.rebuild(clock.Now())
	}
	for _, h := range []string{"a", "b", "c", "d"} {
		both(func(p *registries.Publisher[string]) { p.Put(h, registries.One(svc(h+".test", "10.0.0.1"), true, nil)) })
	}
	both(func(p *registries.Publisher[string]) { p.Flush(registries.Condition{}) })
	both(func(p *registries.Publisher[string]) {
		p.Delete("b")
		p.Delete("c")
		p.Delete("d")
		p.Flush(registries.Condition{})
	})
	if st, _ := da.Registry("r"); st.Hold == nil || st.Services != 4 {
		t.Fatalf("a delta dropping 3 of 4 endpoints: status %+v, want held with 4 services served", st)
	}
	compareAggregates(t, 1, da, fa)
	both(func(p *registries.Publisher[string]) {
		p.Put("a", registries.One(svc("a.test", "10.0.0.2"), true, nil))
		p.Flush(registries.Condition{})
	})
	if st, _ := da.Registry("r"); st.Hold != nil || st.Services != 1 {
		t.Fatalf("a second delta dropping as much confirms: status %+v, want 1 service served", st)
	}
	if got := addrs(da.Snapshot(), "a.test"); !slices.Equal(got, []string{"10.0.0.2"}) {
		t.Fatalf("a.test serves %v, want the change made while held", got)
	}
	compareAggregates(t, 2, da, fa)
}
