package registries_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

func TestFillDefaults(t *testing.T) {
	t.Parallel()
	loc := model.Locality{Region: "eu"}
	c := registries.Common{Name: "vms", Kind: "file", Locality: loc}
	filled := model.Endpoint{Address: "10.0.0.1", Weight: 1, Locality: loc, Source: model.Source{Registry: "vms", Cluster: "vms"}}
	for _, tt := range []struct {
		name   string
		in     model.Endpoint
		want   model.Endpoint
		shared bool // FillDefaults returns its input
	}{
		{name: "filled", in: filled, want: filled, shared: true},
		{name: "own values kept", shared: true,
			in:   model.Endpoint{Address: "10.0.0.1", Weight: 5, Locality: model.Locality{Zone: "z"}, Source: model.Source{Registry: "vms", Cluster: "c", Network: "n"}, Labels: map[string]string{"v": "1"}},
			want: model.Endpoint{Address: "10.0.0.1", Weight: 5, Locality: model.Locality{Zone: "z"}, Source: model.Source{Registry: "vms", Cluster: "c", Network: "n"}, Labels: map[string]string{"v": "1"}}},
		{name: "nothing set", in: model.Endpoint{Address: "10.0.0.1"}, want: filled},
		{name: "weight 0", in: model.Endpoint{Address: "10.0.0.1", Locality: loc, Source: filled.Source}, want: filled},
		{name: "another registry's name", in: model.Endpoint{Address: "10.0.0.1", Weight: 1, Locality: loc, Source: model.Source{Registry: "x", Cluster: "vms"}}, want: filled},
		{name: "empty labels", in: model.Endpoint{Address: "10.0.0.1", Weight: 1, Locality: loc, Source: filled.Source, Labels: map[string]string{}}, want: filled},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if d := cmp.Diff(tt.want, c.EndpointDefaults(tt.in)); d != "" {
				t.Errorf("EndpointDefaults (-want +got):\n%s", d)
			}
			in := []model.Endpoint{filled, tt.in}
			before := registrytest.CloneServices([]model.Service{{Endpoints: in}})[0].Endpoints
			out := c.FillDefaults(in)
			if d := cmp.Diff([]model.Endpoint{filled, tt.want}, out); d != "" {
				t.Errorf("FillDefaults (-want +got):\n%s", d)
			}
			if d := cmp.Diff(before, in); d != "" {
				t.Errorf("FillDefaults modified its input (-before +after):\n%s", d)
			}
			if shared := &out[0] == &in[0]; shared != tt.shared {
				t.Errorf("FillDefaults returned its input = %v, want %v", shared, tt.shared)
			}
		})
	}
}

// TestPublisherFillsDefaults: the Publisher stores and publishes endpoints
// with their defaults, copying only the services that lack them, and a
// conversion equal once filled is no change.
func TestPublisherFillsDefaults(t *testing.T) {
	t.Parallel()
	p, sink, c := newPub(t)
	raw := pubService("a.test", "10.0.0.1")
	ready := pubService("b.test", "10.0.0.2")
	ready.Endpoints = c.FillDefaults(ready.Endpoints)
	p.Set("a", registries.One(raw, true, nil))
	p.Set("b", registries.One(ready, true, nil))
	p.Flush(registries.Condition{})
	got, _, _ := sink.Last(c.Shard())
	want := []model.Service{pubService("a.test", "10.0.0.1"), ready}
	want[0].Endpoints[0].Weight, want[0].Endpoints[0].Source = 1, model.Source{Registry: c.Name, Cluster: c.Name}
	registrytest.AssertServices(t, got, want)
	if raw.Endpoints[0].Weight != 0 || raw.Endpoints[0].Source.Registry != "" {
		t.Errorf("the registry's conversion was modified: %+v", raw.Endpoints[0])
	}
	for _, s := range got {
		if s.Hostname == "b.test" && &s.Endpoints[0] != &ready.Endpoints[0] {
			t.Error("b.test, which had its defaults, was copied")
		}
	}
	if p.Set("a", registries.One(pubService("a.test", "10.0.0.1"), true, nil)) {
		t.Error("setting the same conversion again reported a change")
	}
}
