package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateKubernetesExample: examples/kubernetes ships no kubeconfigs;
// its kubeconfigs/README.md says validate needs them, reports each missing
// one, and passes once the README's commands made them. The example is
// validated from a copy, so kubeconfigs someone put in the clone do not
// change the result.
func TestValidateKubernetesExample(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../examples/kubernetes/kubeconfigs/README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(strings.Join(strings.Fields(string(readme)), " "), "`", "")
	for _, want := range []string{
		"meshfed validate examples/kubernetes/clusters.yaml needs them", // the promise tested below
		"kubectl config --kubeconfig=$out set-context $ctx",             // how to make them
	} {
		if !strings.Contains(text, want) {
			t.Errorf("kubeconfigs/README.md does not say %q", want)
		}
	}
	if strings.Contains(text, "does not need") {
		t.Errorf("kubeconfigs/README.md says validate does not need the kubeconfigs")
	}

	example, err := os.ReadFile("../../examples/kubernetes/clusters.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "clusters.yaml")
	if err := os.WriteFile(config, example, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "kubeconfigs"), 0o755); err != nil {
		t.Fatal(err)
	}

	// Without the kubeconfigs: exit 1, one problem per missing file, nothing else.
	_, errOut, err := execute(t, "validate", config)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Fatalf("validate without kubeconfigs = %v, want exit 1; stderr:\n%s", err, errOut)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	want := []string{
		"registries[0].kubernetes.kubeconfig: cannot read " + filepath.Join(dir, "kubeconfigs", "east.kubeconfig"),
		"registries[1].kubernetes.kubeconfig: cannot read " + filepath.Join(dir, "kubeconfigs", "west.kubeconfig"),
	}
	if len(lines) != len(want) {
		t.Fatalf("validate without kubeconfigs printed %d problems, want %d (one per kubeconfig):\n%s", len(lines), len(want), errOut)
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("problem %d = %q, want it to contain %q", i, lines[i], w)
		}
	}

	// With kubeconfigs as the README's kubectl commands write them: exit 0.
	for _, ctx := range []string{"east", "west"} {
		kc := `apiVersion: v1
kind: Config
clusters:
- name: ` + ctx + `
  cluster: {server: "https://` + ctx + `.example:6443", certificate-authority-data: ""}
users:
- name: meshfed-reader
  user: {token: abc}
contexts:
- name: ` + ctx + `
  context: {cluster: ` + ctx + `, user: meshfed-reader}
current-context: ""
`
		if err := os.WriteFile(filepath.Join(dir, "kubeconfigs", ctx+".kubeconfig"), []byte(kc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, err := execute(t, "validate", config)
	if err != nil {
		t.Fatalf("validate with kubeconfigs = %v; stderr:\n%s", err, errOut)
	}
	if !strings.Contains(out, "east") || !strings.Contains(out, "west") {
		t.Errorf("summary %q does not name east and west", out)
	}
}
