package config

import (
	"fmt"
	"os"
	"strings"
)

// ReadToken reads an admin bearer token file: its content without
// surrounding whitespace, which must not be empty. Errors name the file,
// never its content.
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("%s holds no token", path)
	}
	if strings.ContainsAny(t, " \t\r\n") {
		return "", fmt.Errorf("%s: the token must be one word (no inner whitespace)", path)
	}
	return t, nil
}
