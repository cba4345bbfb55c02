package config

import (
	"fmt"
	"os"
	"strings"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/yamlconf/yamlpath"
)

// CheckFiles opens every file c names — the xDS TLS certificate, key and
// client CA, the files of each kind block (registries.FileReferrer:
// token files, kubeconfigs, services files...) and the configSources
// directories — and returns a problem for
// each one that is missing, unreadable or does not parse, at the line and
// column of the key in clusters.yaml that names it. A services file's own
// problems keep their file:line:col in the message.
//
// `meshfed validate` reports them all. `meshfed run` refuses to start on
// problems under xds. (it could not serve) and logs the others: registries
// re-read their files on every start and report Degraded or Failed.
func CheckFiles(c *Config) []Problem {
	var out []Problem
	add := func(key string, err error) {
		n, _ := yamlpath.Lookup(c.root, key)
		for line := range strings.SplitSeq(err.Error(), "\n") {
			p := Problem{File: c.Path, Key: key, Msg: line}
			if n != nil {
				p.Line, p.Column = n.Line, n.Column
			}
			out = append(out, p)
		}
	}
	if t := c.XDS.TLS; t != nil {
		refs := []registries.FileRef{
			{Key: "xds.tls.cert", Path: t.Cert, Check: registries.CheckPEMCertificates},
			{Key: "xds.tls.key", Path: t.Key, Check: registries.CheckKeyPair(t.Cert)},
		}
		if t.ClientCA != "" {
			refs = append(refs, registries.FileRef{Key: "xds.tls.clientCA", Path: t.ClientCA, Check: registries.CheckPEMCertificates})
		}
		for _, ref := range refs {
			if err := registries.CheckFile(ref); err != nil {
				add(ref.Key, err)
			}
		}
	}
	for i, r := range c.Registries {
		fr, ok := r.Block.(registries.FileReferrer)
		if !ok {
			continue
		}
		for _, ref := range fr.Files() {
			if err := registries.CheckFile(ref); err != nil {
				add(yamlpath.JoinPath(yamlpath.Index("registries", i)+"."+r.Kind, ref.Key), err)
			}
		}
	}
	for i, cs := range c.ConfigSources {
		if cs.Dir == "" {
			continue // a Kubernetes source: its clusters' kubeconfigs are checked above
		}
		if _, err := os.ReadDir(cs.Dir); err != nil {
			add(yamlpath.Index("configSources", i)+".dir", fmt.Errorf("config source directory: %v", err))
		}
	}
	return out
}
