package federation

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/meshfed/meshfed/registries/yamlconf"
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
// by registries/yamlconf: each struct's ApplyDefaults, ResolvePaths and
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
	return cfg, nil
}
