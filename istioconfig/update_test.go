package istioconfig

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
)

// deltaFeed is a DeltaFeed over a fakeFeed: Deltas returns what changed
// between the parts set last and those of its previous call.
type deltaFeed struct {
	fakeFeed
	last []FeedPart
}

func (f *deltaFeed) Deltas() []FeedDelta {
	parts := f.Parts()
	out := make([]FeedDelta, len(parts))
	for i, p := range parts {
		out[i] = FeedDelta{FeedPart: FeedPart{Name: p.Name, Synced: p.Synced, Failed: p.Failed, Err: p.Err}}
		if i >= len(f.last) || !f.last[i].Synced {
			out[i].Full = p.Synced
			if p.Synced {
				out[i].Objects = slices.Clone(p.Objects)
			}
			continue
		}
		was := map[FeedKey]FeedObject{}
		for _, o := range f.last[i].Objects {
			was[FeedKey{o.Kind, o.Namespace, o.Name}] = o
		}
		for _, o := range p.Objects {
			k := FeedKey{o.Kind, o.Namespace, o.Name}
			if w, ok := was[k]; !ok || w.Spec != o.Spec {
				out[i].Objects = append(out[i].Objects, o)
			}
			delete(was, k)
		}
		for k := range was {
			out[i].Deleted = append(out[i].Deleted, k)
		}
	}
	f.last = parts
	return out
}

// TestUpdateIsReload: through a random history of changes to two
// clusters (weights, hosts that clash, invalid versions, deletes, adds,
// the same object in both clusters), a Source reading a DeltaFeed with
// update holds what one reading the same parts with Reload holds: the
// objects in force, the rejections and the merged rules. Most single
// weight changes take the one-object path (Compared counts one or none).
func TestUpdateIsReload(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 30
	obj := func(cluster string, i, host, w int, bad bool) FeedObject {
		o := feedVS(cluster, fmt.Sprintf("vs%02d", i), int32(w), int32(100-w))
		vs := o.Spec.(*networking.VirtualService)
		vs.Hosts = []string{fmt.Sprintf("h%02d.shop.svc.cluster.local", host)}
		if bad {
			vs.Http[0].Match = []*networking.HTTPMatchRequest{{Uri: &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: "("}}}}
		}
		if i%5 == 0 { // some DestinationRules too, several per host (merged)
			o = FeedObject{Kind: KindDestinationRule, Namespace: "shop", Name: fmt.Sprintf("dr%02d", i), Source: o.Source,
				Spec: &networking.DestinationRule{Host: fmt.Sprintf("h%02d.shop.svc.cluster.local", host%3),
					Subsets: []*networking.Subset{{Name: fmt.Sprintf("s%d", w), Labels: map[string]string{"v": "1"}}}}}
		}
		return o
	}
	clusters := [2][]FeedObject{}
	for i := range n {
		clusters[0] = append(clusters[0], obj("east", i, i, 90, false))
	}
	inc, full := &deltaFeed{}, &fakeFeed{}
	set := func() {
		parts := []FeedPart{{Name: "east", Synced: true, Objects: slices.Clone(clusters[0])}, {Name: "west", Synced: true, Objects: slices.Clone(clusters[1])}}
		inc.set(parts...)
		full.set(slices.Clone(parts)...)
	}
	set()
	si, sf := New(nil, nil, inc), New(nil, nil, full)
	si.update()
	sf.Reload()
	fast := 0
	for step := range 300 {
		c := 0
		if rng.IntN(10) == 0 {
			c = 1
		}
		i := rng.IntN(n)
		op := rng.IntN(20)
		idx := slices.IndexFunc(clusters[c], func(o FeedObject) bool {
			return o.Name == fmt.Sprintf("vs%02d", i) || o.Name == fmt.Sprintf("dr%02d", i)
		})
		var next FeedObject
		switch {
		case op < 14: // new weights, same host
			host := i
			if idx >= 0 {
				if vs, ok := clusters[c][idx].Spec.(*networking.VirtualService); ok {
					fmt.Sscanf(vs.Hosts[0], "h%02d", &host)
				}
			}
			next = obj([]string{"east", "west"}[c], i, host, rng.IntN(100), false)
		case op < 16: // a host another object may hold
			next = obj([]string{"east", "west"}[c], i, rng.IntN(n), rng.IntN(100), false)
		case op < 17:
			next = obj([]string{"east", "west"}[c], i, i, 50, true)
		case op < 18 && idx >= 0:
			clusters[c] = slices.Delete(clusters[c], idx, idx+1)
		case op < 19 && c == 0 && idx >= 0: // the same object in west too
			o := clusters[0][idx]
			o.Source = "shop/" + o.Name + " (west)"
			if j := slices.IndexFunc(clusters[1], func(x FeedObject) bool { return x.Name == o.Name }); j >= 0 {
				clusters[1][j] = o
			} else {
				clusters[1] = append(clusters[1], o)
			}
		default:
			next = obj([]string{"east", "west"}[c], i, i, 90, false)
		}
		if next.Spec != nil {
			if idx >= 0 {
				clusters[c][idx] = next
			} else {
				clusters[c] = append(clusters[c], next)
			}
		}
		set()
		before := si.Compared()
		gi, gf := si.update(), sf.Reload()
		if si.Compared()-before <= 1 {
			fast++
		}
		if gi != gf {
			t.Fatalf("step %d: update changed=%v, Reload changed=%v", step, gi, gf)
		}
		a, b := si.Status(), sf.Status()
		if !slices.EqualFunc(a.InForce, b.InForce, func(x, y ObjectStatus) bool {
			return x.Kind == y.Kind && x.Namespace == y.Namespace && x.Name == y.Name && x.Source == y.Source && x.Hash == y.Hash
		}) {
			t.Fatalf("step %d: in force\n%v\nwant\n%v", step, a.InForce, b.InForce)
		}
		if fmt.Sprint(a.Rejected) != fmt.Sprint(b.Rejected) || fmt.Sprint(a.Merged) != fmt.Sprint(b.Merged) {
			t.Fatalf("step %d: rejected %v merged %v\nwant %v merged %v", step, a.Rejected, a.Merged, b.Rejected, b.Merged)
		}
	}
	t.Logf("%d of 300 reads took the one-object path", fast)
	if fast < 50 { // 69 with this seed: conflicts and duplicates persist for a while

		t.Errorf("only %d of 300 reads took the one-object path", fast)
	}
}

// TestJoinedCompare: feed objects sort as their kind/namespace/name
// strings do.
func TestJoinedCompare(t *testing.T) {
	t.Parallel()
	parts := []string{"", "a", "a-b", "a.b", "a/b", "ab", "b", "VirtualService", "Virtual"}
	for _, a0 := range parts {
		for _, a1 := range parts {
			for _, b0 := range parts {
				for _, b1 := range parts {
					a, b := [3]string{a0, a1, "x"}, [3]string{b0, b1, "x"}
					want := strings.Compare(strings.Join(a[:], "/"), strings.Join(b[:], "/"))
					if got := joinedCompare(a, b); got != want {
						t.Fatalf("joinedCompare(%q, %q) = %d, want %d", a, b, got, want)
					}
				}
			}
		}
	}
}

// TestDeltaFeedRelistKeepsWork: a DeltaFeed's objects keep their hash,
// validation and ConfigObject beside them in the feed view: a full relist
// (a watch ended) of the same Specs hashes, validates and replaces
// nothing; one new Spec in it costs one hash and one validation.
func TestDeltaFeedRelistKeepsWork(t *testing.T) {
	t.Parallel()
	objs := make([]FeedObject, 20)
	for i := range objs {
		objs[i] = feedVS("east", fmt.Sprintf("svc%02d", i), 90, 10)
	}
	f := &deltaFeed{}
	f.set(FeedPart{Name: "east", Synced: true, Objects: objs})
	s := New(nil, nil, f)
	s.Reload()
	if h, v := s.Work(); h != 20 || v != 20 || len(s.Snapshot().Objects()) != 20 {
		t.Fatalf("first read: hashed %d, validated %d, %d in force; want 20 each", h, v, len(s.Snapshot().Objects()))
	}
	before := map[string]any{}
	for _, o := range s.Snapshot().Objects() {
		before[o.Name] = o
	}
	f.last = nil // the next Deltas is a full list
	if s.Reload() {
		t.Error("a relist of the same objects changed what is in force")
	}
	if h, v := s.Work(); h != 20 || v != 20 {
		t.Fatalf("relist: hashed %d, validated %d in all; want 20, 20", h, v)
	}
	objs = slices.Clone(objs)
	objs[7] = feedVS("east", "svc07", 0, 100)
	f.set(FeedPart{Name: "east", Synced: true, Objects: objs})
	f.last = nil
	if !s.Reload() {
		t.Fatal("a relist with one changed object changed nothing")
	}
	if h, v := s.Work(); h != 21 || v != 21 {
		t.Fatalf("relist with one change: hashed %d, validated %d in all; want 21, 21", h, v)
	}
	for _, o := range s.Snapshot().Objects() {
		if changed := before[o.Name] != any(o); changed != (o.Name == "svc07") {
			t.Errorf("%s: pointer changed = %v", o.Name, changed)
		}
	}
}
