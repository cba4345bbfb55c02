package bench

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/file"
	"github.com/meshfed/meshfed/xds/ads"
	"github.com/meshfed/meshfed/xds/translate"
)

// The file scenario's services file is read by the real file registry as
// the services the bench state holds, and a client finds the event marker
// in the translated CLA.
func TestServicesYAMLAndAddrMarker(t *testing.T) {
	t.Parallel()
	st := NewState(3, 4)
	seq := st.FlipAddr(1)
	st.FlipAddr(1)
	want := st.Services()
	got, err := file.Parse("services.yaml", ServicesYAML(want), registries.Common{Name: Registry, Kind: "file", Domain: Domain})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("parsed %d services, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Hostname != want[i].Hostname || len(got[i].Endpoints) != len(want[i].Endpoints) {
			t.Fatalf("service %d: parsed %s with %d endpoints, want %s with %d", i, got[i].Hostname, len(got[i].Endpoints), want[i].Hostname, len(want[i].Endpoints))
		}
		var ga, wa []string
		for j := range want[i].Endpoints {
			ga, wa = append(ga, got[i].Endpoints[j].Address), append(wa, want[i].Endpoints[j].Address)
		}
		slices.Sort(ga)
		slices.Sort(wa)
		if !slices.Equal(ga, wa) {
			t.Errorf("service %d addresses %v, want %v", i, ga, wa)
		}
	}
	ptrs := []*model.Service{&got[0], &got[1]}
	tr := translate.NewTranslator()
	tr.Translate(model.NewSnapshot(1, ptrs))
	for i, wantSeq := range []int64{0, seq + 1} {
		b, err := cache.MarshalResource(tr.Resources(translate.KindOf("", translate.EndpointType))[ClusterName(i)])
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := MaxSeqAddr(b); s != wantSeq || ok != (wantSeq > 0) {
			t.Errorf("service %d: MaxSeqAddr = %d, %v; want %d", i, s, ok, wantSeq)
		}
	}
	se := string(ServiceEntryYAML(&want[1]))
	for _, x := range []string{"kind: ServiceEntry", "hosts: [" + Host(1) + "]", "address: " + SeqAddr(seq+1)} {
		if !strings.Contains(se, x) {
			t.Errorf("ServiceEntry lacks %q:\n%s", x, se)
		}
	}
}

// Reconnect ends the chosen streams' sessions; they come back on new
// connections, sync again, and the others keep their session (the soak's
// reconnecting proxies).
func TestLoadgenReconnect(t *testing.T) {
	t.Parallel()
	const services, streams = 20, 6
	impl := NewMeshfed(time.Millisecond, 10*time.Millisecond, slog.New(slog.DiscardHandler))
	t.Cleanup(impl.Close)
	ctl := NewController(impl, NewState(services, 2), true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	if err := ctl.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := GRPCServer(ads.ServerOptions()...)
	impl.Register(g)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	hs := httptest.NewServer(ctl.Handler(nil))
	t.Cleanup(hs.Close)
	lg := NewLoadgen(LoadOptions{Addr: l.Addr().String(), N: streams, Delta: true, Services: services, Per: 5, Common: 1})
	lgCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = lg.Run(lgCtx) }()
	t.Cleanup(func() { stop(); <-done })
	waitFor(t, func() bool { return lg.Stats().Synced == streams })
	if got := lg.Reconnect(2); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("Reconnect(2) = %v", got)
	}
	if got := lg.Reconnect(2); !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("second Reconnect(2) = %v", got)
	}
	waitFor(t, func() bool {
		ss := lg.Syncs()
		for i, s := range ss {
			want := 1
			if i < 4 {
				want = 2
			}
			if s.Session != want || s.Synced == 0 {
				return false
			}
		}
		return true
	})
	if st := lg.Stats(); st.Sessions != streams+4 {
		t.Errorf("sessions %d, want %d", st.Sessions, streams+4)
	}
}
