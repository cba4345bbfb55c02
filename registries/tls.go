package registries

// TLS is the `tls:` block of the kinds that reach their servers over TLS
// (consul, nacos): client certificate, CA and server name. File paths are
// resolved against the directory of clusters.yaml (the kind's
// ResolvePaths, with FilePaths).
//
// Its methods are not named ApplyDefaults, Validate or ResolvePaths: the
// decoder would call those on the block itself; the kind's Config calls
// them where its own checks want them.
type TLS struct {
	CAFile             string `yaml:"caFile"`
	CertFile           string `yaml:"certFile"`
	KeyFile            string `yaml:"keyFile"`
	ServerName         string `yaml:"serverName"`
	InsecureSkipVerify bool   `yaml:"insecureSkipVerify"`
}

// IsSet reports whether any key of the block is given.
func (t TLS) IsSet() bool { return t != TLS{} }

// CheckPair checks that certFile and keyFile are given together.
func (t TLS) CheckPair() error {
	if (t.CertFile == "") != (t.KeyFile == "") {
		return FieldErr("tls.keyFile", "certFile and keyFile go together")
	}
	return nil
}

// FilePaths returns the block's file paths, for the kind's ResolvePaths.
func (t *TLS) FilePaths() []*string { return []*string{&t.CAFile, &t.CertFile, &t.KeyFile} }

// Files returns the block's files that are set, keyed below tls., each
// with its check, for the kind's Files (registries.FileReferrer).
func (t TLS) Files() []FileRef {
	var out []FileRef
	if t.CAFile != "" {
		out = append(out, FileRef{Key: "tls.caFile", Path: t.CAFile, Check: CheckPEMCertificates})
	}
	if t.CertFile != "" {
		out = append(out, FileRef{Key: "tls.certFile", Path: t.CertFile, Check: CheckPEMCertificates})
	}
	if t.KeyFile != "" {
		out = append(out, FileRef{Key: "tls.keyFile", Path: t.KeyFile, Check: CheckKeyPair(t.CertFile)})
	}
	return out
}
