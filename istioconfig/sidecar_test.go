package istioconfig

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
