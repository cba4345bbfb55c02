package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckFilesConfigSourceDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeAtomic(t, filepath.Join(dir, "s.yaml"), svcFile("10.0.0.1"))
	cfg, err := Parse(filepath.Join(dir, "clusters.yaml"), []byte("registries:\n  - {name: vms, kind: file, domain: vm.internal, file: {path: s.yaml}}\nconfigSources:\n  - {name: local, dir: nope}\n"))
	if err != nil {
		t.Fatal(err)
	}
	probs := CheckFiles(cfg)
	if len(probs) != 1 || probs[0].Key != "configSources[0].dir" || probs[0].Line != 4 || !strings.Contains(probs[0].Msg, "no such file or directory") {
		t.Errorf("problems = %+v, want configSources[0].dir at line 4: no such directory", probs)
	}
}

// svcFile and writeAtomic are the gateway tests' helpers: a services file
// with service a on port 80 at addrs, written by rename.
func svcFile(addrs ...string) string {
	var b strings.Builder
	b.WriteString("services:\n  - name: a\n    ports: [{name: http, port: 80, protocol: HTTP}]\n    endpoints:\n")
	for _, a := range addrs {
		b.WriteString("      - {address: " + a + "}\n")
	}
	return b.String()
}

func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}
