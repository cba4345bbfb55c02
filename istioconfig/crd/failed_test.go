package crd

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/kubeclient"
)

// TestRefusedClusterIsFailed: a cluster whose API server refuses the first
// list for good (404: no Istio CRDs, 403: no rights) is a Failed feed part
// with the reason, so the gateway does not wait for it; one that answers
// 503 stays Starting (it may come). (kubeclient tests the same of its
// IstioWatch; this is what the source hands istioconfig.)
func TestRefusedClusterIsFailed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code       int
		failed     bool
		wantReason string
	}{
		{404, true, "install Istio's CRDs"},
		{403, true, "grant get, list and watch"},
		{503, false, ""},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(tc.code)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"refused","code":` + strconv.Itoa(tc.code) + `}`))
		}))
		t.Cleanup(srv.Close)
		s := New(Options{Name: "k8s", Clusters: []kubeclient.Cluster{{Name: "east", Connect: func() (*rest.Config, func(), error) {
			return &rest.Config{Host: srv.URL}, func() {}, nil
		}}}})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = s.Run(ctx, func() {}) }()
		var p istioconfig.FeedPart
		deadline := time.Now().Add(20 * time.Second)
		for {
			p = s.Parts()[0]
			if p.Err != "" || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		<-done
		if p.Err == "" {
			t.Fatalf("%d: no error after 20s: %+v", tc.code, p)
		}
		if p.Failed != tc.failed || p.Synced || !strings.Contains(p.Err, tc.wantReason) {
			t.Errorf("%d: part = %+v, want Failed %v with %q", tc.code, p, tc.failed, tc.wantReason)
		}
	}
}
