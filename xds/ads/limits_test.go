package ads

import (
	"bytes"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
)

// Observation 7: a 3 MB error_detail was logged whole on every NACK and
// served whole by /debug/syncz.
func TestNackDetailIsTruncated(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	s := newTestStore()
	x := newTestADS(t, s, true)
	x.a.tracker = newTracker(slog.New(slog.NewTextHandler(&logs, nil)), nil)
	x.st = x.a.open(true)
	applyTo(s, edsKind, map[string]types.Resource{"a": cla("a", 1)})
	x.deltaReq(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "n1"}, ResourceNamesSubscribe: []string{"a"}})
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
	s := newTestStore()
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
	x.deltaReq(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "n1"}, ResourceNamesSubscribe: names})
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
