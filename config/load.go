package config

// The clusters.yaml loader: Load and Parse decode the file through
// package yamlconf, and a registry entry decodes its kind block. The
// types are in config.go, their checks in validate.go.

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"go.yaml.in/yaml/v4"

	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/yamlconf"
)

// Problem is one thing wrong with a clusters.yaml: file, line, column,
// key and message.
type Problem = yamlconf.Problem

// LoadError lists every problem found in a clusters.yaml, in file order.
type LoadError = yamlconf.Error

// Load reads, defaults and validates the clusters.yaml at path. On any
// problem it returns a nil Config and a *LoadError.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		msg := err.Error()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			msg = "cannot read: " + pe.Err.Error()
		}
		return nil, &LoadError{Problems: []Problem{{File: path, Msg: msg}}}
	}
	return Parse(path, data)
}

// Parse is Load on data already read from path. path names the file in
// problems, and relative paths inside the file (file registry paths, TLS
// files) are resolved against its directory.
//
// The file is read as YAML 1.2 (a byte-order mark is accepted) and decoded
// by package yamlconf: each struct's ApplyDefaults, ResolvePaths and
// Validate run after it is decoded, deepest first; a registry's kind block
// is decoded into its kind's registries.Config the same way. Parse does no
// other I/O: CheckFiles opens the files the config names.
func Parse(path string, data []byte) (*Config, error) {
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		dir = filepath.Dir(path)
	}
	root, probs := yamlconf.Parse(path, data)
	if len(probs) > 0 {
		return nil, &LoadError{Problems: probs}
	}
	if root == nil {
		return nil, &LoadError{Problems: []Problem{{File: path, Msg: "the file is empty; want at least a registries: list"}}}
	}
	d := yamlconf.NewDecoder(path, dir, len(data))
	cfg := &Config{}
	d.Decode("", root, root, cfg)
	if err := d.Err(); err != nil {
		return nil, err
	}
	cfg.Path = path
	cfg.root = root
	bindClusters(cfg)
	return cfg, nil
}

// UnmarshalYAMLNode decodes a registry entry: its own keys, then the kind
// block named after its kind into a new registries.Config of that kind
// (decoded, defaulted, path-resolved and validated by yamlconf).
func (r *Registry) UnmarshalYAMLNode(d *yamlconf.Decoder, path string, n *yaml.Node) {
	type block struct {
		key    string
		k, val *yaml.Node
	}
	var blocks []block
	keys := Kinds() // a kind's block key is its name
	d.Struct(path, n, n, r, func(key string, k, v *yaml.Node) bool {
		if !slices.Contains(keys, key) {
			return false
		}
		blocks = append(blocks, block{key: key, k: k, val: v})
		return true
	}, keys)
	kind, ok := registries.LookupKind(r.Kind)
	if !ok || d.HasProblem(path+".kind") {
		return // the kind is missing or unsupported: that is the error
	}
	var match *block
	for i := range blocks {
		b := &blocks[i]
		if b.key != r.Kind {
			d.Addf(b.k, path+"."+b.key, "a %s block does not belong in a registry of kind %q", b.key, r.Kind)
			continue
		}
		match = b
	}
	if match == nil {
		d.Addf(n, path+"."+r.Kind, "missing required key: kind %q needs a %s: block", r.Kind, r.Kind)
		return
	}
	p := path + "." + r.Kind
	cfg := kind.NewConfig()
	d.Decode(p, match.k, match.val, cfg)
	if !d.HasProblem(p) {
		r.Block = cfg
	}
}
