// Command promcheck checks the observability pack of deploy/observability
// against a running meshfed: every PromQL expression of the Grafana
// dashboards and the PrometheusRule files parses (with Prometheus's own
// parser), and every metric they select exists in a /metrics exposition.
//
// It is a module of its own: github.com/prometheus/prometheus brings a
// dependency graph (cloud SDKs, docker, otel) that meshfed's go.mod should
// not carry for one test.
//
//	promcheck -metrics FILE [-dashboard FILE]... [-rules FILE]...
//
// FILE for -metrics is Prometheus text exposition (a scrape of /metrics).
// It prints one line per problem and exits 1 if there is any; with none it
// prints a summary: expressions parsed and metric names used.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

type files []string

func (f *files) String() string     { return strings.Join(*f, ",") }
func (f *files) Set(v string) error { *f = append(*f, v); return nil }

// expr is one expression and where it came from.
type expr struct {
	where, query string
}

func main() {
	var dashboards, rules files
	metrics := flag.String("metrics", "", "Prometheus text exposition of a running meshfed")
	flag.Var(&dashboards, "dashboard", "Grafana dashboard JSON (repeatable)")
	flag.Var(&rules, "rules", "PrometheusRule or Prometheus rule file YAML (repeatable)")
	flag.Parse()
	if *metrics == "" || len(dashboards)+len(rules) == 0 {
		fmt.Fprintln(os.Stderr, "usage: promcheck -metrics FILE [-dashboard FILE]... [-rules FILE]...")
		os.Exit(2)
	}
	have, err := exposedNames(*metrics)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var exprs []expr
	var problems []string
	for _, f := range dashboards {
		es, err := dashboardExprs(f)
		if err != nil {
			problems = append(problems, err.Error())
		}
		exprs = append(exprs, es...)
	}
	for _, f := range rules {
		es, err := ruleExprs(f)
		if err != nil {
			problems = append(problems, err.Error())
		}
		exprs = append(exprs, es...)
	}
	used := map[string]bool{}
	for _, e := range exprs {
		q := grafanaVars.ReplaceAllString(e.query, "5m")
		node, err := promql.ParseExpr(q)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: does not parse: %v\n  %s", e.where, err, e.query))
			continue
		}
		for _, name := range selectedNames(node) {
			used[name] = true
			if !have[name] {
				problems = append(problems, fmt.Sprintf("%s: metric %s is not exposed by meshfed", e.where, name))
			}
		}
	}
	if len(exprs) == 0 {
		problems = append(problems, "no expressions found")
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
	names := make([]string, 0, len(used))
	for n := range used {
		names = append(names, n)
	}
	slices.Sort(names)
	fmt.Printf("%d expressions parse; %d metrics used, all exposed: %s\n", len(exprs), len(names), strings.Join(names, " "))
}

// promql parses with the default options, as a Prometheus server does.
var promql = parser.NewParser(parser.Options{})

// grafanaVars are dashboard variables; $__rate_interval and friends stand
// for a range.
var grafanaVars = regexp.MustCompile(`\$__(rate_)?interval|\$__range|\$\{__(rate_)?interval\}`)

// selectedNames returns the metric names the expression selects.
func selectedNames(n parser.Node) []string {
	var out []string
	parser.Inspect(n, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name != "" {
			out = append(out, name)
		}
		return nil
	})
	return out
}

// exposedNames reads the series names of a text exposition.
func exposedNames(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		out[name] = true
	}
	return out, sc.Err()
}

// dashboardExprs collects every "expr" of a Grafana dashboard's panels
// and targets (nested rows included) and of its query variables.
func dashboardExprs(path string) ([]expr, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []expr
	var walk func(where string, v any)
	walk = func(where string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if t, ok := v["title"].(string); ok {
				where = path + ": panel " + t
			}
			for k, x := range v {
				if s, ok := x.(string); ok && k == "expr" {
					out = append(out, expr{where, s})
					continue
				}
				if q, ok := x.(map[string]any); ok && k == "query" {
					if s, ok := q["query"].(string); ok && strings.Contains(s, "(") && !strings.HasPrefix(s, "label_values") {
						out = append(out, expr{where, s})
					}
				}
				walk(where, x)
			}
		case []any:
			for _, x := range v {
				walk(where, x)
			}
		}
	}
	walk(path, v)
	return out, nil
}

// ruleExprs collects every rule's expr of a PrometheusRule (spec.groups)
// or a Prometheus rule file (groups).
func ruleExprs(path string) ([]expr, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Groups []ruleGroup `yaml:"groups"`
		Spec   struct {
			Groups []ruleGroup `yaml:"groups"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []expr
	for _, g := range append(doc.Groups, doc.Spec.Groups...) {
		for _, r := range g.Rules {
			name := r.Alert
			if name == "" {
				name = r.Record
			}
			out = append(out, expr{fmt.Sprintf("%s: rule %s", path, name), r.Expr})
		}
	}
	return out, nil
}

type ruleGroup struct {
	Name  string `yaml:"name"`
	Rules []struct {
		Alert  string `yaml:"alert"`
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	} `yaml:"rules"`
}
