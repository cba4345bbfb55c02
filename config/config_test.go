package config

import (
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/file"
	"github.com/meshfed/meshfed/registries/filewatch"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type badCase struct {
	file string
	// want holds substrings of LoadError.Error(), one per problem line.
	want []string
	// problems is how many problems are reported.
	problems int
}

// TestLoadBad loads every file under testdata/bad and checks each expected
// problem (file:line:col: key: message) and the number of problems.
func TestLoadBad(t *testing.T) {
	t.Parallel()
	tests := []badCase{
		{file: "bad/unknown-key-top.yaml", problems: 1, want: []string{
			`bad/unknown-key-top.yaml:3:1: xsd: unknown key (did you mean "xds"?)`,
		}},
		{file: "bad/unknown-key-block.yaml", problems: 1, want: []string{
			`bad/unknown-key-block.yaml:7:7: registries[0].file.fiel: unknown key`,
		}},
		{file: "bad/unknown-key-registry.yaml", problems: 3, want: []string{
			`bad/unknown-key-registry.yaml:3:3: debounce.maximum: unknown key`,
			`bad/unknown-key-registry.yaml:5:5: registries[0].domain: missing required key`,
			`bad/unknown-key-registry.yaml:7:5: registries[0].domian: unknown key (did you mean "domain"?)`,
		}},
		{file: "bad/missing-keys.yaml", problems: 4, want: []string{
			`bad/missing-keys.yaml:2:5: registries[0].name: missing required key`,
			`bad/missing-keys.yaml:5:5: registries[1].kind: missing required key`,
			`bad/missing-keys.yaml:8:5: registries[2].domain: missing required key`,
			`bad/missing-keys.yaml:13:5: registries[3].domain: missing value`,
		}},
		{file: "bad/missing-registries.yaml", problems: 1, want: []string{
			`bad/missing-registries.yaml:2:1: registries: missing required key`,
		}},
		{file: "bad/no-registries.yaml", problems: 1, want: []string{
			`bad/no-registries.yaml:3:1: registries: want at least one registry`,
		}},
		{file: "bad/empty.yaml", problems: 1, want: []string{
			`bad/empty.yaml: the file is empty`,
		}},
		{file: "bad/not-a-mapping.yaml", problems: 3, want: []string{
			`bad/not-a-mapping.yaml:1:6: xds: want a mapping, got "127.0.0.1:15010"`,
			`bad/not-a-mapping.yaml:2:11: debounce: want a mapping, got a list`,
			`bad/not-a-mapping.yaml:4:5: registries[0]: want a mapping, got "vms"`,
		}},
		{file: "bad/duplicate-names.yaml", problems: 1, want: []string{
			`bad/duplicate-names.yaml:10:11: registries[2].name: duplicate name "vms" (also registries[0].name, line 2)`,
		}},
		{file: "bad/duplicate-key.yaml", problems: 1, want: []string{
			`bad/duplicate-key.yaml:5:5: `, `mapping key "kind" already defined`,
		}},
		{file: "bad/overlap-equal.yaml", problems: 1, want: []string{
			`bad/overlap-equal.yaml:8:13: registries[1].domain: domain "vm.internal" of registry "b" overlaps domain "vm.internal" of registry "a": domains must not be equal or nested, except kubernetes registries sharing one (also registries[0].domain, line 4)`,
		}},
		{file: "bad/overlap-suffix.yaml", problems: 1, want: []string{
			`bad/overlap-suffix.yaml:8:13: registries[1].domain: domain "vm.internal" of registry "b" overlaps domain "east.vm.internal" of registry "a": domains must not be equal or nested, except kubernetes registries sharing one (also registries[0].domain, line 4)`,
		}},
		{file: "bad/bad-duration.yaml", problems: 4, want: []string{
			`bad/bad-duration.yaml:2:10: debounce.quiet: bad duration "20": want a number with a unit`,
			`bad/bad-duration.yaml:3:8: debounce.max: bad duration "-1s": must be positive`,
			`bad/bad-duration.yaml:4:14: syncTimeout: bad duration "soon"`,
			`bad/bad-duration.yaml:10:20: registries[0].outage.expireAfter: bad duration "0s": must be positive`,
		}},
		{file: "bad/debounce-order.yaml", problems: 1, want: []string{
			`bad/debounce-order.yaml:2:10: debounce.quiet: debounce.max (100ms) must not be less than debounce.quiet (1s)`,
		}},
		{file: "bad/bad-address.yaml", problems: 2, want: []string{
			`bad/bad-address.yaml:2:12: xds.address: bad address "127.0.0.1": want host:port`,
			`bad/bad-address.yaml:4:12: admin.address: bad address "localhost:70000": port "70000" is not in 1-65535`,
		}},
		{file: "bad/bad-address-host.yaml", problems: 2, want: []string{
			`bad/bad-address-host.yaml:2:12: xds.address: bad address ":15010": no host`,
			`bad/bad-address-host.yaml:4:12: admin.address: bad address "bad_host!:15014": host "bad_host!" is neither an IP address nor a hostname`,
		}},
		{file: "bad/bad-config-sources.yaml", problems: 3, want: []string{
			`bad/bad-config-sources.yaml:5:12: configSources[1].name: duplicate config source name "local"`,
			`bad/bad-config-sources.yaml:6:5: configSources[2].name: missing required key`,
			`bad/bad-config-sources.yaml:7:23: configSources[3].recursive: unknown key`,
		}},
		{file: "bad/bad-kube-config-sources.yaml", problems: 7, want: []string{
			`bad/bad-kube-config-sources.yaml:5:45: configSources[0].kubernetes.clusters[1]: "east" is listed twice`,
			`bad/bad-kube-config-sources.yaml:5:51: configSources[0].kubernetes.clusters[2]: no registry is named "nope": name a registry of kind kubernetes`,
			`bad/bad-kube-config-sources.yaml:5:57: configSources[0].kubernetes.clusters[3]: registry "vms" is of kind file: want one of kind kubernetes`,
			`bad/bad-kube-config-sources.yaml:5:82: configSources[0].kubernetes.namespaces[1]: bad name "Bad_NS"`,
			`bad/bad-kube-config-sources.yaml:6:29: configSources[1].kubernetes: dir and kubernetes exclude each other`,
			`bad/bad-kube-config-sources.yaml:7:5: configSources[2].dir: missing required key: a config source needs dir or kubernetes`,
			`bad/bad-kube-config-sources.yaml:8:27: configSources[3].kubernetes.clusters: missing required key`,
		}},
		{file: "bad/bad-serviceentry-kubernetes.yaml", problems: 4, want: []string{
			`bad/bad-serviceentry-kubernetes.yaml:4:102: registries[2].serviceentry.kubernetes.clusters[1]: no registry is named "nope": name a registry of kind kubernetes`,
			`bad/bad-serviceentry-kubernetes.yaml:4:108: registries[2].serviceentry.kubernetes.clusters[2]: registry "vms" is of kind file: want one of kind kubernetes`,
			`bad/bad-serviceentry-kubernetes.yaml:5:88: registries[3].serviceentry.kubernetes: path/paths and kubernetes are exclusive`,
			`bad/bad-serviceentry-kubernetes.yaml:6:87: registries[4].serviceentry.kubernetes.clusters: want at least one registry of kind kubernetes`,
		}},
		{file: "bad/same-address.yaml", problems: 1, want: []string{
			`bad/same-address.yaml:2:12: admin.address: xds (127.0.0.1:15010) and admin (127.0.0.1:15010) listen on the same port`,
		}},
		{file: "bad/tls-missing-key.yaml", problems: 1, want: []string{
			`bad/tls-missing-key.yaml:4:5: xds.tls.key: missing required key`,
		}},
		{file: "bad/bad-ratio.yaml", problems: 3, want: []string{
			`bad/bad-ratio.yaml:5:21: registries[0].maxDeleteRatio: want a number between 0 (off) and 1, got 1.5`,
			`bad/bad-ratio.yaml:10:21: registries[1].maxDeleteRatio: want a number, got "half"`,
			`bad/bad-ratio.yaml:15:21: registries[2].maxDeleteRatio: want a number between 0 (off) and 1, got -0.1`,
		}},
		{file: "bad/bad-limits.yaml", problems: 3, want: []string{
			`bad/bad-limits.yaml:3:18: xds.limits.maxTypeURLs: want a whole number of at least 1, got 0`,
			`bad/bad-limits.yaml:4:15: xds.limits.maxNames: want a whole number of at least 1, got "lots"`,
			`bad/bad-limits.yaml:5:5: xds.limits.maxname: unknown key (did you mean "maxNames"?)`,
		}},
		{file: "bad/bad-locality.yaml", problems: 1, want: []string{
			`bad/bad-locality.yaml:5:15: registries[0].locality: locality "us/east/1a/rack" has more than 3 parts`,
		}},
		{file: "bad/bad-outage-policy.yaml", problems: 1, want: []string{
			`bad/bad-outage-policy.yaml:6:15: registries[0].outage.policy: unknown outage policy "forget" (want keep or expire)`,
		}},
		{file: "bad/bad-name.yaml", problems: 2, want: []string{
			`bad/bad-name.yaml:2:11: registries[0].name: bad name "VMs": want a DNS label`,
			`bad/bad-name.yaml:6:11: registries[1].name: bad name "-edge": want a DNS label`,
		}},
		{file: "bad/bad-domain.yaml", problems: 2, want: []string{
			`bad/bad-domain.yaml:4:13: registries[0].domain: bad domain "vm_internal": want a DNS name`,
			`bad/bad-domain.yaml:8:13: registries[1].domain: bad domain "vm..internal": want a DNS name`,
		}},
		{file: "bad/wrong-block.yaml", problems: 4, want: []string{
			`bad/wrong-block.yaml:2:5: registries[0].file: missing required key: kind "file" needs a file: block`,
			`bad/wrong-block.yaml:5:5: registries[0].consul: a consul block does not belong in a registry of kind "file"`,
			`bad/wrong-block.yaml:10:5: registries[1].zookeeper: a zookeeper block does not belong in a registry of kind "file"`,
			`bad/wrong-block.yaml:11:5: registries[2].file: missing required key: kind "file" needs a file: block`,
		}},
		{file: "bad/block-invalid.yaml", problems: 2, want: []string{
			`bad/block-invalid.yaml:5:5: registries[0].file.path: is required`,
			`bad/block-invalid.yaml:10:13: registries[1].file.path: want a single value, got a list`,
		}},
		{file: "bad/unknown-kind.yaml", problems: 1, want: []string{
			`bad/unknown-kind.yaml:7:11: registries[1].kind: unknown kind "mesos" (supported by this build: ` + strings.Join(Kinds(), ", ") + `)`,
		}},
		{file: "bad/syntax-error.yaml", problems: 1, want: []string{
			`bad/syntax-error.yaml:6:9: YAML syntax error: while parsing a flow mapping: did not find expected ',' or '}'`,
		}},
		{file: "bad/collect-all.yaml", problems: 6, want: []string{
			`bad/collect-all.yaml:4:12: xds.address: bad address "127.0.0.1:99999": port "99999" is not in 1-65535`,
			`bad/collect-all.yaml:7:19: debounce.quiet: bad duration "fast"`,
			`bad/collect-all.yaml:12:26: registries[0].file.extra: unknown key`,
			`bad/collect-all.yaml:13:11: registries[1].name: duplicate name "a" (also registries[0].name, line 9)`,
			`bad/collect-all.yaml:15:13: registries[1].domain: domain "east.vm.internal" of registry "a" overlaps domain "vm.internal" of registry "a": domains must not be equal or nested, except kubernetes registries sharing one (also registries[0].domain, line 11)`,
			`bad/collect-all.yaml:16:22: registries[1].outage.policy: unknown outage policy "drop"`,
		}},
	}

	// Every bad file has expectations.
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		rel := strings.TrimPrefix(filepath.ToSlash(f), "testdata/")
		if !slices.ContainsFunc(tests, func(tc badCase) bool { return tc.file == rel }) {
			t.Errorf("%s has no entry in the expected-error table", rel)
		}
	}

	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			cfg, err := Load(filepath.Join("testdata", tc.file))
			if err == nil {
				t.Fatalf("Load succeeded, want errors %q; summary: %s", tc.want, cfg.Summary())
			}
			if cfg != nil {
				t.Errorf("Load returned a config along with an error")
			}
			var le *LoadError
			if !errors.As(err, &le) {
				t.Fatalf("error is %T, want *LoadError: %v", err, err)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q; got:\n%s", w, msg)
				}
			}
			if len(le.Problems) != tc.problems {
				t.Errorf("got %d problems, want %d:\n%s", len(le.Problems), tc.problems, msg)
			}
			for _, p := range le.Problems {
				if p.File != filepath.Join("testdata", tc.file) {
					t.Errorf("problem names file %q, want %q", p.File, filepath.Join("testdata", tc.file))
				}
				if p.Line == 0 && tc.file != "bad/empty.yaml" {
					t.Errorf("problem has no line: %s", p)
				}
			}
		})
	}
}

// TestLoadGood loads every file under testdata/good and checks the
// result, defaults included.
func TestLoadGood(t *testing.T) {
	t.Parallel()
	abs := func(t *testing.T, rel string) string {
		t.Helper()
		p, err := filepath.Abs(rel)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		file    string
		want    func(t *testing.T) *Config
		summary string
	}{
		{
			file: "good/minimal.yaml",
			want: func(t *testing.T) *Config {
				return &Config{
					XDS:         XDS{Address: "127.0.0.1:15010", Limits: XDSLimits{MaxTypeURLs: 64, MaxNames: 100000, MaxResponseBytes: 4 << 20}, RootNamespace: "istio-system"},
					Admin:       Admin{Address: "127.0.0.1:15014"},
					Debounce:    Debounce{Quiet: Duration(5 * time.Millisecond), Max: Duration(100 * time.Millisecond)},
					SyncTimeout: Duration(30 * time.Second),
					State:       State{MaxAge: Duration(24 * time.Hour)},
					Registries: []Registry{{
						Name:           "vms",
						Kind:           "file",
						Domain:         "vm.internal", // lowercased, trailing dot dropped
						Outage:         aggregate.Outage{Policy: aggregate.OutageKeep, ExpireAfter: 10 * time.Minute},
						MaxDeleteRatio: ptr(0.5),
						Block:          &file.Config{Options: filewatch.Options{Path: abs(t, "testdata/good/services.yaml"), Settle: registries.Duration(time.Second)}},
					}},
					Path: "testdata/good/minimal.yaml",
				}
			},
			summary: "testdata/good/minimal.yaml: 1 registry (vms: file vm.internal); xds 127.0.0.1:15010; admin 127.0.0.1:15014; debounce 5ms/100ms; syncTimeout 30s",
		},
		{
			file: "good/full.yaml",
			want: func(t *testing.T) *Config {
				return &Config{
					XDS: XDS{Address: "0.0.0.0:16010", TLS: &TLS{
						Cert:     abs(t, "testdata/good/tls/server.crt"),
						Key:      "/etc/meshfed/server.key",
						ClientCA: abs(t, "testdata/good/tls/ca.crt"),
					}, Limits: XDSLimits{MaxTypeURLs: 8, MaxNames: 5000, MaxResponseBytes: 4 << 20}, RootNamespace: "istio-system"},
					Admin:       Admin{Address: "localhost:16014"},
					Debounce:    Debounce{Quiet: Duration(50 * time.Millisecond), Max: Duration(2 * time.Second)},
					SyncTimeout: Duration(time.Minute),
					State:       State{Dir: abs(t, "testdata/good/state"), MaxAge: Duration(time.Hour)},
					Registries: []Registry{
						{
							Name:           "vms",
							Kind:           "file",
							Domain:         "vm.internal",
							Locality:       "us-east/us-east-1a/rack-1",
							Outage:         aggregate.Outage{Policy: aggregate.OutageExpire, ExpireAfter: 90 * time.Second},
							MaxDeleteRatio: ptr(0.25),
							Block:          &file.Config{Options: filewatch.Options{Path: "/srv/services.yaml", Settle: registries.Duration(time.Second)}},
						},
						{
							Name:           "vms-2",
							Kind:           "file",
							Domain:         "vm2.internal",
							Outage:         aggregate.Outage{Policy: aggregate.OutageKeep, ExpireAfter: 10 * time.Minute},
							MaxDeleteRatio: ptr(1.0),
							Block:          &file.Config{Options: filewatch.Options{Path: abs(t, "testdata/services.yaml"), Settle: registries.Duration(time.Second)}},
						},
					},
					Path: "testdata/good/full.yaml",
				}
			},
			summary: "testdata/good/full.yaml: 2 registries (vms: file vm.internal, vms-2: file vm2.internal); xds 0.0.0.0:16010 (mTLS); admin localhost:16014; debounce 50ms/2s; syncTimeout 1m0s; state " + abs(t, "testdata/good/state") + " (maxAge 1h0m0s)",
		},
	}
	files, err := filepath.Glob("testdata/good/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(tests) {
		t.Errorf("testdata/good has %d files, the table %d", len(files), len(tests))
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join("testdata", tc.file)
			got, err := Load(path)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if diff := cmp.Diff(tc.want(t), got, cmpopts.IgnoreUnexported(Config{})); diff != "" {
				t.Errorf("Load mismatch (-want +got):\n%s", diff)
			}
			if s := got.Summary(); s != tc.summary {
				t.Errorf("Summary() = %q, want %q", s, tc.summary)
			}
			c := got.Registries[0].Common()
			if c.Name != got.Registries[0].Name || c.Domain != got.Registries[0].Domain || c.Kind != "file" {
				t.Errorf("Common() = %+v, does not match the entry", c)
			}
		})
	}
}

// TestDefaultClustersYAML loads the repository's default config.
func TestDefaultClustersYAML(t *testing.T) {
	t.Parallel()
	cfg, err := Load("../clusters.yaml")
	if err != nil {
		t.Fatalf("Load(../clusters.yaml): %v", err)
	}
	if cfg.XDS.Address != "127.0.0.1:15010" || cfg.Admin.Address != "127.0.0.1:15014" || cfg.XDS.TLS != nil {
		t.Errorf("listeners: xds %s tls %v, admin %s", cfg.XDS.Address, cfg.XDS.TLS, cfg.Admin.Address)
	}
	if len(cfg.Registries) != 1 {
		t.Fatalf("got %d registries, want 1", len(cfg.Registries))
	}
	r := cfg.Registries[0]
	if r.Name != "vms" || r.Kind != "file" || r.Domain != "vm.internal" {
		t.Errorf("registry = %s/%s/%s, want vms/file/vm.internal", r.Name, r.Kind, r.Domain)
	}
	fc, ok := r.Block.(*file.Config)
	if !ok {
		t.Fatalf("block is %T, want *file.Config", r.Block)
	}
	want, err := filepath.Abs("../examples/services.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if fc.Path != want {
		t.Errorf("file path = %q, want %q", fc.Path, want)
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	_, err := Load("testdata/does-not-exist.yaml")
	if err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
	want := "testdata/does-not-exist.yaml: cannot read: no such file or directory"
	if err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
}

func TestParseResolvesAgainstConfigDir(t *testing.T) {
	t.Parallel()
	src := "registries:\n- {name: vms, kind: file, domain: vm.internal, file: {path: svc.yaml}}\n"
	cfg, err := Parse("/etc/meshfed/clusters.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Registries[0].Block.(*file.Config).Path; got != "/etc/meshfed/svc.yaml" {
		t.Errorf("path = %q, want /etc/meshfed/svc.yaml", got)
	}
}

func TestAnchorsAndAliases(t *testing.T) {
	t.Parallel()
	src := `
outage: &out {policy: expire, expireAfter: 1m}
registries:
  - {name: a, kind: file, domain: a.internal, outage: *out, file: {path: a.yaml}}
`
	_, err := Parse("c.yaml", []byte(src))
	want := `c.yaml:2:1: outage: unknown key`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error = %v, want %q (anchors outside the schema are still unknown keys)", err, want)
	}

	src = `
registries:
  - name: a
    kind: file
    domain: a.internal
    outage: &out {policy: expire, expireAfter: 1m}
    file: {path: a.yaml}
  - name: b
    kind: file
    domain: b.internal
    outage: *out
    file: {path: b.yaml}
`
	cfg, err := Parse("c.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want2 := aggregate.Outage{Policy: aggregate.OutageExpire, ExpireAfter: time.Minute}
	if got := cfg.Registries[1].Outage; got != want2 {
		t.Errorf("aliased outage = %+v, want %+v", got, want2)
	}
}

func TestDomainConflicts(t *testing.T) {
	t.Parallel()
	reg := func(name, kind, domain string) Registry { return Registry{Name: name, Kind: kind, Domain: domain} }
	tests := []struct {
		name string
		regs []Registry
		want [][2]int
	}{
		{name: "disjoint", regs: []Registry{reg("a", "file", "vm.internal"), reg("b", "consul", "consul")}},
		{name: "equal", regs: []Registry{reg("a", "file", "vm.internal"), reg("b", "file", "vm.internal")}, want: [][2]int{{0, 1}}},
		{name: "suffix at label boundary", regs: []Registry{reg("a", "file", "a.b"), reg("b", "consul", "b")}, want: [][2]int{{0, 1}}},
		{name: "suffix reversed", regs: []Registry{reg("a", "consul", "b"), reg("b", "file", "a.b")}, want: [][2]int{{0, 1}}},
		{name: "suffix not at label boundary", regs: []Registry{reg("a", "file", "vm.internal"), reg("b", "file", "m.internal")}},
		{name: "kubernetes same domain is a multicluster set", regs: []Registry{
			reg("east", "kubernetes", "svc.cluster.local"), reg("west", "kubernetes", "svc.cluster.local"),
		}},
		{name: "kubernetes nested domains", regs: []Registry{
			reg("east", "kubernetes", "svc.cluster.local"), reg("west", "kubernetes", "cluster.local"),
		}, want: [][2]int{{0, 1}}},
		{name: "kubernetes vs file on a parent domain", regs: []Registry{
			reg("east", "kubernetes", "svc.cluster.local"), reg("vms", "file", "cluster.local"),
		}, want: [][2]int{{0, 1}}},
		{name: "kubernetes vs file on the same domain", regs: []Registry{
			reg("east", "kubernetes", "svc.cluster.local"), reg("vms", "file", "svc.cluster.local"),
		}, want: [][2]int{{0, 1}}},
		{name: "empty domains are skipped", regs: []Registry{reg("a", "file", ""), reg("b", "file", "")}},
		{name: "every pair", regs: []Registry{
			reg("a", "file", "x"), reg("b", "file", "y.x"), reg("c", "file", "z.y.x"), reg("d", "file", "other"),
		}, want: [][2]int{{0, 1}, {0, 2}, {1, 2}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := domainConflicts(tc.regs)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("domainConflicts mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckAddress(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr    string
		wantErr string // "" for valid
	}{
		{addr: "127.0.0.1:15010"},
		{addr: "0.0.0.0:1"},
		{addr: "[::1]:65535"},
		{addr: "[::]:15010"},
		{addr: "localhost:8500"},
		{addr: "consul.service.dc1.example.com:8500"},
		{addr: "Consul.Example.com:8500"},
		{addr: "127.0.0.1", wantErr: "want host:port"},
		{addr: "127.0.0.1:0", wantErr: `port "0" is not in 1-65535`},
		{addr: "127.0.0.1:65536", wantErr: `port "65536" is not in 1-65535`},
		{addr: "127.0.0.1:+80", wantErr: `port "+80" is not in 1-65535`},
		{addr: "127.0.0.1:http", wantErr: `port "http" is not in 1-65535`},
		{addr: ":15010", wantErr: "no host"},
		{addr: "::1:15010", wantErr: "want host:port"},
		{addr: "under_score:80", wantErr: "neither an IP address nor a hostname"},
		{addr: "-bad.example:80", wantErr: "neither an IP address nor a hostname"},
	}
	for _, tc := range tests {
		t.Run(tc.addr, func(t *testing.T) {
			t.Parallel()
			err := checkAddress(tc.addr)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("checkAddress(%q) = %v, want nil", tc.addr, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("checkAddress(%q) = %v, want an error containing %q", tc.addr, err, tc.wantErr)
			}
		})
	}
}

func TestProblemString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p    Problem
		want string
	}{
		{p: Problem{File: "c.yaml", Line: 12, Column: 5, Key: "registries[1].consul.address", Msg: "bad"}, want: "c.yaml:12:5: registries[1].consul.address: bad"},
		{p: Problem{File: "c.yaml", Line: 3, Msg: "YAML syntax error: x"}, want: "c.yaml:3: YAML syntax error: x"},
		{p: Problem{File: "c.yaml", Msg: "cannot read: gone"}, want: "c.yaml: cannot read: gone"},
	}
	for _, tc := range tests {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
	le := &LoadError{Problems: []Problem{tests[0].p, tests[1].p}}
	if got, want := le.Error(), tests[0].want+"\n"+tests[1].want; got != want {
		t.Errorf("LoadError.Error() = %q, want %q", got, want)
	}
}

func TestDurationText(t *testing.T) {
	t.Parallel()
	var d Duration
	if err := d.UnmarshalText([]byte("1m30s")); err != nil || d.Std() != 90*time.Second {
		t.Errorf("UnmarshalText(1m30s) = %v, %v", d, err)
	}
	if b, _ := d.MarshalText(); string(b) != "1m30s" {
		t.Errorf("MarshalText = %q, want 1m30s", b)
	}
	for _, bad := range []string{"", "10", "-1s", "0s", "soon"} {
		if err := d.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("UnmarshalText(%q) succeeded", bad)
		}
	}
}

func TestKindsTable(t *testing.T) {
	t.Parallel()
	if !slices.IsSorted(Kinds()) || !slices.Contains(Kinds(), "file") {
		t.Errorf("Kinds() = %v, want sorted and holding file", Kinds())
	}
	for _, name := range Kinds() {
		k, _ := registries.LookupKind(name)
		if k.NewConfig() == nil {
			t.Errorf("kind %q: NewConfig returned nil", name)
		}
		if k.Multicluster != (name == "kubernetes") {
			t.Errorf("kind %q: Multicluster = %v; only kubernetes merges same-domain services", name, k.Multicluster)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestLoadConfigSources(t *testing.T) {
	t.Parallel()
	cfg, err := Load("testdata/configsources.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir, _ := filepath.Abs("testdata/traffic")
	if want := []ConfigSource{{Name: "local", Dir: dir}}; !reflect.DeepEqual(cfg.ConfigSources, want) {
		t.Errorf("configSources = %+v, want %+v", cfg.ConfigSources, want)
	}
}

func TestLoadKubernetesConfigSources(t *testing.T) {
	t.Parallel()
	cfg, err := Parse("clusters.yaml", []byte(`registries:
  - {name: east, kind: kubernetes, domain: svc.cluster.local, kubernetes: {}}
  - {name: west, kind: kubernetes, domain: svc.cluster.local, kubernetes: {}}
configSources:
  - {name: k8s, kubernetes: {clusters: [east, west], namespaces: [shop]}}
  - name: all
    kubernetes:
      clusters: [west]
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []ConfigSource{
		{Name: "k8s", Kubernetes: &KubernetesConfigSource{Clusters: []string{"east", "west"}, Namespaces: []string{"shop"}}},
		{Name: "all", Kubernetes: &KubernetesConfigSource{Clusters: []string{"west"}}},
	}
	if !reflect.DeepEqual(cfg.ConfigSources, want) {
		t.Errorf("configSources = %+v, want %+v", cfg.ConfigSources, want)
	}
}
