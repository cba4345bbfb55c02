package config

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/registries/eureka"
	"github.com/meshfed/meshfed/registries/zookeeper"
)

// TestYAML12FlowStyle loads the flow-style form the architecture document
// uses: plain scalars with ':' inside flow collections are strings in YAML
// 1.2 (observation 8 of issue 10).
func TestYAML12FlowStyle(t *testing.T) {
	t.Parallel()
	src := `registries:
  - name: legacy
    kind: eureka
    domain: eureka
    eureka: {urls: [http://127.0.0.1:8761/eureka], pollInterval: 30s}
  - name: dubbo
    kind: zookeeper
    domain: zk
    zookeeper: {servers: [127.0.0.1:2181], layout: curator, root: /services}
`
	cfg, err := Parse("c.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Registries[0].Block.(*eureka.Config).URLs; len(got) != 1 || got[0] != "http://127.0.0.1:8761/eureka" {
		t.Errorf("eureka urls = %q", got)
	}
	if got := cfg.Registries[1].Block.(*zookeeper.Config).Servers; len(got) != 1 || got[0] != "127.0.0.1:2181" {
		t.Errorf("zookeeper servers = %q", got)
	}
}

func TestByteOrderMark(t *testing.T) {
	t.Parallel()
	src := "\ufeffregistries:\n  - {name: vms, kind: file, domain: vm.internal, file: {path: s.yaml}}\n"
	if _, err := Parse("c.yaml", []byte(src)); err != nil {
		t.Fatalf("a BOM must be accepted: %v", err)
	}
}

func TestDomainsMustBeASCII(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ domain, want string }{
		{domain: "VM.İnternal", want: `c.yaml:2:59: registries[0].domain: bad domain "vm.İnternal": domains must be ASCII; write the IDNA form "vm.xn--internal-o0e"`},
		{domain: "bücher.example", want: `write the IDNA form "xn--bcher-kva.example"`},
		{domain: "xn--bcher-kva.example"}, // punycode is ASCII: accepted
	} {
		src := fmt.Sprintf("registries:\n  - {name: vms, kind: file, file: {path: s.yaml}, domain: %s}\n", tc.domain)
		_, err := Parse("c.yaml", []byte(src))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.domain, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want %q", tc.domain, err, tc.want)
		}
	}
}

func TestListenersCollide(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"127.0.0.1:026110", "127.0.0.1:26110", true},
		{"0.0.0.0:15010", "127.0.0.1:15010", true},
		{"[::]:15010", "127.0.0.1:15010", true},
		{"[::1]:15010", "[0:0:0:0:0:0:0:1]:15010", true},
		{"[::ffff:127.0.0.1]:15010", "127.0.0.1:15010", true},
		{"localhost:15010", "127.0.0.1:15010", true},
		{"Meshfed.internal:15010", "meshfed.internal.:15010", true},
		{"127.0.0.1:15010", "127.0.0.1:15014", false},
		{"127.0.0.1:15010", "127.0.0.2:15010", false},
		{"127.0.0.1:15010", "[::1]:15010", false},
		{"a.internal:15010", "b.internal:15010", false},
	} {
		if got := listenersCollide(tc.a, tc.b); got != tc.want {
			t.Errorf("listenersCollide(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
	src := "xds: {address: \"127.0.0.1:026110\"}\nadmin: {address: \"0.0.0.0:26110\"}\nregistries:\n  - {name: vms, kind: file, domain: vm.internal, file: {path: s.yaml}}\n"
	_, err := Parse("c.yaml", []byte(src))
	want := "c.yaml:2:18: admin.address: xds (127.0.0.1:026110) and admin (0.0.0.0:26110) listen on the same port (also xds.address, line 1)"
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %s", err, want)
	}
}

// bigConfig returns a flow-style clusters.yaml with n registries of three
// kinds (5,000 make about 550 KB).
func bigConfig(n int) []byte {
	var b strings.Builder
	b.WriteString("xds: {address: 127.0.0.1:15010}\nadmin: {address: 127.0.0.1:15014}\nregistries:\n")
	for i := range n {
		switch i % 3 {
		case 0:
			fmt.Fprintf(&b, "  - {name: r%d, kind: file, domain: d%d.internal, outage: {policy: keep, expireAfter: 10m}, file: {path: s%d.yaml}}\n", i, i, i)
		case 1:
			fmt.Fprintf(&b, "  - {name: r%d, kind: eureka, domain: e%d.eureka, eureka: {urls: [http://127.0.0.1:8761/eureka], pollInterval: 30s}}\n", i, i)
		default:
			fmt.Fprintf(&b, "  - {name: r%d, kind: consul, domain: c%d.consul, consul: {address: 127.0.0.1:8500, datacenter: dc1}}\n", i, i)
		}
	}
	return []byte(b.String())
}

// TestLargeFlowStyleConfig loads 5,000 flow-style registries (before the
// YAML 1.2 loader: 15 s and 1.7 GB; see BenchmarkParse5000 for the time).
func TestLargeFlowStyleConfig(t *testing.T) {
	t.Parallel()
	cfg, err := Parse("big.yaml", bigConfig(5000))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Registries) != 5000 {
		t.Errorf("%d registries", len(cfg.Registries))
	}
}

// BenchmarkParse shows validation time growing linearly with file size.
func BenchmarkParse(b *testing.B) {
	for _, n := range []int{500, 5000} {
		data := bigConfig(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := Parse("big.yaml", data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
