package translate

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/internal/testfixture"
)

// badStrings are values a user can put in any string field of a rule.
var badStrings = []string{"", "a\nb", "a\x00b", "a;b", "a b", "A,B", strings.Repeat("x", 300)}

// oracleExtra sets string fields the traffic fixture leaves unset, on a host of
// testfixture.TrafficServices (checked apart from the fixture).
const oracleExtra = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web-extra, namespace: shop}
spec:
  host: web.vm.internal
  trafficPolicy:
    loadBalancer:
      consistentHash:
        httpCookie: {name: s, path: /p, ttl: 10s, attributes: [{name: SameSite, value: Strict}, {name: Secure}]}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web-extra, namespace: shop}
spec:
  hosts: [web.vm.internal]
  http:
  - name: r
    match: [{authority: {exact: web.vm.internal}, scheme: {exact: https}, method: {exact: GET}, queryParams: {q: {exact: v}}, withoutHeaders: {x-no: {exact: v}}}]
    rewrite: {uri: /u, authority: other.example}
    headers: {request: {set: {x-a: v}, remove: [x-b]}, response: {add: {x-c: v}}}
    retries: {attempts: 2, retryOn: "5xx,503"}
    corsPolicy: {allowOrigins: [{exact: "https://a.example"}], allowMethods: [GET], allowHeaders: [x-h], exposeHeaders: [x-e], maxAge: 10s}
    route: [{destination: {host: web.vm.internal}}]
  - name: red
    redirect: {uri: /r, authority: r.example, scheme: https}
  - name: dr
    directResponse: {status: 200, body: {string: ok}}
`

// TestValidatedRulesPassEnvoyValidation uses go-control-plane's ValidateAll
// as the oracle of what Envoy and grpc-go accept: every string field set
// in the traffic fixture, in turn, takes each of badStrings; when the
// config validation accepts the object, its translation must pass
// ValidateAll and leave no host invalid. A rule the validation accepts
// but the proxy refuses would otherwise be caught only at translation,
// where its host falls back (docs/architecture.md §3.6).
func TestValidatedRulesPassEnvoyValidation(t *testing.T) {
	t.Parallel()
	accepted, tried := 0, 0
	for _, set := range []string{testfixture.TrafficConfig, oracleExtra} {
		objs, rej := istioconfig.ParseObjects("fixture.yaml", []byte(set))
		if len(rej) != 0 {
			t.Fatalf("fixture rejected: %v", rej)
		}
		base := NewTranslator()
		snap := model.NewSnapshot(1, testfixture.TrafficServices())
		snap.Config = model.NewConfigSnapshot(1, objs)
		base.Translate(snap)
		assertValid(t, base)
		if in := base.Invalid(); len(in) != 0 {
			t.Fatalf("unmutated: Invalid() = %v, want none", in)
		}
		for _, o := range objs {
			a, n := mutateAndCheck(t, objs, o)
			accepted, tried = accepted+a, tried+n
		}
	}
	t.Logf("%d mutations, %d accepted by the validation", tried, accepted)
	if tried == 0 || accepted == 0 {
		t.Fatalf("%d mutations tried, %d accepted: the test checks nothing", tried, accepted)
	}
}

// mutateAndCheck tries badStrings in every string field of o (among
// objs), checking each accepted mutation; it returns how many were
// accepted and tried.
func mutateAndCheck(t *testing.T, objs []*model.ConfigObject, o *model.ConfigObject) (accepted, tried int) {
	t.Helper()
	spec := o.Spec.(proto.Message)
	for _, path := range stringFields(spec.ProtoReflect(), "") {
		for _, bad := range badStrings {
			m := proto.Clone(spec)
			if !setString(m.ProtoReflect(), path, bad) {
				continue
			}
			tried++
			doc := mutatedDoc(t, o, m)
			got, rej := istioconfig.ParseObjects("mutated.yaml", doc)
			if len(rej) != 0 || len(got) != 1 {
				continue // refused by the config validation: fine
			}
			accepted++
			var others []*model.ConfigObject
			for _, x := range objs {
				if x != o {
					others = append(others, x)
				}
			}
			tr := NewTranslator()
			snap := model.NewSnapshot(1, testfixture.TrafficServices())
			snap.Config = model.NewConfigSnapshot(1, append(others, got[0]))
			tr.Translate(snap)
			for _, k := range Kinds {
				for n, r := range tr.Resources(k) {
					if err := validate(r); err != nil {
						t.Errorf("%s %s: %s = %q accepted by the validation, but %v %s fails ValidateAll: %v", o.Kind, o.Name, path, bad, k, n, err)
					}
				}
			}
			for _, in := range tr.Invalid() {
				{
					t.Errorf("%s %s: %s = %q accepted by the validation, but host %s is invalid at translation: %s", o.Kind, o.Name, path, bad, in.Host, in.Error)
				}
			}
		}
	}
	return accepted, tried
}

// mutatedDoc is the YAML (JSON) document of o with spec m.
func mutatedDoc(t *testing.T, o *model.ConfigObject, m proto.Message) []byte {
	t.Helper()
	spec, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := json.Marshal(map[string]any{"apiVersion": "networking.istio.io/v1", "kind": o.Kind,
		"metadata": map[string]string{"name": o.Name, "namespace": o.Namespace}, "spec": json.RawMessage(spec)})
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// stringFields lists the paths of the set string fields (singular, list
// elements, map values) under m: "a.b[2].c", "a.m{key}".
func stringFields(m protoreflect.Message, prefix string) []string {
	var out []string
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := prefix + string(fd.Name())
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				ep := fmt.Sprintf("%s[%d]", p, i)
				switch fd.Kind() {
				case protoreflect.StringKind:
					out = append(out, ep)
				case protoreflect.MessageKind:
					out = append(out, stringFields(l.Get(i).Message(), ep+".")...)
				}
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				ep := fmt.Sprintf("%s{%s}", p, k.String())
				switch fd.MapValue().Kind() {
				case protoreflect.StringKind:
					out = append(out, ep)
				case protoreflect.MessageKind:
					out = append(out, stringFields(mv.Message(), ep+".")...)
				}
				return true
			})
		case fd.Kind() == protoreflect.StringKind:
			out = append(out, p)
		case fd.Kind() == protoreflect.MessageKind:
			out = append(out, stringFields(v.Message(), p+".")...)
		}
		return true
	})
	return out
}

// setString sets the string at path (as stringFields names it) in m.
func setString(m protoreflect.Message, path, val string) bool {
	var cur protoreflect.Message = m
	var ok = false
	for path != "" {
		seg := path
		rest := ""
		if i := strings.IndexAny(path, ".[{"); i >= 0 {
			seg, rest = path[:i], path[i:]
		}
		fd := cur.Descriptor().Fields().ByName(protoreflect.Name(seg))
		if fd == nil {
			return false
		}
		switch {
		case strings.HasPrefix(rest, "["):
			end := strings.Index(rest, "]")
			var i int
			fmt.Sscanf(rest[1:end], "%d", &i)
			l := cur.Mutable(fd).List()
			rest = rest[end+1:]
			if rest == "" {
				l.Set(i, protoreflect.ValueOfString(val))
				return true
			}
			cur, path = l.Get(i).Message(), strings.TrimPrefix(rest, ".")
		case strings.HasPrefix(rest, "{"):
			end := strings.Index(rest, "}")
			key := protoreflect.ValueOfString(rest[1:end]).MapKey()
			mp := cur.Mutable(fd).Map()
			rest = rest[end+1:]
			if rest == "" {
				mp.Set(key, protoreflect.ValueOfString(val))
				return true
			}
			cur, path = mp.Get(key).Message(), strings.TrimPrefix(rest, ".")
		case rest == "":
			cur.Set(fd, protoreflect.ValueOfString(val))
			return true
		default:
			cur, path = cur.Mutable(fd).Message(), strings.TrimPrefix(rest, ".")
		}
	}
	return ok
}

// rawConfigSnap is configSnap without the config validation: decoded
// objects only, for tests of what translation does with a rule a gap in
// the validation would let through.
func rawConfigSnap(t *testing.T, version uint64, yaml string) *model.ConfigSnapshot {
	t.Helper()
	docs, err := istioconfig.DecodeDocuments("test.yaml", []byte(yaml), map[string]istioconfig.Kind{ // no Validate: raw
		"VirtualService":  {New: func() proto.Message { return &networking.VirtualService{} }},
		"DestinationRule": {New: func() proto.Message { return &networking.DestinationRule{} }},
	})
	if err != nil {
		t.Fatal(err)
	}
	var objs []*model.ConfigObject
	for _, d := range docs {
		if d.Err != nil {
			t.Fatalf("%s: %v", d.Source, d.Err)
		}
		objs = append(objs, &model.ConfigObject{Kind: d.Kind, Namespace: d.Namespace, Name: d.Name, Source: d.Source, Hash: d.Hash, Spec: d.Spec})
	}
	return model.NewConfigSnapshot(version, objs)
}
