package xds

import (
	"fmt"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshfed/meshfed/xds/ads"
	"github.com/meshfed/meshfed/xds/translate"
)

// recvErr waits for the stream to fail and returns its status.
func recvErr(t *testing.T, c *adsClient) *status.Status {
	t.Helper()
	for range 100 {
		select {
		case _, ok := <-c.msgs:
			if !ok {
				_, err := c.recv() // a failed stream's Recv repeats its error
				return status.Convert(err)
			}
		case <-time.After(waitFor):
			t.Fatal("the stream was not ended")
		}
	}
	t.Fatal("the stream was not ended")
	return nil
}

// Observation 7: per-stream resources were unbounded.
func TestStreamLimitsEndTheStreamWithResourceExhausted(t *testing.T) {
	t.Parallel()
	names := func(n, size int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%0*d", size, i)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		delta bool
		limit string
		send  func(c *adsClient)
	}{
		{"sotw type URLs", false, "typeURLs", func(c *adsClient) {
			for i := range 3 {
				c.subscribe(fmt.Sprintf("type.googleapis.com/test.T%d", i))
			}
		}},
		{"delta type URLs", true, "typeURLs", func(c *adsClient) {
			for i := range 3 {
				c.subscribe(fmt.Sprintf("type.googleapis.com/test.T%d", i))
			}
		}},
		{"sotw names", false, "names", func(c *adsClient) { c.subscribe(translate.EndpointType, names(11, 10)...) }},
		{"delta names over two requests", true, "names", func(c *adsClient) {
			c.subscribe(translate.EndpointType, names(6, 10)...)
			c.subscribe(translate.ClusterType, names(6, 10)...)
		}},
		{"delta initial versions", true, "names", func(c *adsClient) {
			initial := map[string]string{}
			for _, n := range names(11, 10) {
				initial[n] = "v"
			}
			if err := c.dstr.Send(&discovery.DeltaDiscoveryRequest{Node: c.node, TypeUrl: translate.ClusterType, InitialResourceVersions: initial}); err != nil {
				t.Fatal(err)
			}
		}},
		{"sotw name size", false, "nameBytes", func(c *adsClient) { c.subscribe(translate.EndpointType, names(1, ads.MaxNameBytes+1)...) }},
		{"delta name size", true, "nameBytes", func(c *adsClient) { c.subscribe(translate.EndpointType, names(1, ads.MaxNameBytes+1)...) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := metricValue(t, "meshfed_xds_stream_limit_exceeded_total", "limit", tc.limit)
			srv := NewServer(Options{Limits: ads.Limits{MaxTypeURLs: 2, MaxNames: 10}})
			addr := startServer(t, srv)
			c := dialADS(t, addr, envoyNode("n1"), tc.delta)
			tc.send(c)
			st := recvErr(t, c)
			if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), tc.limit) {
				t.Errorf("stream ended with %v %q, want ResourceExhausted naming %s", st.Code(), st.Message(), tc.limit)
			}
			if after := metricValue(t, "meshfed_xds_stream_limit_exceeded_total", "limit", tc.limit); after < before+1 {
				t.Errorf("meshfed_xds_stream_limit_exceeded_total{limit=%q} = %v, want > %v", tc.limit, after, before)
			}
		})
	}
	// Within the limits, nothing happens.
	srv := NewServer(Options{Limits: ads.Limits{MaxTypeURLs: 2, MaxNames: 10}})
	addr := startServer(t, srv)
	c := dialADS(t, addr, envoyNode("n1"), true)
	c.subscribe(translate.EndpointType, names(10, 10)...)
	c.subscribe(translate.ClusterType)
	if m := c.next(); m.typeURL != translate.ClusterType {
		t.Errorf("got %s, want the CDS response", m.typeURL)
	}
}

// Observation 7: unknown type URLs were never answered. A client waiting
// for every type it asked for gets an (empty) answer for each.
func TestUnknownTypeURLsAreAnsweredEmpty(t *testing.T) {
	t.Parallel()
	const unknown = "type.googleapis.com/some.Unknown"
	for _, delta := range []bool{false, true} {
		srv := NewServer(Options{})
		srv.Update(nil)
		addr := startServer(t, srv)
		c := dialADS(t, addr, envoyNode("n1"), delta)
		c.subscribe(unknown, "a", "b")
		c.subscribe(translate.ClusterType)
		got := map[string]message{}
		for len(got) < 2 {
			m := c.next()
			got[m.typeURL] = m
			c.answer(m, "")
		}
		m := got[unknown]
		if len(m.resources) != 0 {
			t.Errorf("delta=%v: unknown type answered with %v", delta, m.names())
		}
		if delta && strings.Join(m.removed, ",") != "a,b" {
			t.Errorf("delta: unknown names removed = %v, want a,b", m.removed)
		}
		// The ACK is not answered again; a new subscription is.
		if delta {
			c.subscribe(unknown, "c")
		} else if err := c.sotw.Send(&discovery.DiscoveryRequest{TypeUrl: unknown, VersionInfo: m.version,
			ResponseNonce: m.nonce, ResourceNames: []string{"a", "b", "c"}}); err != nil {
			t.Fatal(err)
		}
		if m := c.next(); m.typeURL != unknown {
			t.Errorf("delta=%v: got %s after subscribing more unknown names", delta, m.typeURL)
		}
	}
}

// Observation 9a: a stream without a node was served but neither counted
// nor listed. Not parallel: it reads a process-wide gauge.
func TestStreamWithoutNodeIsCountedAndListed(t *testing.T) {
	srv := NewServer(Options{})
	srv.Update(nil)
	addr := startServer(t, srv)
	gauge := func() float64 {
		return metricValue(t, "meshfed_xds_connected_proxies", "class", string(translate.ClassEnvoy))
	}
	before := gauge()
	c := dialADS(t, addr, nil, false)
	c.subscribe(translate.ClusterType)
	c.next()
	var id string
	eventually(t, "the stream in Proxies()", func() bool {
		for _, p := range srv.Proxies() {
			if strings.HasPrefix(p.ID, "anonymous-sotw-") {
				id = p.ID
				return true
			}
		}
		return false
	})
	if got := gauge(); got != before+1 {
		t.Errorf("meshfed_xds_connected_proxies{class=envoy} = %v, want %v", got, before+1)
	}
	if _, ok := srv.ConfigDump(id); !ok {
		t.Errorf("no config dump for %s", id)
	}
	// A later request naming the node renames the stream, counted once.
	if err := c.sotw.Send(&discovery.DiscoveryRequest{Node: envoyNode("late"), TypeUrl: translate.RouteType}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the stream renamed", func() bool { return proxy(srv, "late") != nil })
	if got := gauge(); got != before+1 {
		t.Errorf("after naming: meshfed_xds_connected_proxies{class=envoy} = %v, want %v", got, before+1)
	}
}
