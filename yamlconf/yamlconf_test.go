package yamlconf

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/yamlconf/yamlpath"
)

// fakeBlock stands in for a platform block with nested keys, lists, maps,
// numbers and durations, to test decoding and how errors map to positions.
type fakeBlock struct {
	Servers  []string            `yaml:"servers"`
	Interval time.Duration       `yaml:"interval"`
	Timeout  registries.Duration `yaml:"timeout"`
	Weight   uint32              `yaml:"weight"`
	Ratio    float64             `yaml:"ratio"`
	On       bool                `yaml:"on"`
	Labels   map[string]string   `yaml:"labels"`
	TLS      struct {
		CAFile string `yaml:"caFile"`
	} `yaml:"tls"`
	Name        string `yaml:"name" yamlconf:"required"`
	resolvedDir string
}

func (b *fakeBlock) ApplyDefaults() {
	if b.Interval == 0 {
		b.Interval = time.Second
	}
}

func (b *fakeBlock) Validate() error {
	var errs []error
	for i, s := range b.Servers {
		if s == "bad" {
			errs = append(errs, registries.FieldErr(yamlpath.Index("servers", i), "bad server %q", s))
		}
	}
	if b.TLS.CAFile == "" {
		errs = append(errs, registries.FieldErr("tls.caFile", "is required"))
	}
	if b.Labels["x.y"] == "bad" {
		errs = append(errs, registries.FieldErr(yamlpath.Child("labels", "x.y"), "bad label"))
	}
	if b.Interval > time.Hour {
		errs = append(errs, errors.New("interval too long"))
	}
	return errors.Join(errs...)
}

func (b *fakeBlock) ResolvePaths(dir string) { b.resolvedDir = dir }

func TestDecode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		src  string
		want []string // problems, formatted
	}{
		{name: "valid", src: "name: n\nservers: [a:1, http://b/c]\ntls: {caFile: ca.pem}\nweight: 0x10\nratio: 1\non: true\nlabels: {x.y: z}\n"},
		{name: "unknown nested key", src: "name: n\ntls:\n  cafile: ca.pem\n", want: []string{
			`x.yaml:2:1: tls.caFile: is required`,
			`x.yaml:3:3: tls.cafile: unknown key (did you mean "caFile"?)`,
		}},
		{name: "bad durations", src: "name: n\ntls: {caFile: ca.pem}\ninterval: 3x\ntimeout: 0s\n", want: []string{
			`x.yaml:3:11: interval: bad duration "3x": want a number with a unit, like 20ms, 30s or 10m`,
			`x.yaml:4:10: timeout: bad duration "0s": must be positive`,
		}},
		{name: "wrong types", src: "name: n\ntls: {caFile: ca.pem}\nservers: a\nweight: -1\nratio: .nan\non: yes\nlabels: [a]\n", want: []string{
			`x.yaml:3:10: servers: want a list, got "a"`,
			`x.yaml:4:9: weight: number -1 is out of range`,
			`x.yaml:5:8: ratio: want a number, got ".nan"`,
			`x.yaml:6:5: on: want true or false, got "yes"`,
			`x.yaml:7:9: labels: want a mapping, got a list`,
		}},
		{name: "field errors at list item, quoted key and absent key", src: "name: n\nservers:\n  - a\n  - bad\nlabels: {x.y: bad}\n", want: []string{
			`x.yaml:1:1: tls.caFile: is required`,
			`x.yaml:4:5: servers[1]: bad server "bad"`,
			`x.yaml:5:15: labels["x.y"]: bad label`,
		}},
		{name: "field error below a present parent", src: "name: n\ntls: {}\n", want: []string{
			"x.yaml:2:1: tls.caFile: is required",
		}},
		{name: "plain validation error", src: "name: n\ntls: {caFile: ca.pem}\ninterval: 2h\n", want: []string{
			"x.yaml:1:1: interval too long",
		}},
		{name: "required key missing and null", src: "tls: {caFile: a}\n---\n", want: []string{
			"x.yaml:3:1: the file holds more than one YAML document; want one",
		}},
		{name: "required key null", src: "name:\ntls: {caFile: a}\n", want: []string{
			"x.yaml:1:1: name: missing value",
		}},
		{name: "duplicate and merge keys", src: "name: a\nname: b\n<<: {x: 1}\ntls: {caFile: a}\n", want: []string{
			`x.yaml:2:1: name: mapping key "name" already defined at line 1`,
			`x.yaml:3:1: merge keys (<<) are not supported`,
		}},
		{name: "bom and flow url", src: "\ufeffname: n\nservers: [http://127.0.0.1:8761/eureka]\ntls: {caFile: a}\n"},
		{name: "alias bomb is bounded", src: "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\nservers: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nname: n\n", want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var b fakeBlock
			err := Decode("x.yaml", "/cfg", []byte(tc.src), &b)
			var msgs []string
			var ye *Error
			if errors.As(err, &ye) {
				for _, p := range ye.Problems {
					msgs = append(msgs, p.String())
				}
			} else if err != nil {
				t.Fatalf("error %T: %v", err, err)
			}
			if tc.name == "alias bomb is bounded" {
				if len(msgs) == 0 || !slices.ContainsFunc(msgs, func(m string) bool {
					return strings.Contains(m, "too many values") || strings.Contains(m, "unknown key")
				}) {
					t.Errorf("problems = %q", msgs)
				}
				return
			}
			if diff := cmp.Diff(tc.want, msgs); diff != "" {
				t.Errorf("problems mismatch (-want +got):\n%s", diff)
			}
			if len(tc.want) == 0 && (b.Interval != time.Second || b.resolvedDir != "/cfg") {
				t.Errorf("defaults/paths not applied: interval %s, dir %q", b.Interval, b.resolvedDir)
			}
		})
	}
}

func TestLookupAndPaths(t *testing.T) {
	t.Parallel()
	root, probs := Parse("x.yaml", []byte("a:\n  b: [1, {c: 2}]\n  \"d.e\": 3\n"))
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	for _, tc := range []struct {
		key       string
		line, col int
		found     bool
	}{
		{key: "a.b[1].c", line: 2, col: 14, found: true},
		{key: `a["d.e"]`, line: 3, col: 10, found: true},
		{key: "a.b", line: 2, col: 3, found: true},
		{key: "a.x.y", line: 1, col: 1, found: false},
	} {
		n, found := yamlpath.Lookup(root, tc.key)
		if n == nil || n.Line != tc.line || n.Column != tc.col || found != tc.found {
			t.Errorf("yamlpath.Lookup(%s) = %v, %v; want %d:%d %v", tc.key, n, found, tc.line, tc.col, tc.found)
		}
	}
	if got := yamlpath.Parent(`a.b[1]["x.y"]`); got != "a.b[1]" {
		t.Errorf("parentPath = %q", got)
	}
}

type inlineOuter struct {
	Files `yaml:",inline"`
	Kind  string `yaml:"kind"`
}

// Files is exported so that it can be embedded and decoded.
type Files struct {
	Path   string   `yaml:"path"`
	Paths  []string `yaml:"paths"`
	Settle string   `yaml:"settle" yamlconf:"required"`
}

// TestInline: the keys of a struct embedded with `yaml:",inline"` are the
// outer struct's own, with their positions, options and suggestions.
func TestInline(t *testing.T) {
	t.Parallel()
	var o inlineOuter
	if err := Decode("x.yaml", "/cfg", []byte("path: a\npaths: [b, c]\nsettle: 1s\nkind: k\n"), &o); err != nil {
		t.Fatal(err)
	}
	if want := (inlineOuter{Files: Files{Path: "a", Paths: []string{"b", "c"}, Settle: "1s"}, Kind: "k"}); !cmp.Equal(o, want) {
		t.Errorf("decoded %+v, want %+v", o, want)
	}
	err := Decode("x.yaml", "/cfg", []byte("pth: a\nkind: k\n"), new(inlineOuter))
	var ye *Error
	if !errors.As(err, &ye) {
		t.Fatalf("error %v, want problems", err)
	}
	var msgs []string
	for _, p := range ye.Problems {
		msgs = append(msgs, p.String())
	}
	if diff := cmp.Diff([]string{
		`x.yaml:1:1: pth: unknown key (did you mean "path"?)`,
		`x.yaml:1:1: settle: missing required key`,
	}, msgs); diff != "" {
		t.Errorf("problems mismatch (-want +got):\n%s", diff)
	}
}
