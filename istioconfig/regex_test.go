package istioconfig

import (
	"strings"
	"testing"
)

// Ordinary regexes pass; one whose program is far above Envoy's limit (a
// counted repetition of a class, expanded by RE2) is refused alone, with
// the reason; a VirtualService holding it is rejected naming the field.
func TestRegexProgramSize(t *testing.T) {
	t.Parallel()
	for _, re := range []string{`/orders\.v2\..*`, `stag(e|ing)`, `/api/v[0-9]+/users/[^/]+`, `\p{L}+`, `[a-z0-9]{100}`, `(?i)^/[a-z0-9._-]{1,200}$`} {
		if err := checkRegex(re); err != nil {
			t.Errorf("checkRegex(%q) = %v, want accepted", re, err)
		}
	}
	big := strings.Repeat(`[a-z0-9]{1000}-`, 10)
	err := checkRegex(big)
	if err == nil || !strings.Contains(err.Error(), "too large") || !strings.Contains(err.Error(), "32768") {
		t.Fatalf("checkRegex(big) = %v, want too large, naming Envoy's limit", err)
	}
	yaml := "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: a, namespace: ns}\nspec:\n  hosts: [a.b]\n" +
		"  http:\n  - match: [{uri: {regex: \"" + big + "\"}}]\n    route: [{destination: {host: a.b}}]\n" +
		"---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: c, namespace: ns}\nspec:\n  hosts: [c.d]\n" +
		"  http:\n  - match: [{uri: {regex: \"/c/[0-9]+\"}}]\n    route: [{destination: {host: c.d}}]\n"
	objs, rej := ParseObjects("t.yaml", []byte(yaml))
	if len(objs) != 1 || len(rej) != 1 {
		t.Fatalf("%d objects, rejections %v; want the small regex's object kept and the big one's rejected", len(objs), rej)
	}
	if !strings.Contains(rej[0].Reason, "spec.http[0].match[0].uri") || !strings.Contains(rej[0].Reason, "too large") {
		t.Errorf("reason %q, want the field and \"too large\"", rej[0].Reason)
	}
}
