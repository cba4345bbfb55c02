// Package dist builds meshfed's release artefacts without a daemon: the
// OCI image (go-containerregistry) and the Debian package (nfpm). It is a
// separate module so that neither library, nor what they pull in, enters
// meshfed's own go.mod.
package dist

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
)

// NonRoot is the uid and gid meshfed runs as in the image (distroless'
// "nonroot"); the Helm chart's securityContext names the same.
const NonRoot = 65532

// ImageOptions say what goes into the image.
type ImageOptions struct {
	Binary   string // static linux meshfed binary (CGO_ENABLED=0)
	CACerts  string // PEM bundle, e.g. Debian's /etc/ssl/certs/ca-certificates.crt
	Arch     string // amd64, arm64
	Version  string
	Revision string
	Source   string // repository URL
	Created  time.Time
}

// Image builds the image: one layer on an empty base holding
// /usr/bin/meshfed, the CA bundle, /etc/passwd and /etc/group with user
// nonroot (65532), /tmp and /var/lib/meshfed/state owned by it. Entrypoint
// /usr/bin/meshfed, cmd `run --config /etc/meshfed/clusters.yaml`.
func Image(o ImageOptions) (v1.Image, error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, err
	}
	certs, err := os.ReadFile(o.CACerts)
	if err != nil {
		return nil, fmt.Errorf("CA certificates: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mod := o.Created
	dir := func(name string, uid int, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid, ModTime: mod})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mod}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRoot)
	steps := []func() error{
		func() error { return dir("etc", 0, 0o755) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		func() error { return dir("etc/ssl", 0, 0o755) },
		func() error { return dir("etc/ssl/certs", 0, 0o755) },
		func() error { return file("etc/ssl/certs/ca-certificates.crt", 0o644, certs) },
		func() error { return dir("etc/meshfed", 0, 0o755) },
		func() error { return dir("home", 0, 0o755) },
		func() error { return dir("home/nonroot", NonRoot, 0o700) },
		func() error { return dir("tmp", 0, 0o1777) },
		func() error { return dir("usr", 0, 0o755) },
		func() error { return dir("usr/bin", 0, 0o755) },
		func() error { return file("usr/bin/meshfed", 0o755, bin) },
		func() error { return dir("var", 0, 0o755) },
		func() error { return dir("var/lib", 0, 0o755) },
		func() error { return dir("var/lib/meshfed", NonRoot, 0o750) },
		func() error { return dir("var/lib/meshfed/state", NonRoot, 0o750) },
		tw.Close,
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, err
		}
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", o.Arch
	cf.Created = v1.Time{Time: o.Created}
	cf.Config.Entrypoint = []string{"/usr/bin/meshfed"}
	cf.Config.Cmd = []string{"run", "--config", "/etc/meshfed/clusters.yaml"}
	cf.Config.User = fmt.Sprintf("%d:%d", NonRoot, NonRoot)
	cf.Config.WorkingDir = "/var/lib/meshfed"
	cf.Config.Env = []string{"PATH=/usr/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	cf.Config.ExposedPorts = map[string]struct{}{"15010/tcp": {}, "15014/tcp": {}}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":    "meshfed",
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.source":   o.Source,
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	return mutate.ConfigFile(img, cf)
}

// WriteImage writes img as a docker/OCI tarball (for `docker load`,
// `podman load`, `crane push`) tagged ref, and as an OCI image layout
// directory (for skopeo, crane, containerd), replacing what was there.
func WriteImage(img v1.Image, ref, tarPath, layoutDir string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(tarPath, tag, img); err != nil {
		return err
	}
	if err := os.RemoveAll(layoutDir); err != nil {
		return err
	}
	p, err := layout.Write(layoutDir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag.TagStr()}))
}

// DebOptions say what the Debian package holds.
type DebOptions struct {
	Config  string // nfpm.yaml (deploy/nfpm.yaml); it and its paths are relative to Root
	Root    string // the repository root
	Binary  string // linux meshfed binary for Arch
	Version string
	Arch    string
	Out     string // the .deb to write
}

// Deb builds the Debian package with nfpm.
func Deb(o DebOptions) error {
	abs, err := filepath.Abs(o.Binary)
	if err != nil {
		return err
	}
	env := map[string]string{"VERSION": o.Version, "ARCH": o.Arch, "BINARY": abs}
	config := o.Config
	if !filepath.IsAbs(config) {
		config = filepath.Join(o.Root, config)
	}
	cfg, err := nfpm.ParseFileWithEnvMapping(config, func(k string) string { return env[k] })
	if err != nil {
		return err
	}
	info, err := cfg.Get("deb")
	if err != nil {
		return err
	}
	for _, c := range info.Contents { // paths in the config are relative to Root
		if c.Source != "" && !filepath.IsAbs(c.Source) {
			c.Source = filepath.Join(o.Root, c.Source)
		}
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.Validate(info); err != nil {
		return err
	}
	pkg, err := nfpm.Get("deb")
	if err != nil {
		return err
	}
	f, err := os.Create(o.Out)
	if err != nil {
		return err
	}
	if err := pkg.Package(info, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
