package xds

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/ads"
	"github.com/meshfed/meshfed/xds/translate"
)

// sizedServices returns n services of m endpoints each and one service,
// huge, of 1,000 endpoints.
func sizedServices(n, m int) []*model.Service {
	svc := func(name string, eps int) *model.Service {
		s := &model.Service{Hostname: name + ".vm.internal",
			Ports: []model.Port{{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}}}
		for i := range eps {
			s.Endpoints = append(s.Endpoints, model.Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", len(name), i/250, i%250+1)})
		}
		return s
	}
	var out []*model.Service
	for i := range n {
		out = append(out, svc(fmt.Sprintf("s%02d", i), m))
	}
	return append(out, svc("huge", 1000))
}

const hugeCLA = "outbound|8080||huge.vm.internal"

// oversizedCount reads meshfed_xds_oversized_total{type="EDS",action}.
func oversizedCount(t *testing.T, action string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "meshfed_xds_oversized_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["type"] == "EDS" && labels["action"] == action {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// A gRPC library client with a receive limit (here 16 KiB, as grpc-go's
// default 4 MiB scaled down) subscribed to more endpoints than fit in one
// response gets them all over several responses, never a message it
// refuses; a CLA larger than the limit alone is left out and listed on
// /debug/syncz; an Envoy client gets everything in one response.
func TestOversizedResponses(t *testing.T) {
	const limit = 16 << 10
	for _, delta := range []bool{false, true} {
		t.Run(map[bool]string{false: "sotw", true: "delta"}[delta], func(t *testing.T) {
			t.Parallel()
			srv := NewServer(Options{Limits: ads.Limits{MaxResponseBytes: limit}})
			srv.Update(model.NewSnapshot(1, sizedServices(20, 40)))
			addr := startServer(t, srv)
			clas := resourceNames(srv.Resources(translate.KindOf(translate.ClassGRPC, translate.EndpointType)))
			if len(clas) != 21 {
				t.Fatalf("%d CLAs, want 21", len(clas))
			}
			want := slices.DeleteFunc(slices.Clone(clas), func(n string) bool { return n == hugeCLA })
			splits, rejects := oversizedCount(t, "split"), oversizedCount(t, "rejected")

			md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc"})
			node := &core.Node{Id: "grpc-client", Metadata: md, UserAgentName: "gRPC Go"}
			c := dialADS(t, addr, node, delta, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limit)))
			c.subscribe(translate.EndpointType, clas...)
			seen := c.until(holds(translate.EndpointType, want...), nil)
			if len(seen) < 2 {
				t.Errorf("%d responses, want the endpoints split over several", len(seen))
			}
			if oversizedCount(t, "split") <= splits {
				t.Errorf("meshfed_xds_oversized_total{action=split} did not increase")
			}
			if oversizedCount(t, "rejected") <= rejects {
				t.Errorf("meshfed_xds_oversized_total{action=rejected} did not increase")
			}
			eventually(t, "the split and the rejected CLA on /debug/syncz", func() bool {
				p := proxy(srv, "grpc-client")
				if p == nil {
					return false
				}
				o := typeStatus(p, translate.EndpointType).Oversized
				return o != nil && o.Limit == limit && o.Split > 0 && len(o.Rejected) > 0 && o.Rejected[0].Name == hugeCLA && o.Rejected[0].Bytes > limit
			})

			// An endpoint change is still delivered on the same stream.
			svcs := sizedServices(20, 40)
			svcs[0].Endpoints = svcs[0].Endpoints[:1]
			srv.Update(model.NewSnapshot(2, svcs))
			first := "outbound|8080||s00.vm.internal"
			c.until(func(st map[string]map[string]proto.Message) bool {
				cla, _ := st[translate.EndpointType][first].(*endpoint.ClusterLoadAssignment)
				return cla != nil && len(cla.GetEndpoints()) == 1 && len(cla.GetEndpoints()[0].GetLbEndpoints()) == 1
			}, nil)

			// Envoy sets no receive limit: it gets everything at once.
			e := dialADS(t, addr, &core.Node{Id: "envoy-client", UserAgentName: "envoy"}, delta)
			e.subscribe(translate.EndpointType, clas...)
			m := e.next()
			if got := m.names(); !slices.Equal(got, clas) {
				t.Errorf("envoy got %d CLAs in its first response, want all %d", len(got), len(clas))
			}
			eventually(t, "envoy's response above the limit recorded as sent whole", func() bool {
				p := proxy(srv, "envoy-client")
				if p == nil {
					return false
				}
				o := typeStatus(p, translate.EndpointType).Oversized
				return o != nil && o.Sent > 0 && o.Limit == 0
			})
		})
	}
}

// A SotW LDS or CDS response carries the client's whole state: a resource
// left out of it is deleted by the client. A gRPC client of a server whose
// limit one listener and one cluster exceed on their own still gets every
// listener and cluster (the response is sent whole, counted "sent"), never
// a state without them.
func TestOversizedFullStateKeepsResources(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", 60) + "." + strings.Repeat("d", 60) + ".internal"
	svcs := []*model.Service{
		{Hostname: "short.vm.internal", Ports: []model.Port{{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}},
			Endpoints: []model.Endpoint{{Address: "10.0.0.1"}}},
		{Hostname: long, Ports: []model.Port{{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC}},
			Endpoints: []model.Endpoint{{Address: "10.0.0.2"}}},
	}
	probe := NewServer(Options{})
	probe.Update(model.NewSnapshot(1, svcs))
	// The limit: the short resources fit alone (with the response's and the
	// Any's overhead), the long ones do not.
	limit := 0
	for _, typ := range []string{translate.ListenerType, translate.ClusterType} {
		for n, r := range probe.Resources(translate.KindOf(translate.ClassGRPC, typ)) {
			if s := proto.Size(r) + 180; !strings.Contains(n, long) && s > limit {
				limit = s
			}
		}
		for n, r := range probe.Resources(translate.KindOf(translate.ClassGRPC, typ)) {
			if strings.Contains(n, long) && proto.Size(r) <= limit {
				t.Fatalf("%s %s is %d bytes, want above the limit %d", typ, n, proto.Size(r), limit)
			}
		}
	}
	probe.Close()

	srv := NewServer(Options{Limits: ads.Limits{MaxResponseBytes: limit}})
	srv.Update(model.NewSnapshot(1, svcs))
	addr := startServer(t, srv)
	md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc"})
	c := dialADS(t, addr, &core.Node{Id: "grpc-client", Metadata: md, UserAgentName: "gRPC Go"}, false)
	for _, typ := range []string{translate.ListenerType, translate.ClusterType} {
		want := resourceNames(srv.Resources(translate.KindOf(translate.ClassGRPC, typ)))
		if len(want) < 2 {
			t.Fatalf("%s: %v, want the long and the short host's", typ, want)
		}
		c.subscribe(typ, want...)
		m := c.next()
		for m.typeURL != typ {
			c.apply(m)
			c.answer(m, "")
			m = c.next()
		}
		if got := m.names(); !slices.Equal(got, want) {
			t.Errorf("%s response holds %v, want all of %v (a name left out is deleted by the client)", typ, got, want)
		}
		c.apply(m)
		c.answer(m, "")
	}
	// A client whose receive limit is the server's refuses the whole
	// response (its stream ends, and it would reconnect), but is never
	// sent a state without the long host's cluster.
	lim := dialADS(t, addr, &core.Node{Id: "grpc-limited", Metadata: md, UserAgentName: "gRPC Go"}, false,
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limit)))
	want := resourceNames(srv.Resources(translate.KindOf(translate.ClassGRPC, translate.ClusterType)))
	lim.subscribe(translate.ClusterType, want...)
	select {
	case m, ok := <-lim.msgs:
		if ok {
			t.Errorf("limited client got a response holding %v, want its stream to refuse the whole one of %v", m.names(), want)
		}
	case <-time.After(waitFor):
		t.Error("limited client: no response and no stream error in time")
	}
	eventually(t, "the whole responses recorded as sent", func() bool {
		p := proxy(srv, "grpc-client")
		if p == nil {
			return false
		}
		for _, typ := range []string{translate.ListenerType, translate.ClusterType} {
			o := typeStatus(p, typ).Oversized
			if o == nil || o.Sent == 0 || len(o.Rejected) != 0 || o.Limit != limit {
				return false
			}
		}
		return true
	})
}
