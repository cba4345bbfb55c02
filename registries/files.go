package registries

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// FileRef is a file a Config block names (a token, a kubeconfig, PEM
// files...), for `meshfed validate` to open and check before anything
// runs.
type FileRef struct {
	// Key is the key naming the file, below the block: "tls.caFile".
	Key string
	// Path is the file, absolute after ResolvePaths.
	Path string
	// Check checks the content; nil only checks that the file reads. Its
	// errors never quote the content (it may be a secret).
	Check func(data []byte) error
}

// FileReferrer is implemented by Config blocks that name files. Files
// returns every file the block names, after defaults and ResolvePaths;
// unset paths are left out.
type FileReferrer interface {
	Files() []FileRef
}

// CheckFile reads ref's file and runs its Check. The error has one
// problem a line, each starting with the path (the caller names the key).
func CheckFile(ref FileRef) error {
	data, err := os.ReadFile(ref.Path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("cannot read %s: %v", ref.Path, pe.Err)
		}
		return fmt.Errorf("cannot read %s: %v", ref.Path, err)
	}
	if ref.Check != nil {
		if err := ref.Check(data); err != nil {
			// One problem a line, each naming the file.
			lines := strings.Split(err.Error(), "\n")
			for i, l := range lines {
				lines[i] = ref.Path + ": " + l
			}
			return errors.New(strings.Join(lines, "\n"))
		}
	}
	return nil
}

// CheckPEMCertificates checks that data holds at least one PEM
// certificate and that every one parses.
func CheckPEMCertificates(data []byte) error {
	n := 0
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return fmt.Errorf("certificate %d does not parse: %v", n+1, err)
		}
		n++
	}
	if n == 0 {
		return errors.New("holds no PEM certificate")
	}
	return nil
}

// CheckKeyPair returns a Check for a PEM private key file that must match
// the certificate in certPath (whose own problems are reported on its
// key, so an unreadable certificate is not this file's error).
func CheckKeyPair(certPath string) func([]byte) error {
	return func(key []byte) error {
		cert, err := os.ReadFile(certPath)
		if err != nil || CheckPEMCertificates(cert) != nil {
			if b, _ := pem.Decode(key); b == nil || !strings.Contains(b.Type, "PRIVATE KEY") {
				return errors.New("holds no PEM private key")
			}
			return nil
		}
		if _, err := tls.X509KeyPair(cert, key); err != nil {
			return fmt.Errorf("is not the private key of %s: %v", certPath, err)
		}
		return nil
	}
}

// CheckNotEmpty checks that the file holds something besides white space.
func CheckNotEmpty(data []byte) error {
	if strings.TrimSpace(string(data)) == "" {
		return errors.New("is empty")
	}
	return nil
}
