package istioconfig

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
)

// TestSidecarValidation: Sidecars of every apiVersion are read; each
// problem of an invalid one is reported at its line:col, and the object
// is rejected alone (the valid one beside it is in force).
func TestSidecarValidation(t *testing.T) {
	t.Parallel()
	const doc = `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: bad, namespace: shop}
spec:
  workloadSelector: {labels: {app: web}}
  egress:
  - hosts: ["./*", "istio-system/*", "bad", "x/y/z", "*/*.example.com", "~/*", "Ab_/x"]
  - hosts: []
---
apiVersion: networking.istio.io/v1beta1
kind: Sidecar
metadata: {name: typo, namespace: shop}
spec:
  egress:
  - hosts: ["./*"]
    bogus: 1
---
apiVersion: networking.istio.io/v1alpha3
kind: Sidecar
metadata: {name: good, namespace: shop}
spec:
  egress:
  - hosts: ["./*", "*/*.example.com", "~/x.example.com", "~shop/y.shop.svc.cluster.local", "istio-system/*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs}
spec:
  hosts: [a]
  exportTo: [".", "*"]
  http: [{route: [{destination: {host: a}}]}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: dr}
spec:
  host: a
  exportTo: ["Bad"]
`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sc.yaml"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	st := Validate(Dir{Name: "d", Path: dir})
	if len(st.InForce) != 1 || st.InForce[0].Kind != KindSidecar || st.InForce[0].Name != "good" {
		t.Errorf("in force = %+v, want only Sidecar shop/good", st.InForce)
	}
	var got []string
	for _, r := range st.Rejected {
		for _, l := range strings.Split(r.String(), "\n") {
			got = append(got, strings.TrimPrefix(l, dir+string(filepath.Separator)))
		}
	}
	want := []string{
		`sc.yaml:7:38 Sidecar shop/bad: spec.egress[0].hosts[2] "bad": want namespace/dnsName`,
		`sc.yaml:7:45 Sidecar shop/bad: spec.egress[0].hosts[3] "x/y/z": want namespace/dnsName`,
		`sc.yaml:7:80 Sidecar shop/bad: spec.egress[0].hosts[6] "Ab_/x": namespace "Ab_": want *, ., ~ or a DNS-1123 label`,
		`sc.yaml:8:5 Sidecar shop/bad: spec.egress[1]: only one egress listener may omit the port (the catch-all)`,
		`sc.yaml:8:5 Sidecar shop/bad: spec.egress[1].hosts: at least one host is required`,
		`sc.yaml:16:5 Sidecar shop/typo: spec.egress[0].bogus: unknown field "bogus" of IstioEgressListener`,
		`sc.yaml:30:19 VirtualService default/vs: spec.exportTo[1] "*": must be the only entry`,
		`sc.yaml:38:14 DestinationRule default/dr: spec.exportTo[0] "Bad": want *, ., ~ or a namespace (DNS-1123 label)`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("rejections:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSidecarFromFeed: a Sidecar from a Kubernetes cluster goes through
// the same gate: a valid one is in force, an invalid one is rejected
// alone with its reason, its last good version kept.
func TestSidecarFromFeed(t *testing.T) {
	t.Parallel()
	sc := func(name string, hosts ...string) FeedObject {
		return FeedObject{Kind: KindSidecar, Namespace: "shop", Name: name, Source: "shop/" + name + " (east)",
			Spec: &networking.Sidecar{Egress: []*networking.IstioEgressListener{{Hosts: hosts}}}}
	}
	f := &fakeFeed{}
	f.set(FeedPart{Name: "east", Synced: true, Objects: []FeedObject{sc("default", "./*"), sc("bad", "nonamespace")}})
	s := New(nil, nil, f)
	s.Reload()
	st := s.Status()
	if len(st.InForce) != 1 || st.InForce[0].Kind != KindSidecar || st.InForce[0].Name != "default" {
		t.Errorf("in force = %+v", st.InForce)
	}
	if len(st.Rejected) != 1 || !strings.Contains(st.Rejected[0].Reason, `spec.egress[0].hosts[0] "nonamespace": want namespace/dnsName`) {
		t.Errorf("rejected = %+v", st.Rejected)
	}
	f.set(FeedPart{Name: "east", Synced: true, Objects: []FeedObject{sc("default", "./*", "bad/")}})
	s.Reload()
	st = s.Status()
	if len(st.InForce) != 1 || len(st.Rejected) != 1 || !st.Rejected[0].KeptLastGood {
		t.Errorf("an invalid edit: in force %+v, rejected %+v (want the last good version kept)", st.InForce, st.Rejected)
	}
}
