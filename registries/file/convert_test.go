package file

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/registrytest"
)

var vms = registries.Common{Name: "vms", Kind: "file", Domain: "vm.internal"}

func parseFile(t *testing.T, path string) ([]model.Service, error) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return Parse(filepath.Base(path), data, vms)
}

func TestParseGood(t *testing.T) {
	t.Parallel()
	src := model.Source{Registry: "vms", Cluster: "vms"}
	want := []model.Service{
		{
			Hostname: "orders.vm.internal",
			Ports: []model.Port{
				{Name: "grpc", Number: 8080, Protocol: model.ProtocolGRPC},
				{Name: "metrics", Number: 9090, Protocol: model.ProtocolHTTP},
			},
			Endpoints: []model.Endpoint{
				{
					Address: "10.0.0.5", Ports: map[string]uint32{"grpc": 18080}, Labels: map[string]string{"version": "v1"},
					Locality: model.Locality{Region: "us-east", Zone: "us-east-1a"}, Weight: 3, Health: model.Healthy,
					Source: src, Origin: "good.yaml:8",
				},
				{Address: "10.0.0.6", Labels: map[string]string{"version": "v1"}, Weight: 1, Health: model.Draining, Source: src, Origin: "good.yaml:14"},
				{Address: "not-an-ip.example", Weight: 1, Source: src, Origin: "good.yaml:17"},
			},
		},
		{
			Hostname:   "legacy-db.vm.internal",
			Ports:      []model.Port{{Name: "tcp", Number: 5432, Protocol: model.ProtocolTCP}},
			Resolution: model.ResolutionDNS,
			Endpoints: []model.Endpoint{
				{Address: "db.example.net", Locality: model.Locality{Region: "eu-west"}, Weight: 1, Source: src, Origin: "good.yaml:25"},
			},
		},
		{Hostname: "empty.vm.internal", Ports: []model.Port{{Name: "http", Number: 80, Protocol: model.ProtocolHTTP}}},
	}
	got, err := parseFile(t, "testdata/good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	registrytest.AssertServices(t, got, want)
	for _, s := range got {
		if s.Endpoints == nil {
			t.Errorf("%s: nil endpoints; want an empty slice", s.Hostname)
		}
	}
}

func TestParseEmptyList(t *testing.T) {
	t.Parallel()
	got, err := parseFile(t, "testdata/empty.yaml")
	if err != nil || got == nil || len(got) != 0 {
		t.Errorf("Parse(services: []) = %#v, %v; want an empty, non-nil slice", got, err)
	}
}

func TestParseBad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file string
		want []string // one line per error, in file order
	}{
		{file: "unknown_key.yaml", want: []string{
			`unknown_key.yaml:7:9: services[0].endpoints[0].helth: unknown key (did you mean "health"?)`,
		}},
		{file: "bad_health.yaml", want: []string{
			`bad_health.yaml:12:17: services[0].endpoints[1].health: unknown health "SICK" (want HEALTHY, UNHEALTHY, DRAINING or DEGRADED)`,
		}},
		{file: "syntax.yaml", want: []string{
			`syntax.yaml:3:4: YAML syntax error: while parsing a block collection: did not find expected '-' indicator`,
		}},
		{file: "no_services.yaml", want: []string{
			"no_services.yaml: services: is required (write `services: []` for none)",
		}},
		{file: "bad_names.yaml", want: []string{
			`bad_names.yaml:2:11: services[0].name: "Orders_V1" is not a DNS label (lowercase letters, digits and '-', at most 63)`,
			`bad_names.yaml:8:11: services[2].name: service "web" is already declared at line 5`,
			`bad_names.yaml:11:5: services[3].name: is required`,
		}},
		{file: "bad_ports.yaml", want: []string{
			`bad_ports.yaml:4:28: services[0].ports[0].port: 0 is not a port number (1-65535)`,
			`bad_ports.yaml:5:9: services[0].ports[1].protocol: is required (HTTP, HTTP2, GRPC or TCP)`,
			`bad_ports.yaml:6:16: services[0].ports[2].name: port name "http" is declared twice`,
			`bad_ports.yaml:6:44: services[0].ports[2].protocol: unknown protocol "SOAP" (want HTTP, HTTP2, GRPC or TCP)`,
			`bad_ports.yaml:7:29: services[0].ports[3].port: port 8081 is declared twice`,
			`bad_ports.yaml:8:9: services[0].ports[4].port: is required`,
			`bad_ports.yaml:9:5: services[1].ports: at least one port is required`,
		}},
		{file: "port_type.yaml", want: []string{
			`port_type.yaml:5:15: services[0].ports[0].port: want an integer, got "eighty"`,
		}},
		{file: "bad_endpoints.yaml", want: []string{
			`bad_endpoints.yaml:3:17: services[0].resolution: unknown resolution "STATIC" (want EDS or DNS)`,
			`bad_endpoints.yaml:8:23: services[0].endpoints[0].ports.grpc: 70000 is not a port number (1-65535)`,
			`bad_endpoints.yaml:8:36: services[0].endpoints[0].ports.http: "http" is not a port of this service`,
			`bad_endpoints.yaml:9:17: services[0].endpoints[0].weight: 0 is out of range (1-4294967295; omit for the default 1)`,
			`bad_endpoints.yaml:10:9: services[0].endpoints[1].address: is required`,
			`bad_endpoints.yaml:10:19: services[0].endpoints[1].locality: locality "a/b/c/d" has more than 3 parts (want region/zone/subzone)`,
		}},
		{file: "two_documents.yaml", want: []string{
			`two_documents.yaml:3:1: the file holds more than one YAML document; want one`,
		}},
		{file: "duplicate_key.yaml", want: []string{
			`duplicate_key.yaml:3:5: services[0].name: mapping key "name" already defined at line 2`,
		}},
		{file: "services_not_list.yaml", want: []string{
			`services_not_list.yaml:2:3: services: want a list, got a mapping`,
		}},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		seen[tt.file] = true
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			got, err := parseFile(t, filepath.Join("testdata/bad", tt.file))
			if got != nil {
				t.Errorf("Parse returned services along with an error: %v", got)
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Parse error = %v (%T), want Errors", err, err)
			}
			if g, w := err.Error(), strings.Join(tt.want, "\n"); g != w {
				t.Errorf("errors:\n%s\nwant:\n%s", g, w)
			}
		})
	}
	files, _ := filepath.Glob("testdata/bad/*.yaml")
	for _, f := range files {
		if !seen[filepath.Base(f)] {
			t.Errorf("%s has no entry in the table", f)
		}
	}
}

func TestParseLimitsErrors(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("services:\n")
	for range 30 {
		b.WriteString("  - {name: BAD, ports: [{name: p, port: 1, protocol: TCP}]}\n")
	}
	_, err := Parse("many.yaml", []byte(b.String()), vms)
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != maxErrors+1 || errs[maxErrors].Msg != "and 10 more errors" {
		t.Errorf("got %d errors, last %v; want %d and a summary", len(errs), errs[len(errs)-1], maxErrors)
	}
}

func TestParseKeysWithDots(t *testing.T) {
	t.Parallel()
	src := "services:\n  - name: a\n    ports: [{name: p, port: 1, protocol: TCP}]\n    endpoints:\n      - address: 1.2.3.4\n        ports:\n          p.q: 80\n"
	_, err := Parse("s.yaml", []byte(src), vms)
	want := `s.yaml:7:16: services[0].endpoints[0].ports["p.q"]: "p.q" is not a port of this service`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %s", err, want)
	}
}

// The shipped example must stay valid.
func TestExampleServicesFile(t *testing.T) {
	t.Parallel()
	got, err := parseFile(t, "../../examples/services.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 3 {
		t.Errorf("example has %d services, want at least 3", len(got))
	}
	for _, err := range registrytest.CheckServices(vms.Shard(), got) {
		t.Error(err)
	}
}
