package xds

import (
	"bytes"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/prometheus/client_golang/prometheus/testutil"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
		{"sotw names", false, "names", func(c *adsClient) { c.subscribe(EndpointType, names(11, 10)...) }},
		{"delta names over two requests", true, "names", func(c *adsClient) {
			c.subscribe(EndpointType, names(6, 10)...)
			c.subscribe(ClusterType, names(6, 10)...)
		}},
		{"delta initial versions", true, "names", func(c *adsClient) {
			initial := map[string]string{}
			for _, n := range names(11, 10) {
				initial[n] = "v"
			}
			if err := c.dstr.Send(&discovery.DeltaDiscoveryRequest{Node: c.node, TypeUrl: ClusterType, InitialResourceVersions: initial}); err != nil {
				t.Fatal(err)
			}
		}},
		{"sotw name size", false, "nameBytes", func(c *adsClient) { c.subscribe(EndpointType, names(1, MaxNameBytes+1)...) }},
		{"delta name size", true, "nameBytes", func(c *adsClient) { c.subscribe(EndpointType, names(1, MaxNameBytes+1)...) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := testutil.ToFloat64(limitExceeded.WithLabelValues(tc.limit))
			srv := NewServer(Options{Limits: Limits{MaxTypeURLs: 2, MaxNames: 10}})
			addr := startServer(t, srv)
			c := dialADS(t, addr, envoyNode("n1"), tc.delta)
			tc.send(c)
			st := recvErr(t, c)
			if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), tc.limit) {
				t.Errorf("stream ended with %v %q, want ResourceExhausted naming %s", st.Code(), st.Message(), tc.limit)
			}
			if after := testutil.ToFloat64(limitExceeded.WithLabelValues(tc.limit)); after < before+1 {
				t.Errorf("meshfed_xds_stream_limit_exceeded_total{limit=%q} = %v, want > %v", tc.limit, after, before)
			}
		})
	}
	// Within the limits, nothing happens.
	srv := NewServer(Options{Limits: Limits{MaxTypeURLs: 2, MaxNames: 10}})
	addr := startServer(t, srv)
	c := dialADS(t, addr, envoyNode("n1"), true)
	c.subscribe(EndpointType, names(10, 10)...)
	c.subscribe(ClusterType)
	if m := c.next(); m.typeURL != ClusterType {
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
		c.subscribe(ClusterType)
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
	gauge := connectedProxies.WithLabelValues(string(ClassEnvoy))
	before := testutil.ToFloat64(gauge)
	c := dialADS(t, addr, nil, false)
	c.subscribe(ClusterType)
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
	if got := testutil.ToFloat64(gauge); got != before+1 {
		t.Errorf("meshfed_xds_connected_proxies{class=envoy} = %v, want %v", got, before+1)
	}
	if _, ok := srv.ConfigDump(id); !ok {
		t.Errorf("no config dump for %s", id)
	}
	// A later request naming the node renames the stream, counted once.
	if err := c.sotw.Send(&discovery.DiscoveryRequest{Node: envoyNode("late"), TypeUrl: RouteType}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the stream renamed", func() bool { return proxy(srv, "late") != nil })
	if got := testutil.ToFloat64(gauge); got != before+1 {
		t.Errorf("after naming: meshfed_xds_connected_proxies{class=envoy} = %v, want %v", got, before+1)
	}
}

// Observation 7: a 3 MB error_detail was logged whole on every NACK and
// served whole by /debug/syncz.
func TestNackDetailIsTruncated(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	s := newStore()
	x := newTestADS(t, s, true)
	x.a.tracker = newTracker(slog.New(slog.NewTextHandler(&logs, nil)), nil)
	x.st = x.a.open(true)
	applyTo(s, edsKind, map[string]types.Resource{"a": cla("a", 1)})
	x.deltaReq(&discovery.DeltaDiscoveryRequest{Node: envoyNode("n1"), ResourceNamesSubscribe: []string{"a"}})
	_, _, nonce, ok := x.takeDelta()
	if !ok {
		t.Fatal("no response")
	}
	huge := strings.Repeat("é", 3<<19) // 3 MB
	x.deltaReq(&discovery.DeltaDiscoveryRequest{ResponseNonce: nonce, ErrorDetail: &rpcstatus.Status{Code: 3, Message: huge}})
	p := x.a.tracker.snapshot(s.count)
	if len(p) != 1 || len(p[0].Types) != 1 || p[0].Types[0].LastNack == nil {
		t.Fatalf("status = %+v, want one NACK", p)
	}
	nack := p[0].Types[0].LastNack.Error
	if len(nack) > MaxNackDetail+64 || !strings.Contains(nack, "truncated, 3145728 bytes") || !utf8.ValidString(nack) {
		t.Errorf("NACK detail of %d bytes on /debug/syncz (want ≤ %d, valid UTF-8, saying its size)", len(nack), MaxNackDetail+64)
	}
	if logs.Len() > 4*MaxNackDetail {
		t.Errorf("the NACK was logged in %d bytes", logs.Len())
	}
}

// Observation 7: the shared subscription map kept its peak size after the
// stream that grew it ended. Not parallel: it measures the heap.
func TestSubscriptionIndexShrinksWhenStreamsLeave(t *testing.T) {
	s := newStore()
	x := newTestADS(t, s, true)
	x.a.limits.MaxNames = 1 << 20
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	const n = 200_000
	base := heap()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%0100d", i) // 100 B
	}
	x.deltaReq(&discovery.DeltaDiscoveryRequest{Node: envoyNode("n1"), ResourceNamesSubscribe: names})
	names = nil
	during := heap()
	x.a.close(x.st)
	after := heap()
	if l := len(s.colls[edsKind].subs); l != 0 {
		t.Fatalf("%d names still indexed after the stream ended", l)
	}
	grown := int64(during) - int64(base)
	kept := int64(after) - int64(base)
	t.Logf("heap: +%d KB while subscribed, +%d KB after the stream ended", grown>>10, kept>>10)
	if grown < 10<<20 {
		t.Fatalf("subscribing %d names grew the heap by only %d KB: the test measures nothing", n, grown>>10)
	}
	if kept > grown/25 {
		t.Errorf("after the stream ended the heap keeps %d KB of the %d KB its subscriptions took", kept>>10, grown>>10)
	}
}
