package serviceentry

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/meshfed/meshfed/istioconfig/crd"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

// TestKubeDownAtRestartKeepsState: a restart (the sink already serves a
// state, restored or from the previous Run) while every cluster is
// unreachable publishes no complete state, not even through the hold-down
// confirmation, for twice the confirmation period: only partial states
// (which the aggregator holds as the Run's first while it serves one, so
// the state served stays: aggregate.TestPartialFirstStateHeld), failing
// naming the cluster.
func TestKubeDownAtRestartKeepsState(t *testing.T) {
	t.Parallel()
	const confirm = 150 * time.Millisecond
	sink := registrytest.NewSink()
	prior := []model.Service{{Hostname: "pay.ext.example", Ports: []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}},
		Endpoints: []model.Endpoint{{Address: "192.0.2.1", Source: model.Source{Registry: common.Name}}}}}
	sink.Publish(common.Shard(), registries.FullState(prior, nil))

	r := &Registry{common: common, confirmAfter: confirm,
		kube: crd.Options{Name: "istio", Kinds: []string{KindServiceEntry, KindWorkloadEntry},
			Clusters: []crd.Cluster{{Name: "east", Connect: func() (*rest.Config, func(), error) {
				return nil, nil, errors.New("dial tcp: connection refused")
			}}}}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx, sink) }()
	defer func() { cancel(); <-done }()

	sink.WaitFor(t, 10*time.Second, func(s registrytest.State) bool { return s.Failing() })
	time.Sleep(3 * confirm) // the first decided Flush, then past 2× the confirmation period
	st := sink.State(common.Shard())
	for i, u := range st.Updates[1:] {
		if u.HasState && (u.Complete || !u.Failing()) {
			t.Fatalf("update #%d published a complete state while every cluster is unreachable: %s", i+2, st)
		}
	}
	if !st.Failing() || st.Status.Err == "" {
		t.Errorf("status %+v, want Degraded naming the cluster", st.Status)
	}
}
