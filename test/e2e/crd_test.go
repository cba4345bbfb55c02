package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/client-go/pkg/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/test/servers"
)

// istioApplier creates or updates Istio objects in one cluster, as
// `kubectl apply` of the YAML would.
type istioApplier struct {
	t  *testing.T
	cs versioned.Interface
}

func newIstioApplier(t *testing.T, api *servers.KubeAPIServer) *istioApplier {
	t.Helper()
	cs, err := versioned.NewForConfig(&rest.Config{Host: api.URL, BearerToken: servers.AdminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: api.CA}})
	if err != nil {
		t.Fatal(err)
	}
	return &istioApplier{t: t, cs: cs}
}

// apply creates or updates every VirtualService, DestinationRule,
// ServiceEntry and WorkloadEntry of the multi-document YAML docs.
func (a *istioApplier) apply(docs string) {
	a.t.Helper()
	ctx := context.Background()
	for _, doc := range strings.Split(docs, "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			a.t.Fatal(err)
		}
		var err error
		switch meta.Kind {
		case "VirtualService":
			vs := &networkingv1.VirtualService{}
			if err := yaml.Unmarshal([]byte(doc), vs); err != nil {
				a.t.Fatal(err)
			}
			c := a.cs.NetworkingV1().VirtualServices(vs.Namespace)
			if old, gerr := c.Get(ctx, vs.Name, metav1.GetOptions{}); gerr == nil {
				vs.ResourceVersion = old.ResourceVersion
				_, err = c.Update(ctx, vs, metav1.UpdateOptions{})
			} else {
				_, err = c.Create(ctx, vs, metav1.CreateOptions{})
			}
		case "DestinationRule":
			dr := &networkingv1.DestinationRule{}
			if err := yaml.Unmarshal([]byte(doc), dr); err != nil {
				a.t.Fatal(err)
			}
			c := a.cs.NetworkingV1().DestinationRules(dr.Namespace)
			if old, gerr := c.Get(ctx, dr.Name, metav1.GetOptions{}); gerr == nil {
				dr.ResourceVersion = old.ResourceVersion
				_, err = c.Update(ctx, dr, metav1.UpdateOptions{})
			} else {
				_, err = c.Create(ctx, dr, metav1.CreateOptions{})
			}
		case "ServiceEntry":
			se := &networkingv1.ServiceEntry{}
			if err := yaml.Unmarshal([]byte(doc), se); err != nil {
				a.t.Fatal(err)
			}
			c := a.cs.NetworkingV1().ServiceEntries(se.Namespace)
			if old, gerr := c.Get(ctx, se.Name, metav1.GetOptions{}); gerr == nil {
				se.ResourceVersion = old.ResourceVersion
				_, err = c.Update(ctx, se, metav1.UpdateOptions{})
			} else {
				_, err = c.Create(ctx, se, metav1.CreateOptions{})
			}
		case "WorkloadEntry":
			we := &networkingv1.WorkloadEntry{}
			if err := yaml.Unmarshal([]byte(doc), we); err != nil {
				a.t.Fatal(err)
			}
			c := a.cs.NetworkingV1().WorkloadEntries(we.Namespace)
			if old, gerr := c.Get(ctx, we.Name, metav1.GetOptions{}); gerr == nil {
				we.ResourceVersion = old.ResourceVersion
				_, err = c.Update(ctx, we, metav1.UpdateOptions{})
			} else {
				_, err = c.Create(ctx, we, metav1.CreateOptions{})
			}
		default:
			a.t.Fatalf("apply: kind %q", meta.Kind)
		}
		if err != nil {
			a.t.Fatalf("apply %s: %v", meta.Kind, err)
		}
	}
}

func (a *istioApplier) delete(kind, ns, name string) {
	a.t.Helper()
	ctx := context.Background()
	var err error
	switch kind {
	case "VirtualService":
		err = a.cs.NetworkingV1().VirtualServices(ns).Delete(ctx, name, metav1.DeleteOptions{})
	case "DestinationRule":
		err = a.cs.NetworkingV1().DestinationRules(ns).Delete(ctx, name, metav1.DeleteOptions{})
	case "ServiceEntry":
		err = a.cs.NetworkingV1().ServiceEntries(ns).Delete(ctx, name, metav1.DeleteOptions{})
	case "WorkloadEntry":
		err = a.cs.NetworkingV1().WorkloadEntries(ns).Delete(ctx, name, metav1.DeleteOptions{})
	default:
		a.t.Fatalf("delete: kind %q", kind)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		a.t.Fatal(err)
	}
}

// TestKubernetesConfigSourceGRPC: VirtualServices and DestinationRules in a
// real kube-apiserver (Istio's CRDs installed) steer a real grpc-go xDS
// client through the built binary: created, updated, made invalid
// (rejected alone, listed on /debug/configz, the last good rule stays) and
// deleted. The services come from a file registry; the cluster is a
// kubernetes registry whose credentials the config source reuses.
func TestKubernetesConfigSourceGRPC(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	api := servers.StartKubeClusters(t, 1).Servers[0]
	api.InstallIstioCRDs(t)
	api.EnsureNamespace(t, "e2e")
	istio := newIstioApplier(t, api)

	dir := t.TempDir()
	v1, v2 := startBackend(t, "v1"), startBackend(t, "v2")
	writeFile(t, filepath.Join(dir, "services.yaml"), trafficServices(map[string][][2]any{"echo": {{v1, "v1"}, {v2, "v2"}}}))
	kubeconfig := api.WriteKubeconfig(t, "east", servers.AdminToken)
	config, xdsAddr, adminAddr := writeClusters(t, dir,
		"  - {name: vms, kind: file, domain: vm.internal, file: {path: services.yaml}}\n"+
			kubeEntry("east", kubeconfig, "")+
			"configSources:\n  - {name: k8s, kubernetes: {clusters: [east], namespaces: [e2e]}}\n")
	if out, stderr, code := meshfedCmd(t, "validate", config); code != 0 || !strings.Contains(out, "config source k8s: the Istio CRDs of kubernetes clusters east, read at run time") {
		t.Fatalf("validate: exit %d, stdout %q, stderr %q", code, out, stderr)
	}

	// Rules that exist before meshfed starts are in force once it is ready.
	istio.apply(trafficDR + "---\n" + echoVS(0, 100))
	m := startMeshfed(t, config, xdsAddr, adminAddr)
	m.waitReady(t, 60*time.Second)
	configz := func() istioconfig.Status {
		var st istioconfig.Status
		if code := m.getJSON(t, "/debug/configz", &st); code != 200 {
			t.Fatalf("/debug/configz: %d", code)
		}
		return st
	}
	st := configz()
	if len(st.InForce) != 3 || st.InForce[2].Source != "e2e/echo (east)" || len(st.Sources) != 1 || st.Sources[0].State != "Synced" {
		t.Fatalf("configz at ready: %+v", st)
	}

	b, stderr, code := meshfedCmd(t, "bootstrap", "--grpc", "--config", config, "--node-id", "split")
	if code != 0 {
		t.Fatalf("bootstrap: exit %d: %s", code, stderr)
	}
	split := startClientCmd(t, b, xdsClientBin, "-target", "xds:///echo.vm.internal:8080", "-interval", "5ms", "-duration", "3m")
	// The first call already follows the rule: it was served with the
	// first snapshot, not after it.
	if first := split.collect(t, 1, 30*time.Second)[0]; first.Backend != "v2" {
		t.Fatalf("first call: %+v, want v2 (0/100 in force at start)", first)
	}
	split.waitFor(t, "v2", 100, 30*time.Second)
	connected := proxyConnected(t, m, "split")

	t.Run("update shifts traffic without reconnecting", func(t *testing.T) {
		istio.apply(echoVS(100, 0))
		split.drain()
		split.waitFor(t, "v1", 200, 30*time.Second)
		if again := proxyConnected(t, m, "split"); !again.Equal(connected) {
			t.Errorf("client reconnected (connected %v, then %v)", connected, again)
		}
	})

	t.Run("an invalid object is rejected alone, the last good rule stays", func(t *testing.T) {
		istio.apply(echoVS(-5, 100))
		eventually(t, 20*time.Second, "the rejection in /debug/configz", func() error {
			st := configz()
			if len(st.Rejected) != 1 {
				return fmt.Errorf("rejected %+v", st.Rejected)
			}
			r := st.Rejected[0]
			if r.Name != "echo" || !r.KeptLastGood || r.Source != "e2e/echo (east)" || !strings.Contains(r.Reason, "weight -5") {
				return fmt.Errorf("rejection %+v", r)
			}
			if len(st.InForce) != 3 {
				return fmt.Errorf("in force %+v, want all 3 objects", st.InForce)
			}
			return nil
		})
		split.drain()
		split.waitFor(t, "v1", 100, 30*time.Second)
	})

	t.Run("deleting the rules restores round robin", func(t *testing.T) {
		istio.delete("VirtualService", "e2e", "echo")
		istio.delete("DestinationRule", "e2e", "echo")
		istio.delete("DestinationRule", "e2e", "sticky")
		eventually(t, 20*time.Second, "nothing in force", func() error {
			if st := configz(); len(st.InForce) != 0 || len(st.Rejected) != 0 {
				return fmt.Errorf("in force %+v, rejected %+v", st.InForce, st.Rejected)
			}
			return nil
		})
		split.drain()
		eventually(t, 30*time.Second, "calls answered by both backends", func() error {
			got := split.answered(t, 40)
			if got["v1"] == 0 || got["v2"] == 0 || got["v1"]+got["v2"] != 40 {
				return fmt.Errorf("last 40 calls: %v", got)
			}
			return nil
		})
	})
}

// TestKubernetesConfigSourceReadiness: a cluster without Istio's CRDs is
// Failed, not waited for: /readyz is 200 and names the config source and
// why (as /debug/configz does); once the CRDs are installed the source
// syncs and its rules apply.
func TestKubernetesConfigSourceReadiness(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	api := servers.StartKubeClusters(t, 1).Servers[0]
	api.EnsureNamespace(t, "e2e")
	dir := t.TempDir()
	v1, v2 := startBackend(t, "v1"), startBackend(t, "v2")
	writeFile(t, filepath.Join(dir, "services.yaml"), trafficServices(map[string][][2]any{"echo": {{v1, "v1"}, {v2, "v2"}}}))
	config, xdsAddr, adminAddr := writeClusters(t, dir,
		"  - {name: vms, kind: file, domain: vm.internal, file: {path: services.yaml}}\n"+
			kubeEntry("east", api.WriteKubeconfig(t, "east", servers.AdminToken), "")+
			"configSources:\n  - {name: k8s, kubernetes: {clusters: [east]}}\nsyncTimeout: 5s\n")
	m := startMeshfed(t, config, xdsAddr, adminAddr)
	// The cluster is Failed at once (404: nothing will come by waiting),
	// so readiness does not wait for it, and /readyz says what is missing.
	eventually(t, 30*time.Second, "/readyz 200 naming the failed config source", func() error {
		code, body, err := m.get("/readyz")
		if err != nil {
			return err
		}
		if code != 200 || !strings.Contains(string(body), "config source k8s cluster east failed") || !strings.Contains(string(body), "install Istio's CRDs") {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	var st istioconfig.Status
	m.getJSON(t, "/debug/configz", &st)
	if len(st.Sources) != 1 || st.Sources[0].State != "Failed" || !strings.Contains(st.Sources[0].Error, "networking.istio.io/v1 is not served") {
		t.Errorf("sources = %+v, want east Failed with the reason", st.Sources)
	}

	api.InstallIstioCRDs(t)
	newIstioApplier(t, api).apply(trafficDR + "---\n" + echoVS(0, 100))
	eventually(t, 60*time.Second, "the source synced with the rules in force", func() error {
		var st istioconfig.Status
		m.getJSON(t, "/debug/configz", &st)
		if len(st.Sources) != 1 || st.Sources[0].State != "Synced" || len(st.InForce) != 3 {
			return fmt.Errorf("sources %+v, in force %+v", st.Sources, st.InForce)
		}
		return nil
	})
	b, stderr, code := meshfedCmd(t, "bootstrap", "--grpc", "--config", config, "--node-id", "late")
	if code != 0 {
		t.Fatalf("bootstrap: exit %d: %s", code, stderr)
	}
	c := startClientCmd(t, b, xdsClientBin, "-target", "xds:///echo.vm.internal:8080", "-interval", "5ms", "-duration", "3m")
	c.waitFor(t, "v2", 100, 30*time.Second)
}
