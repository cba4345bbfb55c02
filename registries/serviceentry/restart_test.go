package serviceentry

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/meshfed/meshfed/kubeclient"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

// TestKubeDownAtRestartKeepsState: a restart (the sink already serves a
// state, restored or from the previous Run) while every cluster is
// unreachable publishes nothing, not even through the hold-down
// confirmation, for twice the confirmation period: the registry only
// reports Degraded, naming the cluster, and the state served stays.
func TestKubeDownAtRestartKeepsState(t *testing.T) {
	t.Parallel()
	const confirm = 150 * time.Millisecond
	sink := registrytest.NewSink()
	prior := []model.Service{{Hostname: "pay.ext.example", Ports: []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}},
		Endpoints: []model.Endpoint{{Address: "192.0.2.1", Source: model.Source{Registry: common.Name}}}}}
	sink.Replace(common.Shard(), prior, nil)

	r := &Registry{common: common, confirmAfter: confirm,
		kube: kubeclient.IstioOptions{Kinds: []string{KindServiceEntry, KindWorkloadEntry},
			Clusters: []kubeclient.Cluster{{Name: "east", Connect: func() (*rest.Config, func(), error) {
				return nil, nil, errors.New("dial tcp: connection refused")
			}}}}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx, sink) }()
	defer func() { cancel(); <-done }()

	sink.WaitFor(t, 10*time.Second, func(s registrytest.State) bool { return s.Status.State == registries.Degraded })
	time.Sleep(3 * confirm) // the first decided Flush, then past 2× the confirmation period
	st := sink.State(common.Shard())
	if st.Replaces != 1 || len(st.Services) != 1 || st.Services[0].Hostname != "pay.ext.example" {
		t.Fatalf("published while every cluster is unreachable: %s", st)
	}
	if st.Status.State != registries.Degraded || st.Status.Err == "" {
		t.Errorf("status %+v, want Degraded naming the cluster", st.Status)
	}
}
