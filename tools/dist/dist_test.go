package dist

import (
	"archive/tar"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const (
	testVersion  = "v0.1.0-test"
	testRevision = "0123456789abcdef"
)

var repoRoot, _ = filepath.Abs(filepath.Join("..", ".."))

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// meshfedBinary builds the static meshfed binary (CGO_ENABLED=0, as make
// image does) once per test run.
func meshfedBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() { binPath, buildErr = buildMeshfed() })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func buildMeshfed() (string, error) {
	dir, err := os.MkdirTemp("", "meshfed-dist-test")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "meshfed")
	cmd := exec.Command("go", "build", "-ldflags",
		"-s -w -X main.version="+testVersion+" -X main.revision="+testRevision, "-o", bin, "./cmd/meshfed")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build meshfed: %v\n%s", err, out)
	}
	return bin, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// TestImage builds the image, reads it back from both the tarball and the
// OCI layout, and runs the binary extracted from it.
func TestImage(t *testing.T) {
	bin := meshfedBinary(t)
	created := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	img, err := Image(ImageOptions{Binary: bin, CACerts: "/etc/ssl/certs/ca-certificates.crt", Arch: "amd64",
		Version: testVersion, Revision: testRevision, Source: "https://github.com/meshfed/meshfed", Created: created})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tarPath, layoutDir := filepath.Join(dir, "meshfed.tar"), filepath.Join(dir, "oci")
	if err := WriteImage(img, "ghcr.io/meshfed/meshfed:"+testVersion, tarPath, layoutDir); err != nil {
		t.Fatal(err)
	}
	fromTar, err := tarball.ImageFromPath(tarPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) != 1 {
		t.Fatalf("OCI layout index: %v, %v", im, err)
	}
	if im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != testVersion {
		t.Errorf("layout ref name = %v", im.Manifests[0].Annotations)
	}
	fromLayout, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]v1.Image{"tarball": fromTar, "layout": fromLayout} {
		checkImage(t, name, got)
	}
	// The same inputs give the same image (reproducible).
	again, err := Image(ImageOptions{Binary: bin, CACerts: "/etc/ssl/certs/ca-certificates.crt", Arch: "amd64",
		Version: testVersion, Revision: testRevision, Source: "https://github.com/meshfed/meshfed", Created: created})
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("two builds of the same inputs: %s, %s", d1, d2)
	}
}

func checkImage(t *testing.T, name string, img v1.Image) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if strings.Join(c.Entrypoint, " ") != "/usr/bin/meshfed" || strings.Join(c.Cmd, " ") != "run --config /etc/meshfed/clusters.yaml" {
		t.Errorf("%s: entrypoint %q cmd %q", name, c.Entrypoint, c.Cmd)
	}
	if c.User != "65532:65532" || cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("%s: user %q, platform %s/%s", name, c.User, cf.OS, cf.Architecture)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.revision": testRevision,
		"org.opencontainers.image.source":   "https://github.com/meshfed/meshfed",
	} {
		if c.Labels[k] != want {
			t.Errorf("%s: label %s = %q, want %q", name, k, c.Labels[k], want)
		}
	}
	// The filesystem: binary, CA bundle, the user, a state dir it owns.
	files := map[string]*tar.Header{}
	dir := t.TempDir()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimSuffix(h.Name, "/")] = h
		if h.Name == "usr/bin/meshfed" || h.Name == "etc/passwd" {
			f, err := os.OpenFile(filepath.Join(dir, filepath.Base(h.Name)), os.O_CREATE|os.O_WRONLY, 0o755)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	for _, p := range []string{"usr/bin/meshfed", "etc/ssl/certs/ca-certificates.crt", "etc/passwd", "tmp", "var/lib/meshfed/state"} {
		if files[p] == nil {
			t.Errorf("%s: image lacks /%s", name, p)
		}
	}
	if h := files["var/lib/meshfed/state"]; h != nil && h.Uid != NonRoot {
		t.Errorf("%s: state dir owned by %d", name, h.Uid)
	}
	if h := files["etc/ssl/certs/ca-certificates.crt"]; h != nil && h.Size < 10000 {
		t.Errorf("%s: CA bundle of %d bytes", name, h.Size)
	}
	passwd, _ := os.ReadFile(filepath.Join(dir, "passwd"))
	if !strings.Contains(string(passwd), "nonroot:x:65532:65532:") {
		t.Errorf("%s: /etc/passwd = %q", name, passwd)
	}
	bin := filepath.Join(dir, "meshfed")
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: the binary is dynamically linked", name)
		}
	}
	ef.Close()
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "meshfed "+testVersion+" (revision "+testRevision+", go") {
		t.Errorf("%s: meshfed version from the image: %q, %v", name, out, err)
	}
}

// TestDeb builds the Debian package, installs it into a temporary root
// (dpkg-deb -x), runs the installed binary on the installed config, and
// checks the unit with systemd-analyze verify.
func TestDeb(t *testing.T) {
	for _, tool := range []string{"dpkg-deb", "systemd-analyze"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("MESHFED_REQUIRE_SERVERS") == "1" {
				t.Fatalf("%s missing (tools/install-test-deps.sh installs it)", tool)
			}
			t.Skipf("%s missing (tools/install-test-deps.sh installs it)", tool)
		}
	}
	bin := meshfedBinary(t)
	deb := filepath.Join(t.TempDir(), "meshfed_0.1.0_amd64.deb")
	if err := Deb(DebOptions{Config: "deploy/nfpm.yaml", Root: repoRoot, Binary: bin, Version: "0.1.0", Arch: "amd64", Out: deb}); err != nil {
		t.Fatal(err)
	}
	for field, want := range map[string]string{"Package": "meshfed", "Version": "0.1.0", "Architecture": "amd64"} {
		out, err := exec.Command("dpkg-deb", "-f", deb, field).Output()
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("control %s = %q (%v), want %q", field, out, err, want)
		}
	}
	conffiles, err := exec.Command("sh", "-c", "dpkg-deb --ctrl-tarfile "+deb+" | tar -xOf - ./conffiles").Output()
	if err != nil || !strings.Contains(string(conffiles), "/etc/meshfed/clusters.yaml") {
		t.Errorf("conffiles = %q, %v", conffiles, err)
	}
	root := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "-x", deb, root).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x: %v\n%s", err, out)
	}
	for _, p := range []string{"usr/bin/meshfed", "lib/systemd/system/meshfed.service", "etc/meshfed/clusters.yaml", "etc/meshfed/services.yaml"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("package lacks /%s", p)
		}
	}
	// The installed config is valid (its services file path points into root).
	cfg, err := os.ReadFile(filepath.Join(root, "etc/meshfed/clusters.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rooted := filepath.Join(t.TempDir(), "clusters.yaml")
	if err := os.WriteFile(rooted, []byte(strings.ReplaceAll(string(cfg), "/etc/meshfed/", root+"/etc/meshfed/")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(root, "usr/bin/meshfed"), "validate", rooted).CombinedOutput(); err != nil {
		t.Errorf("installed meshfed validate installed config: %v\n%s", err, out)
	}

	// systemd-analyze verify resolves the unit's dependencies and commands
	// inside root: give it the host's targets and kill(1).
	prepareSystemdRoot(t, root)
	if out := verifyUnit(t, root, "meshfed.service"); out != "" {
		t.Errorf("systemd-analyze verify meshfed.service:\n%s", out)
	}
	// The check can fail: a unit with a typo is reported.
	unit, _ := os.ReadFile(filepath.Join(root, "lib/systemd/system/meshfed.service"))
	bad := strings.Replace(string(unit), "ProtectSystem=strict", "ProtectSystm=strict", 1)
	if err := os.WriteFile(filepath.Join(root, "lib/systemd/system/meshfed-typo.service"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := verifyUnit(t, root, "meshfed-typo.service"); !strings.Contains(out, "ProtectSystm") {
		t.Errorf("systemd-analyze verify did not report a typo: %q", out)
	}
}

func prepareSystemdRoot(t *testing.T, root string) {
	t.Helper()
	dst := filepath.Join(root, "usr/lib/systemd/system")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	targets, _ := filepath.Glob("/lib/systemd/system/*.target")
	if len(targets) == 0 {
		t.Fatal("no systemd targets on this machine (Debian package systemd)")
	}
	for _, tg := range targets {
		b, err := os.ReadFile(tg)
		if err != nil {
			continue
		}
		_ = os.WriteFile(filepath.Join(dst, filepath.Base(tg)), b, 0o644)
	}
	kill, err := os.ReadFile("/usr/bin/kill")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/kill"), kill, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("usr/bin", filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
}

// verifyUnit runs systemd-analyze verify on a unit of root and returns
// what it reports (nothing for a clean unit); a non-zero exit fails t.
func verifyUnit(t *testing.T, root, unit string) string {
	t.Helper()
	cmd := exec.Command("systemd-analyze", "verify", "--root="+root, "/lib/systemd/system/"+unit)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out)
	}
	return strings.TrimSpace(string(out))
}
