package kube

import (
	"runtime"
	"testing"
	"weak"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshfed/meshfed/registries/registrytest"
)

// inUse returns the interning in use and its number of label sets.
func inUse() (*interning, int) {
	interned.mu.Lock()
	defer interned.mu.Unlock()
	in := interned.cur
	if in == nil {
		return nil, 0
	}
	in.labels.mu.Lock()
	defer in.labels.mu.Unlock()
	n := 0
	for _, sets := range in.labels.cur {
		n += len(sets)
	}
	for _, sets := range in.labels.prev {
		n += len(sets)
	}
	return in, n
}

// TestStoppedRegistriesLeaveNoInterning: registries that run at once share
// one interning, which holds their pods' label sets; once the last of them
// stopped nothing holds it, and it is collected. Not parallel: it reads
// the package's interning, which every running registry of the package
// uses (parallel tests run only after this one).
func TestStoppedRegistriesLeaveNoInterning(t *testing.T) {
	if in, _ := inUse(); in != nil {
		t.Fatal("an interning is in use before any registry runs")
	}
	start := func(name string) func() {
		sink := registrytest.NewSink()
		stop := registrytest.Start(t, NewForClient(common(name), Config{}, fake.NewClientset(ordersFixture()...), nil), sink)
		sink.WaitFor(t, waitTimeout, registrytest.State.Synced)
		return stop
	}
	stopEast, stopWest := start("east"), start("west")

	in, sets := inUse()
	if in == nil || sets == 0 {
		t.Fatalf("while registries run the interning is %p with %d label sets, want one holding the pods' labels", in, sets)
	}
	gone := weak.Make(in)
	in = nil
	stopWest()
	if now, _ := inUse(); now == nil || now != gone.Value() {
		t.Fatalf("one of two registries stopped: the interning in use is %p, want the one both used", now)
	}
	stopEast()
	if now, sets := inUse(); now != nil {
		t.Fatalf("every registry stopped: an interning with %d label sets is still in use", sets)
	}
	for i := 0; i < 10 && gone.Value() != nil; i++ {
		runtime.GC()
	}
	if gone.Value() != nil {
		t.Error("every registry stopped: the interning they used is still reachable")
	}
}
