package registries_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

func pubService(host, addr string) model.Service {
	return model.Service{
		Hostname:   host,
		Ports:      []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}},
		Resolution: model.ResolutionEDS,
		Endpoints:  []model.Endpoint{{Address: addr}},
	}
}

func newPub(t *testing.T) (*registries.Publisher[string], *registrytest.Sink, registries.Common) {
	t.Helper()
	c := registries.Common{Name: strings.ToLower(t.Name()), Kind: "test", Domain: "test"}
	sink := registrytest.NewSink()
	return registries.NewPublisher(c, sink, nil, registries.PublisherOptions[string]{Compare: strings.Compare}), sink, c
}

func hostnames(ss []model.Service) string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Hostname)
	}
	return strings.Join(out, ",")
}

// ingestCount is how many ingest latencies were observed for c.
func ingestCount(t *testing.T, c registries.Common) uint64 {
	t.Helper()
	for _, col := range registries.Collectors() {
		h, ok := col.(*prometheus.HistogramVec)
		if !ok {
			continue
		}
		var m dto.Metric
		if err := h.WithLabelValues(c.Name, c.Kind).(prometheus.Histogram).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	t.Fatal("no ingest histogram among registries.Collectors()")
	return 0
}

func TestPublisherAssemblesInKeyOrderAndDedupes(t *testing.T) {
	t.Parallel()
	p, sink, c := newPub(t)
	synced := registries.Condition{}
	rej := model.Rejection{Registry: c.Name, Subject: "x", Reason: "bad"}

	if !p.Set("b", registries.One(pubService("b.test", "10.0.0.2"), true, nil)) ||
		!p.Set("a", registries.One(model.Service{}, false, []model.Rejection{rej})) ||
		!p.Set("c", registries.One(pubService("c.test", "10.0.0.3"), true, nil)) {
		t.Fatal("Set of a new key reported no change")
	}
	p.Changed(time.Now())
	if !p.Flush(synced) {
		t.Fatal("first Flush did not publish")
	}
	st := sink.State(c.Shard())
	if hostnames(st.Services) != "b.test,c.test" || len(st.Rejected) != 1 || !st.Healthy() || !st.Complete {
		t.Fatalf("published %s", st)
	}
	if n := ingestCount(t, c); n != 1 {
		t.Errorf("ingest observations = %d, want 1", n)
	}

	// The same conversion again changes nothing and publishes nothing.
	if p.Set("b", registries.One(pubService("b.test", "10.0.0.2"), true, nil)) {
		t.Error("Set of an equal conversion reported a change")
	}
	p.Changed(time.Now())
	if p.Flush(synced) || sink.Replaces(c.Shard()) != 1 {
		t.Errorf("Flush without a change published (%d replaces)", sink.Replaces(c.Shard()))
	}
	if n := ingestCount(t, c); n != 1 {
		t.Errorf("a change time that changed nothing was observed (%d observations)", n)
	}

	// An empty conversion deletes the key; Delete and Retain too.
	p.Set("a", registries.Converted{})
	p.Delete("b")
	p.Flush(synced)
	if st := sink.State(c.Shard()); hostnames(st.Services) != "c.test" || len(st.Rejected) != 0 {
		t.Errorf("after deletes: %s", st)
	}
	if p.Retain(func(k string) bool { return k != "c" }); p.Len() != 0 {
		t.Errorf("Retain kept %d keys", p.Len())
	}
	p.Flush(synced)
	if st := sink.State(c.Shard()); st.Services == nil || len(st.Services) != 0 {
		t.Errorf("an empty state must be an empty, non-nil list: %s", st)
	}
	if probs := sink.Problems(); len(probs) > 0 {
		t.Error(probs)
	}
}

func TestPublisherReportsTransitionsOnce(t *testing.T) {
	t.Parallel()
	p, sink, c := newPub(t)
	synced := registries.Condition{}
	down := registries.Condition{Err: "connection refused"}
	downSt := registrytest.Status{Err: down.Err}

	// Synced before anything was published says nothing: the first Flush
	// does.
	p.Report(synced)
	if n := len(sink.State(c.Shard()).History); n != 0 {
		t.Fatalf("a Synced report before the first publish reached the sink (%d calls)", n)
	}
	p.Set("a", registries.One(pubService("a.test", "10.0.0.1"), true, nil))
	p.Flush(synced)

	p.Report(down)
	p.Report(down)
	p.Flush(down) // nothing changed: no publish, no repeated report
	if st := sink.State(c.Shard()); len(st.Reports) != 1 || st.Status != downSt || st.Replaces != 1 {
		t.Fatalf("repeated Degraded: %s", st)
	}
	// An outage ends: the unchanged state is published again (Synced).
	if !p.Flush(synced) {
		t.Fatal("Flush after an outage did not publish")
	}
	if st := sink.State(c.Shard()); st.Replaces != 2 || !st.Healthy() {
		t.Fatalf("after the outage: %s", st)
	}

	// A change while part of the backend fails is published with the
	// Degraded status in one step: no Synced in between.
	p.Report(down)
	before := len(sink.State(c.Shard()).History)
	p.Set("b", registries.One(pubService("b.test", "10.0.0.2"), true, nil))
	if !p.Flush(down) {
		t.Fatal("a change was not published while degraded")
	}
	st := sink.State(c.Shard())
	if hostnames(st.Services) != "a.test,b.test" {
		t.Errorf("published %s", st)
	}
	for _, h := range st.History[before:] {
		if h != downSt {
			t.Errorf("status %+v while degraded, want %+v throughout", h, downSt)
		}
	}
	if st.Complete {
		t.Error("a state flushed while part of the backend fails is marked Complete")
	}
	if p.Condition() != down {
		t.Errorf("Condition() = %+v", p.Condition())
	}
}

func TestPublisherCustomAssemble(t *testing.T) {
	t.Parallel()
	c := registries.Common{Name: "assemble", Kind: "test"}
	sink := registrytest.NewSink()
	var got []string
	p := registries.NewPublisher(c, sink, nil, registries.PublisherOptions[int]{
		Compare: func(a, b int) int { return a - b },
		Assemble: func(es []registries.Entry[int]) ([]model.Service, []model.Rejection) {
			for _, e := range es {
				got = append(got, e.Service().Hostname)
			}
			return nil, nil
		},
	})
	for i, h := range []string{"c", "a", "b"} {
		p.Put(3-i, registries.One(pubService(h, "10.0.0.1"), true, nil))
	}
	p.Flush(registries.Condition{})
	if strings.Join(got, ",") != "b,a,c" {
		t.Errorf("Assemble saw %v, want key order b,a,c", got)
	}
	if st := sink.State(c.Shard()); st.Services == nil {
		t.Error("a nil services list from Assemble must be published as empty")
	}
}

// TestPublisherPublishesPartialState: a failing Flush publishes what is
// readable as a state that is not Complete, with the condition in the same
// Update, also as the first of the Run (holding it while another state is
// served is the aggregator's policy: aggregate.TestPartialFirstStateHeld);
// the first healthy Flush publishes a complete state. With
// CompleteWhileDegraded the failing Flush publishes a complete state.
func TestPublisherPublishesPartialState(t *testing.T) {
	t.Parallel()
	p, sink, c := newPub(t)
	down := registries.Condition{Err: "cluster east: connection refused"}
	p.Set("a", registries.One(pubService("a.test", "10.0.0.1"), true, nil))
	if !p.Flush(down) {
		t.Fatal("a failing first Flush did not publish")
	}
	if p.Flush(down) {
		t.Fatal("an unchanged failing Flush published again")
	}
	if st := sink.State(c.Shard()); st.Replaces != 1 || st.Complete || len(st.Reports) != 1 || st.Status != (registrytest.Status{Err: down.Err}) {
		t.Fatalf("want one partial state with the failing condition: %s", st)
	}
	if !p.Flush(registries.Condition{}) {
		t.Fatal("the first healthy Flush did not publish")
	}
	if st := sink.State(c.Shard()); st.Replaces != 2 || hostnames(st.Services) != "a.test" || !st.Complete || !st.Healthy() {
		t.Fatalf("after the first healthy Flush: %s", st)
	}

	c2 := registries.Common{Name: c.Name + "-complete", Kind: "test"}
	p2 := registries.NewPublisher(c2, sink, nil, registries.PublisherOptions[string]{Compare: strings.Compare, CompleteWhileDegraded: true})
	p2.Set("a", registries.One(pubService("a.test", "10.0.0.1"), true, nil))
	if !p2.Flush(down) {
		t.Fatal("CompleteWhileDegraded: a failing first Flush did not publish")
	}
	if st := sink.State(c2.Shard()); st.Replaces != 1 || !st.Complete || st.Status != (registrytest.Status{Err: down.Err}) {
		t.Fatalf("CompleteWhileDegraded: %s", st)
	}
}

// TestPublisherPublishesPartialFirstStateWhenNothingServed: a failing
// first Flush publishes what is readable (one bad file must not keep the
// good ones from being served on a fresh start), with the failing
// condition in the same step.
func TestPublisherPublishesPartialFirstStateWhenNothingServed(t *testing.T) {
	t.Parallel()
	c := registries.Common{Name: strings.ToLower(t.Name()), Kind: "test", Domain: "test"}
	sink := registrytest.NewSink() // a fresh start: nothing served
	p := registries.NewPublisher(c, sink, nil, registries.PublisherOptions[string]{Compare: strings.Compare})
	down := registries.Condition{Err: "b.yaml:3:1: bad key", Invalid: true}
	p.Set("a", registries.One(pubService("a.test", "10.0.0.1"), true, nil))
	if !p.Flush(down) {
		t.Fatal("a Degraded first Flush with nothing served did not publish")
	}
	if st := sink.State(c.Shard()); st.Replaces != 1 || hostnames(st.Services) != "a.test" || st.Status != (registrytest.Status{Err: down.Err, Invalid: true}) {
		t.Fatalf("want a.test published with the Degraded status: %s", st)
	}
}

// TestPublisherConfirm: Confirm re-sends the last published state marked
// Confirm, and sends nothing before the first publish of the Run, while a
// change waits for Flush, or while the backend fails.
func TestPublisherConfirm(t *testing.T) {
	t.Parallel()
	p, sink, c := newPub(t)
	if p.Confirm() {
		t.Error("Confirm sent before the first publish")
	}
	p.Set("a", registries.One(pubService("a.test", "10.0.0.1"), true, nil))
	p.Flush(registries.Condition{})
	if !p.Confirm() {
		t.Fatal("Confirm sent nothing after a publish")
	}
	us := sink.State(c.Shard()).Updates
	last := us[len(us)-1]
	if len(us) != 2 || !last.Confirm || !last.HasState || !last.Complete || hostnames(last.Services) != "a.test" {
		t.Fatalf("updates %+v, want the published state again, marked Confirm", us)
	}
	p.Set("b", registries.One(pubService("b.test", "10.0.0.2"), true, nil))
	if p.Confirm() {
		t.Error("Confirm sent while a change waits for Flush")
	}
	p.Flush(registries.Condition{})
	p.Report(registries.Condition{Err: "down"})
	if p.Confirm() {
		t.Error("Confirm sent while the backend fails")
	}
}

// TestPublisherKeepsOrderAcrossValueChanges: values changed in place (Set
// and Put of known keys) and keys added and removed between flushes all
// show in the next state, in key order; Sent is what went out.
func TestPublisherKeepsOrderAcrossValueChanges(t *testing.T) {
	t.Parallel()
	p, sink, c := newPub(t)
	synced := registries.Condition{}
	for _, k := range []string{"c", "a", "b"} {
		p.Set(k, registries.One(pubService(k+".test", "10.0.0.1"), true, nil))
	}
	p.Flush(synced)
	p.Set("b", registries.One(pubService("b.test", "10.0.0.2"), true, nil))
	p.Put("c", registries.One(pubService("c.test", "10.0.0.3"), true, nil))
	p.Flush(synced)
	st := sink.State(c.Shard())
	if hostnames(st.Services) != "a.test,b.test,c.test" || st.Services[1].Endpoints[0].Address != "10.0.0.2" || st.Services[2].Endpoints[0].Address != "10.0.0.3" {
		t.Fatalf("after value changes: %s", st)
	}
	p.Delete("a")
	p.Set("d", registries.One(pubService("d.test", "10.0.0.4"), true, nil))
	p.Set("b", registries.One(pubService("b.test", "10.0.0.5"), true, nil))
	p.Flush(synced)
	st = sink.State(c.Shard())
	if hostnames(st.Services) != "b.test,c.test,d.test" || st.Services[0].Endpoints[0].Address != "10.0.0.5" {
		t.Fatalf("after keys came and went: %s", st)
	}
	// A key whose number of services changes, then a value change again.
	p.Set("c", registries.Converted{Services: []model.Service{pubService("c.test", "10.0.0.6"), pubService("c2.test", "10.0.0.7")}})
	p.Flush(synced)
	p.Set("d", registries.One(pubService("d.test", "10.0.0.8"), true, nil))
	p.Flush(synced)
	st = sink.State(c.Shard())
	if hostnames(st.Services) != "b.test,c.test,c2.test,d.test" || st.Services[3].Endpoints[0].Address != "10.0.0.8" || st.Services[1].Endpoints[0].Address != "10.0.0.6" {
		t.Fatalf("after a key's services grew: %s", st)
	}
	if sent, _ := p.Sent(); hostnames(sent) != hostnames(st.Services) {
		t.Errorf("Sent %s, the sink got %s", hostnames(sent), hostnames(st.Services))
	}
}

// deltaSink records the updates a Publisher sends it; it takes deltas.
type deltaSink struct{ got []registries.Update }

func (s *deltaSink) Publish(_ model.ShardKey, u registries.Update) { s.got = append(s.got, u) }
func (s *deltaSink) TakesDelta() bool                              { return true }

// TestPublisherDelta: to a DeltaSink, the first state of a Run is full,
// later ones carry only the changed keys' services and the hostnames
// gone (a hostname moving between keys is not gone), every rejection,
// and any state with a duplicate hostname (as DNS names compare), or the
// first after one, is full; Sent still gives the full state.
func TestPublisherDelta(t *testing.T) {
	t.Parallel()
	sink := &deltaSink{}
	c := registries.Common{Name: "delta", Kind: "test"}
	p := registries.NewPublisher(c, sink, nil, registries.PublisherOptions[string]{Compare: strings.Compare})
	rej := model.Rejection{Host: "r.test", Subject: "r", Reason: "bad"}
	p.Put("a", registries.One(pubService("a.test", "10.0.0.1"), true, nil))
	p.Put("b", registries.One(pubService("b.test", "10.0.0.2"), true, []model.Rejection{rej}))
	p.Put("c", registries.One(pubService("c.test", "10.0.0.3"), true, nil))
	p.Flush(registries.Condition{})
	p.Put("b", registries.One(pubService("b.test", "10.0.0.9"), true, []model.Rejection{rej}))
	p.Delete("c")
	p.Flush(registries.Condition{})
	p.Delete("a")
	p.Put("d", registries.One(pubService("a.test", "10.0.0.1"), true, nil)) // a.test moves to key d
	p.Flush(registries.Condition{})
	p.Put("e", registries.One(pubService("B.TEST.", "10.0.0.5"), true, nil)) // a duplicate of b.test
	p.Flush(registries.Condition{})
	p.Delete("e")
	p.Flush(registries.Condition{})
	p.Put("f", registries.One(pubService("f.test", "10.0.0.6"), true, nil))
	p.Flush(registries.Condition{})

	type want struct {
		delta             bool
		services, removed string
		rejected          int
	}
	wants := []want{
		{false, "a.test,b.test,c.test", "", 1},
		{true, "b.test", "c.test", 1},
		{true, "a.test", "", 1},
		{false, "b.test,a.test,B.TEST.", "", 1},
		{false, "b.test,a.test", "", 1},
		{true, "f.test", "", 1},
	}
	if len(sink.got) != len(wants) {
		t.Fatalf("%d updates, want %d", len(sink.got), len(wants))
	}
	for i, w := range wants {
		u := sink.got[i]
		if u.Delta != w.delta || hostnames(u.Services) != w.services || strings.Join(u.Removed, ",") != w.removed || len(u.Rejected) != w.rejected || !u.HasState || !u.Complete {
			t.Errorf("update %d: delta %v services %q removed %q rejected %d; want %+v", i, u.Delta, hostnames(u.Services), u.Removed, len(u.Rejected), w)
		}
	}
	if s, _ := p.Sent(); hostnames(s) != "b.test,a.test,f.test" {
		t.Errorf("Sent after a delta: %q, want the full state", hostnames(s))
	}
}
