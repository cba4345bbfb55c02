package serviceentry

import (
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	apinetworking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/kubeclient"
	"github.com/meshfed/meshfed/registries/filewatch"
)

func feedWE(cluster, name, addr string) kubeclient.Object {
	return kubeclient.Object{Kind: KindWorkloadEntry, Namespace: "shop", Name: name, Source: "shop/" + name + " (" + cluster + ")",
		Spec: &apinetworking.WorkloadEntry{Address: addr, Labels: map[string]string{"app": "pay"}}}
}

// TestKubeObjects: clusters in order, each sorted; an object equal to an
// earlier cluster's is one object, a differing one is rejected by the
// merge; an unsynced cluster adds nothing; checks name the source.
func TestKubeObjects(t *testing.T) {
	t.Parallel()
	se := kubeclient.Object{Kind: KindServiceEntry, Namespace: "shop", Name: "pay", Source: "shop/pay (east)",
		Spec: &apinetworking.ServiceEntry{Hosts: []string{"pay.ext.example"}, Ports: []*apinetworking.ServicePort{{Name: "http", Number: 80, Protocol: "HTTP"}},
			WorkloadSelector: &apinetworking.WorkloadSelector{Labels: map[string]string{"app": "pay"}}}}
	parts := []kubeclient.Part{
		{Name: "east", Synced: true, Objects: []kubeclient.Object{feedWE("east", "vm-2", "10.0.0.2"), se, feedWE("east", "vm-1", "10.0.0.1")}},
		{Name: "west", Synced: true, Objects: []kubeclient.Object{feedWE("west", "vm-1", "10.0.0.1"), feedWE("west", "vm-2", "10.0.0.99"), feedWE("west", "vm-3", "")}},
		{Name: "north", Objects: []kubeclient.Object{feedWE("north", "vm-4", "10.0.0.4")}},
	}
	objs := (&kubeChecks{}).objects(parts)
	var got []string
	for _, o := range objs {
		got = append(got, o.Source)
	}
	want := []string{"shop/pay (east)", "shop/vm-1 (east)", "shop/vm-2 (east)", "shop/vm-2 (west)", "shop/vm-3 (west)"}
	if !slices.Equal(got, want) {
		t.Fatalf("objects = %v, want %v", got, want)
	}
	if err := objectError(objs[4]); err == nil || !strings.HasPrefix(err.Error(), "shop/vm-3 (west): WorkloadEntry shop/vm-3: spec.address: is required") {
		t.Errorf("vm-3 error = %v", err)
	}
	m := &merger{common: common, lastGood: map[string]Object{}}
	svcs, rej := m.mergeObjects(objs)
	if got := endpointsOf(svcs, "pay.ext.example"); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Errorf("endpoints = %v, want east's", got)
	}
	if len(rej) != 2 || !strings.Contains(rej[0].String(), "shop/vm-2 (west) WorkloadEntry shop/vm-2: object rejected: WorkloadEntry shop/vm-2 is already declared at shop/vm-2 (east)") {
		t.Errorf("rejected:\n%s", reasons(rej))
	}
}

func TestKubeStatus(t *testing.T) {
	t.Parallel()
	starting := []kubeclient.Part{{Name: "east", Synced: true}, {Name: "west"}}
	if decided(starting) {
		t.Error("decided with west neither listed nor failing")
	}
	if st := kubeStatus(starting); st.Failing() {
		t.Errorf("status = %+v, want Synced (nothing failing)", st)
	}
	failing := []kubeclient.Part{{Name: "east", Synced: true}, {Name: "west", Err: "connection refused"}, {Name: "north", Failed: true, Err: "no kubeconfig"}}
	if !decided(failing) {
		t.Error("not decided with every cluster listed or failing")
	}
	if st := kubeStatus(failing); !st.Failing() || st.Invalid ||
		st.Err != "cluster west: connection refused; cluster north: no kubeconfig" {
		t.Errorf("status = %+v, want Degraded naming west and north", st)
	}
}

func TestConfigKubernetes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Kubernetes: &Kubernetes{Clusters: []string{"east"}}}, ""},
		{Config{Options: filewatch.Options{Path: "x.yaml"}, Kubernetes: &Kubernetes{Clusters: []string{"east"}}}, "kubernetes: path/paths and kubernetes are exclusive"},
		{Config{Kubernetes: &Kubernetes{}}, "kubernetes.clusters: want at least one registry of kind kubernetes"},
		{Config{Kubernetes: &Kubernetes{Clusters: []string{"east", "east"}}}, `kubernetes.clusters[1]: "east" is named twice`},
		{Config{Kubernetes: &Kubernetes{Clusters: []string{"east"}, Namespaces: []string{""}}}, "kubernetes.namespaces[0]: is empty"},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.HasPrefix(err.Error(), tc.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.cfg.Kubernetes, err, tc.want)
		}
	}
	// A cluster whose block was not handed over fails when connecting,
	// naming it.
	c := &Config{Kubernetes: &Kubernetes{Clusters: []string{"east"}}}
	if _, _, err := c.clusters()[0].Connect(); err == nil || !strings.Contains(err.Error(), `registry "east"`) {
		t.Errorf("Connect without a block = %v", err)
	}
	if c.Files() != nil {
		t.Error("Files() of a kubernetes block names files")
	}
}

// TestKubeChecksOnlyChangedObjects: an object whose Spec is the one
// checked last time is not checked again; a new Spec is.
func TestKubeChecksOnlyChangedObjects(t *testing.T) {
	t.Parallel()
	var objs []kubeclient.Object
	for i := range 50 {
		objs = append(objs, feedWE("east", "vm-"+string(rune('A'+i)), "10.0.0.1"))
	}
	var n atomic.Uint64
	c := &kubeChecks{checked: &n}
	part := func() []kubeclient.Part {
		return []kubeclient.Part{{Name: "east", Synced: true, Objects: slices.Clone(objs)}}
	}
	c.objects(part())
	if n.Load() != 50 {
		t.Fatalf("first read checked %d, want 50", n.Load())
	}
	c.objects(part())
	if n.Load() != 50 {
		t.Fatalf("an unchanged read checked %d more", n.Load()-50)
	}
	objs[7] = feedWE("east", objs[7].Name, "") // a new version, invalid
	out := c.objects(part())
	if n.Load() != 51 {
		t.Fatalf("one change checked %d, want 1", n.Load()-50)
	}
	for _, o := range out {
		if (o.Err != nil) != (o.Name == objs[7].Name) {
			t.Errorf("%s: err = %v", o.Name, o.Err)
		}
	}
	objs = objs[1:] // a deletion: nothing to check, and it leaves the cache
	c.objects(part())
	if n.Load() != 51 || len(c.last) != 49 {
		t.Fatalf("after a deletion: checked %d, %d cached; want 51, 49", n.Load(), len(c.last))
	}
}
