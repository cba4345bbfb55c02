package istioconfig

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

// TestDecodeDocuments: only the kinds asked for are decoded, each with its
// position; a recursive alias is an error of its document, found at once
// (it used to expand until the node budget ran out: seconds per document).
func TestDecodeDocuments(t *testing.T) {
	t.Parallel()
	kinds := map[string]Kind{"ServiceEntry": {New: func() proto.Message { return &networking.ServiceEntry{} }}}
	data := "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: skipped}\nspec: {}\n---\n" +
		"apiVersion: networking.istio.io/v1beta1\nkind: ServiceEntry\nmetadata: {name: se}\nspec: {hosts: [a.example]}\n---\n" +
		strings.Repeat("kind: ServiceEntry\nx: &a [*a]\n---\n", 20)
	start := time.Now()
	docs, err := DecodeDocuments("f.yaml", []byte(data), kinds)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("decoding 20 recursive aliases took %v", d)
	}
	if len(docs) != 21 {
		t.Fatalf("%d documents, want 21 (the VirtualService skipped)", len(docs))
	}
	if d := docs[0]; d.Err != nil || d.Source != "f.yaml:6" || d.Namespace != DefaultNamespace || d.Spec.(*networking.ServiceEntry).GetHosts()[0] != "a.example" || d.Node == nil {
		t.Errorf("first document = %+v", d)
	}
	if err := docs[1].Err; err == nil || !strings.Contains(err.Error(), "alias *a refers to a node that contains it") {
		t.Errorf("recursive alias: err = %v", err)
	}
}

// TestDecodeDocumentsProblems (issue 24): every problem of every document
// of any kind is placed at its field's line:column, an unknown field with
// the nearest known name, a value of the wrong type with what the field
// wants; the kind's Validate runs on what decodes, also when a part of the
// spec does not, and a bad apiVersion or name does not hide the spec's
// problems.
func TestDecodeDocumentsProblems(t *testing.T) {
	t.Parallel()
	kinds := map[string]Kind{"ServiceEntry": {
		New: func() proto.Message { return &networking.ServiceEntry{} },
		Validate: func(m proto.Message) error {
			if len(m.(*networking.ServiceEntry).GetPorts()) == 0 {
				return errors.New("spec.ports: at least one port is required")
			}
			return nil
		},
	}}
	data := "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: a}\nspec:\n  hosts: [a.example]\n  resolutoin: STATIC\n" +
		"  endpoints:\n    - address: 10.0.0.1\n      weight: heavy\n---\n" +
		"apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: b}\nspec:\n  hosts: [b.example]\n---\n" +
		"apiVersion: networking.istio.io/v2\nkind: ServiceEntry\nmetadata: {name: C}\nspec:\n  hostz: [c.example]\n"
	docs, err := DecodeDocuments("f.yaml", []byte(data), kinds)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]Problem{{
		{6, 3, `spec.resolutoin: unknown field "resolutoin" of ServiceEntry (did you mean "resolution"?)`},
		{9, 15, `spec.endpoints[0].weight: want an integer, got "heavy"`},
		{4, 1, `spec.ports: at least one port is required`},
	}, {
		{14, 1, `spec.ports: at least one port is required`},
	}, {
		{17, 13, `apiVersion "networking.istio.io/v2": want one of networking.istio.io/v1, networking.istio.io/v1beta1, networking.istio.io/v1alpha3`},
		{19, 18, `metadata.name "C": want a DNS-1123 subdomain (lowercase letters, digits, '-' and '.')`},
		{21, 3, `spec.hostz: unknown field "hostz" of ServiceEntry (did you mean "hosts"?)`},
		{20, 1, `spec.ports: at least one port is required`},
	}}
	if len(docs) != 3 {
		t.Fatalf("%d documents, want 3", len(docs))
	}
	for i, d := range docs {
		if d.Err == nil || d.Spec != nil {
			t.Errorf("document %d: err %v, spec %v; want an error and no spec", i, d.Err, d.Spec)
		}
		if !slices.Equal(d.Problems, want[i]) {
			t.Errorf("document %d problems:\n got %v\nwant %v", i, d.Problems, want[i])
		}
	}
}

// TestRejectionHosts: a rejected object names the hosts it was written
// for, read from its spec even when the spec does not decode.
func TestRejectionHosts(t *testing.T) {
	_, rej := ParseObjects("r.yaml", []byte(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: a, namespace: ns}
spec:
  hosts: [a.vm.internal, b.vm.internal]
  http: [{route: [{destination: {subset: v1}}]}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: c, namespace: ns}
spec:
  host: c.vm.internal
  subsets: [{name: v1, labels: {version: v1}}]
  nosuchfield: 1
`))
	if len(rej) != 2 || !slices.Equal(rej[0].Hosts, []string{"a.vm.internal", "b.vm.internal"}) || !slices.Equal(rej[1].Hosts, []string{"c.vm.internal"}) {
		t.Fatalf("rejections = %+v, want both with their hosts", rej)
	}
}
