package servers

import (
	"bytes"
	"context"
	_ "embed" // the CRDs
	"errors"
	"io"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// istioCRDs are Istio's DestinationRule, ServiceEntry, Sidecar,
// VirtualService and WorkloadEntry CRDs (see the file's header for where they come from).
//
//go:embed testdata/istio-networking-crds.yaml
var istioCRDs []byte

// InstallIstioCRDs creates Istio's DestinationRule, ServiceEntry, Sidecar,
// VirtualService and WorkloadEntry CustomResourceDefinitions
// (networking.istio.io v1, v1beta1, v1alpha3, as istio.io/api ships them) with the admin token, unless they exist, and
// waits until the API server serves all five at networking.istio.io/v1.
func (k *KubeAPIServer) InstallIstioCRDs(t testing.TB) {
	t.Helper()
	rc := k.Client(t, AdminToken).Discovery().RESTClient()
	ctx := context.Background()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(istioCRDs), 1<<16)
	for {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("istio CRDs: %v", err)
		}
		if len(bytes.TrimSpace(raw.Raw)) == 0 || string(raw.Raw) == "null" {
			continue
		}
		err := rc.Post().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions").
			SetHeader("Content-Type", "application/json").Body(raw.Raw).Do(ctx).Error()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create Istio CRD: %v", err)
		}
	}
	deadline := time.Now().Add(KubeStartTimeout)
	for _, res := range []string{"virtualservices", "destinationrules", "sidecars", "serviceentries", "workloadentries"} {
		for {
			err := rc.Get().AbsPath("/apis/networking.istio.io/v1/" + res).Do(ctx).Error()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("networking.istio.io/v1 %s not served after %v: %v", res, KubeStartTimeout, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
