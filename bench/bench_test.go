package bench

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/translate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestHarnessSmoke runs the whole measurement path in-process with a few
// streams: server (meshfed and baseline), load generator, one churn
// write, and the join of the write's stamp with every stream's ACK.
func TestHarnessSmoke(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		impl  func() Impl
		opts  []grpc.ServerOption
		delta bool
		wild  bool
		fixed bool // the load generator's FixedWindows
	}{
		{name: "meshfed/delta/named", impl: func() Impl { return NewMeshfed(time.Millisecond, 10*time.Millisecond, slog.New(slog.DiscardHandler)) }, delta: true},
		{name: "meshfed/delta/named/fixed-windows", impl: func() Impl { return NewMeshfed(time.Millisecond, 10*time.Millisecond, slog.New(slog.DiscardHandler)) }, delta: true, fixed: true},
		{name: "meshfed/sotw/wildcard", impl: func() Impl { return NewMeshfed(time.Millisecond, 10*time.Millisecond, slog.New(slog.DiscardHandler)) }, wild: true},
		{name: "baseline/delta/named", impl: func() Impl { return NewBaseline(slog.New(slog.DiscardHandler)) }, delta: true},
		{name: "floor/delta/named", impl: func() Impl { return NewFloor() }, opts: FloorServerOptions(), delta: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const services, streams = 30, 5
			impl := tc.impl()
			t.Cleanup(impl.Close)
			ctl := NewController(impl, NewState(services, 3), true)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			t.Cleanup(cancel)
			if err := ctl.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			l, err := Listen("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			g := GRPCServer(tc.opts...)
			impl.Register(g)
			go func() { _ = g.Serve(l) }()
			t.Cleanup(g.Stop)
			hs := httptest.NewServer(ctl.Handler(nil))
			t.Cleanup(hs.Close)

			lg := NewLoadgen(LoadOptions{Addr: l.Addr().String(), N: streams, Delta: tc.delta, Wildcard: tc.wild,
				Services: services, Per: 10, Common: 2, FixedWindows: tc.fixed})
			lgCtx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); _ = lg.Run(lgCtx) }()
			t.Cleanup(func() { stop(); <-done })
			waitFor(t, func() bool { return lg.Stats().Synced == streams })
			lg.Drain()

			resp, err := http.Post(hs.URL+"/event?svc=1", "", nil)
			if err != nil {
				t.Fatal(err)
			}
			var ev Event
			err = json.NewDecoder(resp.Body).Decode(&ev)
			resp.Body.Close()
			if err != nil || ev.Seq != 1 || ev.Svc != 1 {
				t.Fatalf("event = %+v, %v", ev, err)
			}
			acked := map[int32]int64{}
			waitFor(t, func() bool {
				for _, r := range lg.Drain() {
					if r.Svc == 1 && r.Seq >= ev.Seq {
						acked[r.Stream] = r.Ack
					}
				}
				return len(acked) == streams
			})
			for s, at := range acked {
				if d := time.Duration(at - ev.Stamp); d <= 0 || d > 10*time.Second {
					t.Errorf("stream %d: write → ACK %s", s, d)
				}
			}
			if st := lg.Stats(); st.Bytes == 0 || st.Responses < 2*streams {
				t.Errorf("stats %+v: want bytes and at least two responses per stream", st)
			}
		})
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 15s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMaxSeq(t *testing.T) {
	t.Parallel()
	st := NewState(3, 4)
	st.Flip(2)
	st.Flip(2)
	svcs := st.Services()
	tr := translate.NewTranslator()
	tr.Translate(model.NewSnapshot(1, []*model.Service{&svcs[0], &svcs[2]}))
	for _, tc := range []struct {
		svc     int
		wantSeq int64
		wantOK  bool
	}{
		{svc: 0, wantOK: false},
		{svc: 2, wantSeq: 2, wantOK: true},
	} {
		cla := tr.Resources(translate.KindOf("", translate.EndpointType))[ClusterName(tc.svc)]
		b, err := cache.MarshalResource(cla)
		if err != nil {
			t.Fatal(err)
		}
		if seq, ok := MaxSeq(b); seq != tc.wantSeq || ok != tc.wantOK {
			t.Errorf("svc %d: MaxSeq = %d, %v; want %d, %v", tc.svc, seq, ok, tc.wantSeq, tc.wantOK)
		}
		if got := firstName(b); got != ClusterName(tc.svc) {
			t.Errorf("firstName = %q", got)
		}
	}
}

func TestSummarizeAndWatched(t *testing.T) {
	t.Parallel()
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(100 - i)
	}
	if s := Summarize(xs); s != (Summary{N: 100, P50: 50, P99: 99, Max: 100}) {
		t.Errorf("Summarize = %+v", s)
	}
	count := map[int]int{}
	for s := range 1000 {
		w := Watched(s, 1000, 100, 10)
		if len(w) != 100 || w[0] != 0 || w[9] != 9 {
			t.Fatalf("stream %d watches %d services starting %v", s, len(w), w[:10])
		}
		for _, i := range w {
			count[i]++
		}
	}
	if count[0] != 1000 || count[500] < 80 || count[500] > 100 {
		t.Errorf("service 0 watched by %d, service 500 by %d streams", count[0], count[500])
	}
}
