// Package validate is the one place registries and the config loader check
// DNS labels, DNS names and host:port (docs/architecture.md §3.1.1). Labels
// are RFC 1123 labels as Kubernetes checks them
// (k8s.io/apimachinery/pkg/util/validation); a name is labels joined by
// dots, at most 253 characters, each label at most 63 (a stricter reading
// than validation.IsDNS1123Subdomain, which does not bound labels).
package validate

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Label reports whether s is a lowercase RFC 1123 label: letters, digits
// and '-', at most 63, starting and ending with a letter or digit. Callers
// that accept any case lowercase first.
func Label(s string) bool { return len(validation.IsDNS1123Label(s)) == 0 }

// Name reports whether s is a lowercase DNS name of Labels, at most 253
// characters, with no trailing dot.
func Name(s string) bool {
	if s == "" || len(s) > validation.DNS1123SubdomainMaxLength {
		return false
	}
	for l := range strings.SplitSeq(s, ".") {
		if !Label(l) {
			return false
		}
	}
	return true
}

// Hostname reports whether s is a DNS name as instances register them: any
// case, with or without a trailing dot.
func Hostname(s string) bool { return Name(strings.TrimSuffix(strings.ToLower(s), ".")) }

// Resolvable is Hostname that also accepts '_' in labels, as resolvers
// do: worth resolving, though not a hostname meshfed serves under.
func Resolvable(s string) bool {
	return Hostname(strings.ReplaceAll(s, "_", "-"))
}

// Errors of HostPort; callers name the key and value in their own words.
var (
	ErrNotHostPort = errors.New("want host:port")
	ErrNoHost      = errors.New("empty host")
	ErrPort        = errors.New("port is not 1-65535")
)

// HostPort splits s as host:port (an IPv6 host in brackets) and checks
// that the host is not empty and the port is a decimal number 1-65535. It
// does not check the host itself: IPs and names are the caller's policy.
func HostPort(s string) (host string, port uint16, err error) {
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, ErrNotHostPort
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 || strings.TrimLeft(p, "0123456789") != "" {
		return host, 0, ErrPort
	}
	if host == "" {
		return "", uint16(n), ErrNoHost
	}
	return host, uint16(n), nil
}

// Port reports whether n is a port number, 1-65535.
func Port(n int64) bool { return n >= 1 && n <= 65535 }

// ExportTo checks an exportTo list as Istio reads it
// (docs/architecture.md §3.7): "*" (every namespace) or "~" (none), each
// alone; "." (the object's own namespace); or namespace names (DNS
// labels), without duplicates. An empty list is valid (every namespace).
func ExportTo(to []string) error {
	seen := map[string]bool{}
	for i, ns := range to {
		switch {
		case ns == "*" || ns == "~":
			if len(to) > 1 {
				return fmt.Errorf("[%d] %q: must be the only entry", i, ns)
			}
		case ns == ".":
		case !Label(ns):
			return fmt.Errorf("[%d] %q: want *, ., ~ or a namespace (DNS-1123 label)", i, ns)
		}
		if seen[ns] {
			return fmt.Errorf("[%d] %q: duplicate", i, ns)
		}
		seen[ns] = true
	}
	return nil
}
