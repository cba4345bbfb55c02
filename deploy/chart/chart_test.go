package chart_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/meshfed/meshfed/config"
	"github.com/meshfed/meshfed/deploy/chart"
	"github.com/meshfed/meshfed/test/servers"
)

// objects splits a rendered stream into objects.
func objects(t *testing.T, manifest []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("rendered YAML: %v", err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

func find(objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind {
			return o
		}
	}
	return nil
}

func kinds(objs []*unstructured.Unstructured) []string {
	var ks []string
	for _, o := range objs {
		ks = append(ks, o.GetKind()+"/"+o.GetName())
	}
	return ks
}

// nonDefault exercises every optional part of the chart.
var nonDefault = chart.Options{
	ReleaseName: "edge",
	Namespace:   "mesh-system",
	Set: []string{
		"replicaCount=3",
		"antiAffinity=hard",
		"service.exposeAdmin=true",
		"serviceMonitor.enabled=true",
		"config.kubernetes.network=east-net",
		"config.kubernetes.namespaces={shop,pay}",
		"config.kubernetes.secretDiscovery.namespace=istio-system",
		"config.syncTimeoutSeconds=120",
		"credentials.consul-token=s3cr3t",
		"state.volume.ephemeral.volumeClaimTemplate.spec.accessModes={ReadWriteOnce}",
		"state.volume.ephemeral.volumeClaimTemplate.spec.resources.requests.storage=1Gi",
		"podDisruptionBudget.minAvailable=2",
		"admin.tokenSecret=",
	},
	ValuesFiles: []string{"testdata/registries.yaml"},
}

// clustersYAML validates the clusters.yaml of the rendered ConfigMap (and
// the services files beside it) with meshfed's own loader.
func clustersYAML(t *testing.T, objs []*unstructured.Unstructured) *config.Config {
	t.Helper()
	cm := find(objs, "ConfigMap")
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	dir := t.TempDir()
	for name, content := range data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The chart mounts the admin token Secret at /etc/meshfed/admin.
	if err := os.MkdirAll(filepath.Join(dir, "admin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "admin", "token"), []byte("chart-test-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The chart mounts the ConfigMap at /etc/meshfed: point the paths at dir.
	cfg := strings.ReplaceAll(data["clusters.yaml"], "/etc/meshfed/", dir+"/")
	p := filepath.Join(dir, "clusters.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(p)
	if err != nil {
		t.Fatalf("meshfed rejects the chart's clusters.yaml: %v\n%s", err, cfg)
	}
	return c
}

// The rendered clusters.yaml passes meshfed's own loader, with warm start
// on (the default) and off.
func TestRenderedConfigIsValid(t *testing.T) {
	t.Parallel()
	for name, o := range map[string]chart.Options{"default": {}, "non-default": nonDefault} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, err := chart.Render(o)
			if err != nil {
				t.Fatal(err)
			}
			objs := objects(t, b)
			cm := find(objs, "ConfigMap")
			cfg, _, _ := unstructured.NestedString(cm.Object, "data", "clusters.yaml")
			if !strings.Contains(cfg, "state:\n  dir: /var/lib/meshfed/state\n") {
				t.Errorf("clusters.yaml lacks the state dir:\n%s", cfg)
			}
			c := clustersYAML(t, objs)
			if c.State.Dir != "/var/lib/meshfed/state" {
				t.Errorf("state.dir = %q", c.State.Dir)
			}
			// The debug API is protected by default; non-default turns it off.
			if wantToken := name == "default"; (c.Admin.TokenFile != "") != wantToken {
				t.Errorf("admin.tokenFile = %q, want set: %v", c.Admin.TokenFile, wantToken)
			}
			// config.kubernetes.istioConfig reads the cluster's Istio CRDs;
			// config.configSources adds entries.
			var sources []string
			for _, s := range c.ConfigSources {
				if s.Kubernetes != nil {
					sources = append(sources, s.Name+" kubernetes "+strings.Join(s.Kubernetes.Clusters, ","))
				} else {
					sources = append(sources, s.Name+" dir "+filepath.Base(s.Dir))
				}
			}
			if want := map[string][]string{"non-default": {"primary-istio kubernetes primary", "local dir traffic"}}[name]; !slices.Equal(sources, want) {
				t.Errorf("configSources = %q, want %q", sources, want)
			}
			o.Set = append(slices.Clone(o.Set), "state.enabled=false")
			b, err = chart.Render(o)
			if err != nil {
				t.Fatal(err)
			}
			c = clustersYAML(t, objects(t, b))
			if c.State.Dir != "" {
				t.Errorf("state.enabled=false: state.dir = %q", c.State.Dir)
			}
			if c.XDS.Address != "0.0.0.0:15010" || c.Admin.Address != "0.0.0.0:15014" || c.Registries[0].Kind != "kubernetes" {
				t.Errorf("config = %+v", c)
			}
		})
	}
}

func TestRenderDefaults(t *testing.T) {
	t.Parallel()
	b, err := chart.Render(chart.Options{})
	if err != nil {
		t.Fatal(err)
	}
	objs := objects(t, b)
	want := []string{"PodDisruptionBudget/meshfed", "ServiceAccount/meshfed", "ConfigMap/meshfed-config",
		"ClusterRole/meshfed-reader", "ClusterRoleBinding/meshfed-reader", "Role/meshfed-remote-secrets",
		"RoleBinding/meshfed-remote-secrets", "Service/meshfed", "Deployment/meshfed"}
	if got := kinds(objs); !slices.Equal(got, want) {
		t.Errorf("objects = %v\nwant %v", got, want)
	}
	d := find(objs, "Deployment")
	if r, _, _ := unstructured.NestedFieldNoCopy(d.Object, "spec", "replicas"); !equalJSON(r, 2) {
		t.Errorf("replicas = %v, want 2", r)
	}
	pod, _, _ := unstructured.NestedMap(d.Object, "spec", "template", "spec")
	c := pod["containers"].([]any)[0].(map[string]any)
	for path, want := range map[string]any{
		"securityContext.readOnlyRootFilesystem":   true,
		"securityContext.allowPrivilegeEscalation": false,
		"securityContext.capabilities.drop":        []any{"ALL"},
		"livenessProbe.httpGet.path":               "/healthz",
		"readinessProbe.httpGet.path":              "/readyz",
		"startupProbe.httpGet.path":                "/readyz",
		"startupProbe.failureThreshold":            int64(19), // (2×30s sync + 30s) / 5s + 1
		"resources.limits.memory":                  "512Mi",
	} {
		got, _, _ := unstructured.NestedFieldNoCopy(c, strings.Split(path, ".")...)
		if !equalJSON(got, want) {
			t.Errorf("container %s = %v, want %v", path, got, want)
		}
	}
	for path, want := range map[string]any{
		"securityContext.runAsNonRoot":        true,
		"securityContext.runAsUser":           int64(65532),
		"securityContext.seccompProfile.type": "RuntimeDefault",
	} {
		got, _, _ := unstructured.NestedFieldNoCopy(pod, strings.Split(path, ".")...)
		if !equalJSON(got, want) {
			t.Errorf("pod %s = %v, want %v", path, got, want)
		}
	}
	if _, ok, _ := unstructured.NestedMap(pod, "affinity", "podAntiAffinity"); !ok {
		t.Error("no pod anti-affinity")
	}
	ports, _, _ := unstructured.NestedSlice(find(objs, "Service").Object, "spec", "ports")
	if len(ports) != 1 || ports[0].(map[string]any)["name"] != "grpc-xds" {
		t.Errorf("service ports = %v, want grpc-xds only (admin not exposed by default)", ports)
	}
	if !strings.Contains(string(b), "mountPath: /var/lib/meshfed/state") || !strings.Contains(string(b), "emptyDir: {}") {
		t.Error("state dir is not on an emptyDir")
	}
}

func equalJSON(a, b any) bool {
	x, _ := yaml.Marshal(a)
	y, _ := yaml.Marshal(b)
	return bytes.Equal(x, y)
}

// A change of clusters.yaml changes the pod template (a rolling update).
func TestConfigChecksumRollsPods(t *testing.T) {
	t.Parallel()
	annotation := func(set ...string) string {
		b, err := chart.Render(chart.Options{Set: set})
		if err != nil {
			t.Fatal(err)
		}
		v, _, _ := unstructured.NestedString(find(objects(t, b), "Deployment").Object, "spec", "template", "metadata", "annotations", "checksum/config")
		return v
	}
	if a, b := annotation(), annotation("config.debounce.quiet=20ms"); a == "" || a == b {
		t.Errorf("checksum/config %q → %q: want a change", a, b)
	}
	if a, b := annotation(), annotation("logLevel=debug"); a != b {
		t.Errorf("checksum/config changed without a config change")
	}
}

// deploy/kubernetes/meshfed.yaml is the chart rendered with its defaults
// (make manifests); make lint checks the same.
func TestManifestsUpToDate(t *testing.T) {
	t.Parallel()
	b, err := chart.Render(chart.Options{})
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(filepath.Join(chart.RepoDir(), "deploy", "kubernetes", "meshfed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(have, b) {
		t.Error("deploy/kubernetes/meshfed.yaml differs from the chart: run make manifests")
	}
}

// TestRealServerSideDryRun applies every object of the chart, rendered with
// default and non-default values, to a real kube-apiserver with
// server-side apply and dryRun=All, in a namespace created for real: every
// object is admitted (schema, defaulting, validation and admission run).
func TestRealServerSideDryRun(t *testing.T) {
	t.Parallel()
	api := servers.StartKubeClusters(t, 1).Servers[0]
	cfg := &rest.Config{Host: api.URL, BearerToken: servers.AdminToken, TLSClientConfig: rest.TLSClientConfig{CAData: api.CA}}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The ServiceMonitor kind needs the Prometheus Operator's CRD: a
	// minimal one (any spec) stands in for it.
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(serviceMonitorCRD), &crd.Object); err != nil {
		t.Fatal(err)
	}
	crdGVR := schemaGVR("apiextensions.k8s.io", "v1", "customresourcedefinitions")
	if _, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name     string
		o        chart.Options
		ns       []string
		rejected string // the one kind the API server must refuse
	}{
		{"default", chart.Options{}, []string{"meshfed"}, ""},
		{"non-default", nonDefault, []string{"mesh-system", "istio-system"}, ""},
		// The check can fail: a value the API server's validation refuses.
		{"invalid", chart.Options{Set: []string{"podDisruptionBudget.minAvailable=-1"}}, []string{"meshfed"}, "PodDisruptionBudget"},
	} {
		b, err := chart.Render(tc.o)
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range tc.ns {
			api.EnsureNamespace(t, ns)
		}
		objs := objects(t, b)
		mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
		admitted := 0
		for _, o := range objs {
			var m *meta.RESTMapping
			deadline := time.Now().Add(30 * time.Second) // the CRD may take a moment to be served
			for {
				m, err = mapper.RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version)
				if err == nil || time.Now().After(deadline) {
					break
				}
				mapper.Reset()
				time.Sleep(200 * time.Millisecond)
			}
			if err != nil {
				t.Errorf("%s: %s: %v", tc.name, o.GetKind(), err)
				continue
			}
			var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
			}
			body, err := o.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			got, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
				FieldManager: "meshfed-chart-test", DryRun: []string{metav1.DryRunAll}, Force: new(true)})
			if o.GetKind() == tc.rejected {
				if !apierrors.IsInvalid(err) {
					t.Errorf("%s: %s admitted or refused for another reason: %v", tc.name, o.GetKind(), err)
				}
				admitted++
				continue
			}
			if err != nil {
				t.Errorf("%s: %s %s/%s not admitted: %v", tc.name, o.GetKind(), o.GetNamespace(), o.GetName(), err)
				continue
			}
			if got.GetUID() == "" && got.GetKind() != o.GetKind() {
				t.Errorf("%s: %s: unexpected answer %v", tc.name, o.GetKind(), got.Object)
			}
			admitted++
		}
		if admitted != len(objs) || admitted == 0 {
			t.Errorf("%s: %d of %d objects admitted: %v", tc.name, admitted, len(objs), kinds(objs))
		}
		// Dry run: nothing was created.
		if _, err := dyn.Resource(schemaGVR("apps", "v1", "deployments")).Namespace(tc.ns[0]).Get(ctx, find(objs, "Deployment").GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: the Deployment exists after a dry run: %v", tc.name, err)
		}
	}
}

const serviceMonitorCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

func schemaGVR(group, version, resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
}
