package registrytest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

var shard = model.ShardKey{Kind: "file", Name: "vms"}

// fakeT records Fatalf instead of stopping the test.
type fakeT struct {
	testing.TB
	fatal string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
}

func svc(host string, addrs ...string) model.Service {
	s := model.Service{Hostname: host, Ports: []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}}}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, model.Endpoint{Address: a, Source: model.Source{Registry: "vms"}})
	}
	return s
}

func TestWaitForWakesOnChange(t *testing.T) {
	t.Parallel()
	sink := NewSink()
	go func() {
		sink.Publish(shard, registries.Update{Condition: registries.Condition{Err: "down"}})
		sink.Publish(shard, registries.FullState([]model.Service{svc("a.vm")}, nil))
	}()
	st := sink.WaitFor(t, 5*time.Second, State.Synced)
	if !st.Healthy() || st.Replaces != 1 || len(st.Reports) != 1 || st.Shard != shard || len(st.Updates) != 2 {
		t.Errorf("state = %s", st)
	}
}

func TestWaitForFails(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		shards []model.ShardKey
		want   string
	}{
		{name: "timeout", shards: []model.ShardKey{shard}, want: "condition not met within"},
		{name: "several shards", shards: []model.ShardKey{shard, {Kind: "file", Name: "b"}}, want: "use WaitForShard"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sink := NewSink()
			for _, s := range tt.shards {
				sink.Publish(s, registries.Update{Condition: registries.Condition{Err: "down"}})
			}
			ft := &fakeT{TB: t}
			sink.WaitFor(ft, 10*time.Millisecond, State.Synced)
			if !strings.Contains(ft.fatal, tt.want) {
				t.Errorf("failure = %q, want it to contain %q", ft.fatal, tt.want)
			}
		})
	}
}

func TestProblems(t *testing.T) {
	t.Parallel()
	sink := NewSink()
	sink.Publish(shard, registries.FullState(nil, nil))
	published := []model.Service{svc("a.vm", "10.0.0.1")}
	sink.Publish(shard, registries.FullState(published, nil))
	published[0].Endpoints[0].Address = "10.0.0.2" // the registry changes what it published
	sink.Publish(shard, registries.Update{Condition: registries.Condition{Invalid: true}})
	sink.Publish(shard, registries.Update{Permanent: true, Condition: registries.Condition{Err: "x"}})
	sink.Publish(shard, registries.Update{Complete: true})
	got := strings.Join(sink.Problems(), "\n")
	for _, want := range []string{"1 states passed a nil services slice", "slices of state #2 were modified",
		"update #3 is Invalid without an Err", "update #4 is Permanent without Ended", "update #5 carries state fields without HasState"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems %q lack %q", got, want)
		}
	}
	if p := NewSink().Problems(); len(p) != 0 {
		t.Errorf("empty sink has problems %v", p)
	}
}

func TestReplaced(t *testing.T) {
	t.Parallel()
	sink := NewSink()
	if got := sink.Replaced(shard); got != nil {
		t.Errorf("Replaced before any call = %v, want nil", got)
	}
	first := []model.Service{svc("a.vm", "10.0.0.1")}
	sink.Publish(shard, registries.FullState(first, nil))
	sink.Publish(shard, registries.Update{Condition: registries.Condition{Err: "down"}})
	sink.Publish(shard, registries.Update{HasState: true, Services: []model.Service{}, Condition: registries.Condition{Err: "one bad"}})
	first[0].Endpoints[0].Address = "10.0.0.9" // changed after publishing: Replaced keeps what was published
	got := sink.Replaced(shard)
	if len(got) != 2 || sink.Replaces(shard) != 2 {
		t.Fatalf("Replaced = %v after %d replaces, want the 2 states", got, sink.Replaces(shard))
	}
	if d := DiffServices([]model.Service{svc("a.vm", "10.0.0.1")}, got[0]); d != "" {
		t.Errorf("Replaced[0] (-want +got):\n%s", d)
	}
	if len(got[1]) != 0 {
		t.Errorf("Replaced[1] = %v, want empty", got[1])
	}
}

func TestDiffServicesIgnoresOrder(t *testing.T) {
	t.Parallel()
	a := []model.Service{svc("a.vm", "1", "2"), svc("b.vm")}
	b := []model.Service{svc("b.vm"), svc("a.vm", "2", "1")}
	b[1].Endpoints[0].Labels = map[string]string{} // empty equals nil
	if d := DiffServices(a, b); d != "" {
		t.Errorf("diff of reordered lists:\n%s", d)
	}
	if EqualServices(a, []model.Service{svc("a.vm", "1"), svc("b.vm")}) {
		t.Error("lists with different endpoints compare equal")
	}
	if got := Hostnames(b); strings.Join(got, ",") != "a.vm,b.vm" {
		t.Errorf("Hostnames = %v", got)
	}
}

func TestCheckServices(t *testing.T) {
	t.Parallel()
	dupPort := svc("a.vm")
	dupPort.Ports = append(dupPort.Ports, model.Port{Name: "http", Number: 80, Protocol: "SOAP"})
	badEndpoint := svc("a.vm", "10.0.0.1")
	badEndpoint.Endpoints[0].Ports = map[string]uint32{"grpc": 9}
	badEndpoint.Endpoints[0].Source.Registry = "other"
	tests := []struct {
		name     string
		services []model.Service
		want     []string
	}{
		{name: "consistent", services: []model.Service{svc("a.vm", "10.0.0.1"), svc("b.vm")}},
		{name: "hostnames", services: []model.Service{svc(""), svc("a.vm"), svc("a.vm")}, want: []string{
			"a service has no hostname", "a.vm: published twice",
		}},
		{name: "ports", services: []model.Service{dupPort}, want: []string{
			"a.vm: port 80 declared twice", `a.vm: port name "http" declared twice`, `a.vm: port 80: unknown protocol "SOAP"`,
		}},
		{name: "endpoints", services: []model.Service{badEndpoint}, want: []string{
			`a.vm: endpoint 10.0.0.1: port "grpc" is not a service port`, `a.vm: endpoint 10.0.0.1: Source.Registry is "other", want "vms"`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			errs := CheckServices(shard, tt.services)
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if len(got) != len(tt.want) {
				t.Fatalf("errors = %q, want %d: %q", got, len(tt.want), tt.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.want[i]) {
					t.Errorf("error %d = %q, want prefix %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestDeltaSinkAppliesDeltas(t *testing.T) {
	t.Parallel()
	sink := NewDeltaSink()
	go func() {
		sink.Publish(shard, registries.Update{Condition: registries.Condition{Err: "down"}}) // no state
		sink.Publish(shard, registries.FullState([]model.Service{svc("a.vm", "10.0.0.1"), svc("b.vm", "10.0.0.2")}, nil))
		sink.Publish(shard, registries.Update{HasState: true, Complete: true, Delta: true,
			Services: []model.Service{svc("a.vm", "10.0.0.3")}, Removed: []string{"b.vm"}})
	}()
	sink.WaitFor(t, 5*time.Second, "the delta", func(s map[string]model.Service) bool {
		return len(s) == 1 && len(s["a.vm"].Endpoints) == 1 && s["a.vm"].Endpoints[0].Address == "10.0.0.3"
	})
	if got, want := strings.Join(sink.Take(), "; "), "full a.vm b.vm; delta a.vm -b.vm"; got != want {
		t.Errorf("states %q, want %q", got, want)
	}
	if got := sink.Take(); len(got) != 0 {
		t.Errorf("Take again: %q, want nothing", got)
	}
	f := &fakeT{TB: t}
	sink.WaitFor(f, 10*time.Millisecond, "b.vm", func(s map[string]model.Service) bool { _, ok := s["b.vm"]; return ok })
	if !strings.Contains(f.fatal, "b.vm not seen within") {
		t.Errorf("WaitFor on a state that never comes: %q", f.fatal)
	}
}
