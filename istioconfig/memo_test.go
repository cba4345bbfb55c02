package istioconfig

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
)

// TestOneChangeOneValidation: of 50 feed objects, a read after one of
// them changed hashes and validates that one only; unchanged objects
// (same Spec pointer) keep their *model.ConfigObject.
func TestOneChangeOneValidation(t *testing.T) {
	t.Parallel()
	objs := make([]FeedObject, 50)
	for i := range objs {
		objs[i] = feedVS("east", fmt.Sprintf("svc%02d", i), 90, 10)
	}
	f := &fakeFeed{}
	f.set(FeedPart{Name: "east", Synced: true, Objects: objs})
	s := New(nil, nil, f)
	s.Reload()
	if h, v := s.Work(); h != 50 || v != 50 || len(s.Snapshot().Objects()) != 50 {
		t.Fatalf("first read: hashed %d, validated %d, %d in force; want 50, 50, 50", h, v, len(s.Snapshot().Objects()))
	}
	before := map[string]any{}
	for _, o := range s.Snapshot().Objects() {
		before[o.Name] = o
	}
	if s.Reload() {
		t.Error("a read without change changed what is in force")
	}
	if h, v := s.Work(); h != 50 || v != 50 {
		t.Fatalf("a read without change: hashed %d, validated %d in all; want 50, 50", h, v)
	}

	// One object changes (a new Spec, as the Feed returns for a new
	// resourceVersion).
	objs = append([]FeedObject(nil), objs...)
	objs[17] = feedVS("east", "svc17", 0, 100)
	f.set(FeedPart{Name: "east", Synced: true, Objects: objs})
	if !s.Reload() {
		t.Fatal("the change was not applied")
	}
	if h, v := s.Work(); h-50 != 1 || v-50 != 1 {
		t.Fatalf("one change: hashed %d, validated %d; want 1, 1", h-50, v-50)
	}
	for _, o := range s.Snapshot().Objects() {
		if changed := before[o.Name] != any(o); changed != (o.Name == "svc17") {
			t.Errorf("%s: pointer changed = %v", o.Name, changed)
		}
	}

	// An invalid version is rejected from the cache as it was first.
	bad := feedVS("east", "svc17", 0, 100)
	bad.Spec.(*networking.VirtualService).Http[0].Match = []*networking.HTTPMatchRequest{{Uri: &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: "("}}}}
	objs[17] = bad
	f.set(FeedPart{Name: "east", Synced: true, Objects: objs})
	for range 2 {
		s.Reload()
		if st := s.Status(); len(st.Rejected) != 1 || !st.Rejected[0].KeptLastGood {
			t.Fatalf("rejected = %+v, want svc17 with its last good version kept", st.Rejected)
		}
	}
	if _, v := s.Work(); v-50 != 2 {
		t.Fatalf("validated %d after two reads of one bad version, want 2 (once for each version)", v-50)
	}
}

// TestSameObjectsInTwoParts: the same objects in two clusters (distinct
// Specs, equal content) are hashed once per cluster and validated once,
// and not again while unchanged.
func TestSameObjectsInTwoParts(t *testing.T) {
	t.Parallel()
	var east, west []FeedObject
	for i := range 50 {
		east = append(east, feedVS("east", fmt.Sprintf("svc%02d", i), 90, 10))
		west = append(west, feedVS("west", fmt.Sprintf("svc%02d", i), 90, 10))
	}
	f := &fakeFeed{}
	f.set(FeedPart{Name: "east", Synced: true, Objects: east}, FeedPart{Name: "west", Synced: true, Objects: west})
	s := New(nil, nil, f)
	s.Reload()
	s.Reload()
	if h, v := s.Work(); h != 100 || v != 50 || len(s.Snapshot().Objects()) != 50 || len(s.Status().Rejected) != 0 {
		t.Fatalf("two reads: hashed %d, validated %d, %d in force, rejected %v; want 100, 50, 50, none", h, v, len(s.Snapshot().Objects()), s.Status().Rejected)
	}
}

// TestFileObjectsValidatedByContent: objects of files have no
// resourceVersion; an unchanged document is not validated again.
func TestFileObjectsValidatedByContent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	doc := func(i, w int) string {
		return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: svc%02d, namespace: shop}
spec:
  hosts: [svc%02d.shop.svc.cluster.local]
  http:
  - route:
    - {destination: {host: svc%02d.shop.svc.cluster.local, subset: v1}, weight: %d}
    - {destination: {host: svc%02d.shop.svc.cluster.local, subset: v2}, weight: %d}
`, i, i, i, w, i, 100-w)
	}
	write := func(i, w int) {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("svc%02d.yaml", i)), []byte(doc(i, w)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 {
		write(i, 90)
	}
	s := New([]Dir{{Name: "d", Path: dir}}, nil)
	s.Reload()
	if _, v := s.Work(); v != 50 || len(s.Snapshot().Objects()) != 50 {
		t.Fatalf("first read: validated %d, %d in force; want 50, 50", v, len(s.Snapshot().Objects()))
	}
	write(3, 10)
	if !s.Reload() {
		t.Fatal("the change was not applied")
	}
	if _, v := s.Work(); v-50 != 1 {
		t.Fatalf("one changed file: validated %d, want 1", v-50)
	}
}
