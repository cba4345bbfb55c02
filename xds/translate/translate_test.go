package translate

import (
	"bytes"
	"encoding/json"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/internal/testfixture"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func ordersSvc() *model.Service { return testfixture.Orders() }

func fixture() []*model.Service { return testfixture.Services() }

// dumpClass renders every resource a class is served, by type URL and name.
func dumpClass(t *testing.T, tr *Translator, c Class) []byte {
	t.Helper()
	out := map[string][]json.RawMessage{}
	for _, url := range TypeURLs {
		rs := tr.Resources(KindOf(c, url))
		for _, n := range resourceNames(rs) {
			b, err := protojson.Marshal(rs[n])
			if err != nil {
				t.Fatalf("marshal %s: %v", n, err)
			}
			out[url] = append(out[url], b)
		}
	}
	return indentedJSON(t, out)
}

// indentedJSON is v as two-space indented JSON, ending in a newline.
func indentedJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		t.Fatal(err)
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}

func assertValid(t *testing.T, tr *Translator) {
	t.Helper()
	for _, k := range Kinds {
		for n, r := range tr.Resources(k) {
			if err := validate(r); err != nil {
				t.Errorf("%v %s: ValidateAll: %v", k, n, err)
			}
		}
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./xds -run Golden -update)", err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("%s differs (-want +got; -update rewrites):\n%s", path, d)
	}
}

func TestTranslateGolden(t *testing.T) {
	t.Parallel()
	tr := NewTranslator()
	tr.Translate(model.NewSnapshot(1, fixture()))
	assertValid(t, tr)
	if in := tr.Invalid(); len(in) != 0 {
		t.Errorf("Invalid() = %v, want none", in)
	}
	for _, tc := range []struct {
		class  Class
		golden string
	}{
		{class: ClassEnvoy, golden: "envoy.golden"},
		{class: ClassGRPC, golden: "grpc.golden"},
	} {
		t.Run(string(tc.class), func(t *testing.T) {
			golden(t, tc.golden, dumpClass(t, tr, tc.class))
		})
	}
	wantSkipped := []Skipped{{Host: "db.vm.internal", Port: 5432, Reason: "TCP port 5432 is taken by cache.vm.internal"}}
	if d := cmp.Diff(wantSkipped, tr.Skipped()); d != "" {
		t.Errorf("Skipped() (-want +got):\n%s", d)
	}
}

// changed flattens Changes into "kind name" lines, sorted.
func changed(ch Changes) []string {
	var out []string
	for k := range ch {
		up, rm := ch.Names(k)
		for _, n := range up {
			out = append(out, string(k.Class)+" "+shortType(k.TypeURL)+" +"+n)
		}
		for _, n := range rm {
			out = append(out, string(k.Class)+" "+shortType(k.TypeURL)+" -"+n)
		}
	}
	slices.Sort(out)
	return out
}

func snapshotOf(tr *Translator) map[Kind]map[string]types.Resource {
	m := map[Kind]map[string]types.Resource{}
	for _, k := range Kinds {
		m[k] = map[string]types.Resource{}
		for n, r := range tr.Resources(k) {
			m[k][n] = r
		}
	}
	return m
}

func TestTranslateIncremental(t *testing.T) {
	t.Parallel()
	const orders = "outbound|8080||orders.vm.internal"
	for _, tc := range []struct {
		name string
		// next builds the second snapshot from the first one's services.
		next func(svcs []*model.Service) []*model.Service
		want []string
		// rebuilt lists the resources allowed to be new objects.
		rebuilt []string
	}{
		{
			name: "same snapshot again",
			next: func(s []*model.Service) []*model.Service { return s },
		},
		{
			name: "equal copy of a service rebuilds nothing visible",
			next: func(s []*model.Service) []*model.Service {
				return testfixture.Replace(s, "orders.vm.internal", ordersSvc())
			},
		},
		{
			name: "one endpoint of orders changes",
			next: func(s []*model.Service) []*model.Service {
				o := ordersSvc()
				o.Endpoints[1].Health = model.Healthy
				return testfixture.Replace(s, "orders.vm.internal", o)
			},
			want:    append([]string{" EDS +" + orders}, seChange("+", "orders.vm.internal")...),
			rebuilt: []string{orders, "meshfed/orders.vm.internal"},
		},
		{
			name: "orders removed",
			next: func(s []*model.Service) []*model.Service { return testfixture.Replace(s, "orders.vm.internal", nil) },
			want: append([]string{
				" EDS -" + orders,
			}, append(seChange("-", "orders.vm.internal"),
				"envoy CDS -"+orders,
				"envoy RDS +8080",
				"grpc CDS -"+orders,
				"grpc LDS -orders.vm.internal",
				"grpc LDS -orders.vm.internal:8080",
				"grpc RDS -orders.vm.internal:8080",
			)...),
			rebuilt: []string{"8080"},
		},
		{
			name: "TCP owner of a port removed: the skipped service takes over",
			next: func(s []*model.Service) []*model.Service { return testfixture.Replace(s, "cache.vm.internal", nil) },
			want: append(append([]string{" EDS -outbound|5432||cache.vm.internal"}, seChange("-", "cache.vm.internal")...),
				"envoy CDS -outbound|5432||cache.vm.internal",
				"envoy LDS +0.0.0.0_5432",
			),
			rebuilt: []string{"0.0.0.0_5432"},
		},
		{
			name: "new service on a new HTTP port",
			next: func(s []*model.Service) []*model.Service {
				return append(slices.Clone(s), &model.Service{Hostname: "new.vm.internal",
					Ports: []model.Port{{Name: "http", Number: 7000, Protocol: model.ProtocolHTTP}}})
			},
			want: append(append([]string{" EDS +outbound|7000||new.vm.internal"}, seChange("+", "new.vm.internal")...),
				"envoy CDS +outbound|7000||new.vm.internal",
				"envoy LDS +0.0.0.0_7000",
				"envoy RDS +7000",
				"grpc CDS +outbound|7000||new.vm.internal",
				"grpc LDS +new.vm.internal",
				"grpc LDS +new.vm.internal:7000",
				"grpc RDS +new.vm.internal:7000",
			),
			rebuilt: []string{"outbound|7000||new.vm.internal", "0.0.0.0_7000", "7000", "new.vm.internal", "new.vm.internal:7000", "meshfed/new.vm.internal"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			first := fixture()
			tr := NewTranslator()
			tr.EnableMCP() // as with istiod connected: ServiceEntries follow too
			tr.Translate(model.NewSnapshot(1, slices.Clone(first)))
			before := snapshotOf(tr)

			got := changed(tr.Translate(model.NewSnapshot(2, tc.next(first))))
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("changes (-want +got):\n%s", d)
			}
			assertValid(t, tr)
			// Every resource still served that is not in rebuilt is the very
			// same object as before.
			for _, k := range Kinds {
				for n, r := range tr.Resources(k) {
					if slices.Contains(tc.rebuilt, n) {
						continue
					}
					if prev, ok := before[k][n]; !ok || prev != r {
						t.Errorf("%v %s: a new object, want the previous one reused", k, n)
					}
				}
			}
		})
	}
}

func TestTranslateInvalidServiceIsLeftOut(t *testing.T) {
	t.Parallel()
	tr := NewTranslator()
	tr.EnableMCP()
	bad := &model.Service{Hostname: "bad host", Ports: []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}},
		Endpoints: []model.Endpoint{{Address: ""}}}
	tr.Translate(model.NewSnapshot(1, []*model.Service{bad}))
	if in := tr.Invalid(); len(in) != 1 || in[0].Host != "bad host" {
		t.Fatalf("Invalid() = %v, want bad host", in)
	}
	for _, k := range Kinds {
		if n := len(tr.Resources(k)); n != 0 {
			t.Errorf("%v: %d resources, want none for an invalid service", k, n)
		}
	}
}

// resourceNames is the sorted key set of a collection.
func resourceNames(m map[string]types.Resource) []string { return slices.Sorted(maps.Keys(m)) }
