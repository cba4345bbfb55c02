// Command meshfed-dist builds meshfed's image and Debian package (make
// image, make deb) without a container daemon.
//
//	meshfed-dist image -binary B -arch amd64 -version V -revision R -tar T -layout DIR
//	meshfed-dist deb -root . -binary B -arch amd64 -version V -o meshfed.deb
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/meshfed/meshfed/tools/dist"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: meshfed-dist image|deb [flags]")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "meshfed-dist:", err)
		os.Exit(1)
	}
}

func run(verb string, args []string) error {
	fs := flag.NewFlagSet(verb, flag.ExitOnError)
	binary := fs.String("binary", "", "static linux meshfed binary")
	arch := fs.String("arch", "amd64", "amd64 or arm64")
	version := fs.String("version", "dev", "version")
	switch verb {
	case "image":
		revision := fs.String("revision", "unknown", "VCS revision")
		source := fs.String("source", "https://github.com/meshfed/meshfed", "repository URL")
		certs := fs.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle (Debian package ca-certificates)")
		ref := fs.String("ref", "ghcr.io/meshfed/meshfed:dev", "image reference recorded in the tarball and layout")
		tarPath := fs.String("tar", "", "tarball to write")
		layoutDir := fs.String("layout", "", "OCI layout directory to write")
		epoch := fs.Int64("created", 0, "creation time, Unix seconds (reproducible builds: the commit time)")
		_ = fs.Parse(args)
		img, err := dist.Image(dist.ImageOptions{Binary: *binary, CACerts: *certs, Arch: *arch, Version: *version,
			Revision: *revision, Source: *source, Created: time.Unix(*epoch, 0).UTC()})
		if err != nil {
			return err
		}
		if err := dist.WriteImage(img, *ref, *tarPath, *layoutDir); err != nil {
			return err
		}
		d, err := img.Digest()
		if err != nil {
			return err
		}
		fmt.Printf("%s %s\n%s\n%s\n", *ref, d, *tarPath, *layoutDir)
	case "deb":
		root := fs.String("root", ".", "repository root")
		config := fs.String("config", "deploy/nfpm.yaml", "nfpm config")
		out := fs.String("o", "", "the .deb to write")
		_ = fs.Parse(args)
		if err := dist.Deb(dist.DebOptions{Config: *config, Root: *root, Binary: *binary, Version: *version, Arch: *arch, Out: *out}); err != nil {
			return err
		}
		fmt.Println(*out)
	default:
		return fmt.Errorf("unknown command %q (image or deb)", verb)
	}
	return nil
}
