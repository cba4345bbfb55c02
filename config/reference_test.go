package config

import (
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/registries"
)

// yamlKeys returns the yaml keys of t's fields and of the structs they
// hold (through pointers, slices and maps), as dotted paths
// ("registries.outage.policy"): docPaths without its list and map marks.
func yamlKeys(t reflect.Type) []string {
	paths := docPaths(t, "", map[reflect.Type]bool{})
	unmark := strings.NewReplacer("[]", "", "*.", "")
	for i, p := range paths {
		paths[i] = unmark.Replace(p)
	}
	return paths
}

// keyRE finds "key:" in a line of YAML, commented out or not, block or
// flow style.
var keyRE = regexp.MustCompile(`(?:^|[\s{,\-#])([A-Za-z][A-Za-z0-9]*):(?:\s|$)`)

func keysIn(text string) map[string]bool {
	out := map[string]bool{}
	for line := range strings.SplitSeq(text, "\n") {
		for _, m := range keyRE.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// TestDefaultConfigIsReference: the default ./clusters.yaml calls itself
// the reference for every key, so it names every key of config.Config
// and of each registry kind's block, set or commented out. A kind's keys
// must appear in its own example entry (from "kind: NAME" to the next
// entry).
func TestDefaultConfigIsReference(t *testing.T) {
	b, err := os.ReadFile("../clusters.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if strings.Contains(text, "DESIGN") {
		t.Error("clusters.yaml cites DESIGN, which is not in the repository")
	}
	var missing []string
	for _, k := range yamlKeys(reflect.TypeFor[Config]()) {
		// A key must appear in the section of its top-level key.
		top, _, _ := strings.Cut(k, ".")
		if !keysIn(topSection(text, top))[k[strings.LastIndex(k, ".")+1:]] {
			missing = append(missing, k)
		}
	}
	for _, kind := range Kinds() {
		entry := kindEntry(text, kind)
		if entry == "" {
			missing = append(missing, "registries[kind: "+kind+"]")
			continue
		}
		k, _ := registries.LookupKind(kind)
		have := keysIn(entry)
		if !have[kind] {
			missing = append(missing, "registries[kind: "+kind+"]."+kind)
		}
		for _, key := range yamlKeys(reflect.TypeOf(k.NewConfig())) {
			if !have[key[strings.LastIndex(key, ".")+1:]] {
				missing = append(missing, "registries[kind: "+kind+"]."+kind+"."+key)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("clusters.yaml does not name %d keys (add each, commented out, with a one-line explanation):\n%s", len(missing), strings.Join(missing, "\n"))
	}
}

// kindEntry returns the lines of clusters.yaml's example registry entry of
// kind: from its "- name:" line to the next one or the next top-level key.
func kindEntry(text, kind string) string {
	lines := strings.Split(text, "\n")
	entryStart := -1
	for i, line := range lines {
		l := strings.TrimLeft(strings.TrimLeft(strings.TrimSpace(line), "#"), " ")
		if strings.HasPrefix(l, "- name:") {
			entryStart = i
		}
		if entryStart < 0 || !regexp.MustCompile(`^kind:\s*`+regexp.QuoteMeta(kind)+`(\s|$)`).MatchString(l) {
			continue
		}
		end := len(lines)
		for j := i + 1; j < len(lines); j++ {
			lj := strings.TrimLeft(strings.TrimLeft(strings.TrimSpace(lines[j]), "#"), " ")
			if strings.HasPrefix(lj, "- name:") || (lines[j] != "" && lines[j][0] != ' ' && lines[j][0] != '#' && !strings.HasPrefix(lines[j], "  ")) ||
				(strings.HasPrefix(lines[j], "# ") && !strings.HasPrefix(lines[j], "#  ")) {
				end = j
				break
			}
		}
		return strings.Join(lines[entryStart:end], "\n")
	}
	return ""
}

// topSection returns the lines of clusters.yaml from the top-level key
// top (set, or commented out as "# top:") to the next top-level key.
func topSection(text, top string) string {
	topKey := regexp.MustCompile(`^(?:# ?)?([A-Za-z][A-Za-z0-9]*):(?:\s|$)`)
	lines := strings.Split(text, "\n")
	start := -1
	for i, line := range lines {
		m := topKey.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if start >= 0 {
			return strings.Join(lines[start:i], "\n")
		}
		if m[1] == top {
			start = i
		}
	}
	if start < 0 {
		return ""
	}
	return strings.Join(lines[start:], "\n")
}

// docPaths returns the yaml keys of t as the configuration reference
// writes them: dotted paths under prefix, "[]" after a list
// ("registries[].outage.policy"), a map's values as ".*".
func docPaths(t reflect.Type, prefix string, seen map[reflect.Type]bool) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		return docPaths(t.Elem(), strings.TrimSuffix(prefix, ".")+"[].", seen)
	case reflect.Map:
		return docPaths(t.Elem(), prefix+"*.", seen)
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return nil
	}
	seen[t] = true
	defer delete(seen, t)
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if strings.Contains(","+opts+",", ",inline,") {
			out = append(out, docPaths(f.Type, prefix, seen)...)
			continue
		}
		if name == "" {
			continue
		}
		out = append(out, prefix+name)
		out = append(out, docPaths(f.Type, prefix+name+".", seen)...)
	}
	return out
}

// docKeyRE finds a key written in code style in a Markdown page.
var docKeyRE = regexp.MustCompile("`([A-Za-z][A-Za-z0-9.*\\[\\]<>]*)`")

// TestConfigurationDocIsReference (issue 24): docs/configuration.md is the
// reference for every key of clusters.yaml, so it names each key of
// config.Config as its path (`registries[].outage.policy`) and each key of
// every registry kind's block under the kind's name (`consul.tls.caFile`),
// in code style. The default clusters.yaml is held to the same keys by
// TestDefaultConfigIsReference.
func TestConfigurationDocIsReference(t *testing.T) {
	b, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, m := range docKeyRE.FindAllStringSubmatch(string(b), -1) {
		have[m[1]] = true
	}
	// A key holding a block is named by its keys' paths (`xds.tls.cert`
	// names `xds.tls`).
	named := func(k string) bool {
		if have[k] {
			return true
		}
		for h := range have {
			if strings.HasPrefix(h, k+".") || strings.HasPrefix(h, k+"[].") {
				return true
			}
		}
		return false
	}
	var missing []string
	for _, k := range docPaths(reflect.TypeFor[Config](), "", map[reflect.Type]bool{}) {
		if !named(k) {
			missing = append(missing, k)
		}
	}
	for _, kind := range Kinds() {
		k, _ := registries.LookupKind(kind)
		for _, key := range docPaths(reflect.TypeOf(k.NewConfig()), kind+".", map[reflect.Type]bool{}) {
			if !named(key) {
				missing = append(missing, key)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("docs/configuration.md does not name %d keys (add each, in code style, with its default and meaning):\n%s", len(missing), strings.Join(missing, "\n"))
	}
}
