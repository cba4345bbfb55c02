package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAdminConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "empty.token"), []byte("\n \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ admin, want string }{
		{`{tokenFile: empty.token}`, "empty.token holds no token"},
		{`{tokenFile: missing.token}`, "missing.token"},
		{`{pprof: yes}`, `admin.pprof: want true or false, got "yes"`},
		{`{tls: {cert: a.pem}}`, "key"},
	} {
		_, err := Parse(filepath.Join(dir, "clusters.yaml"), []byte("admin: "+tt.admin+"\nregistries: []\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "admin.") {
			t.Errorf("admin %s: error %v, want one naming admin.* and %q", tt.admin, err, tt.want)
		}
	}
}
