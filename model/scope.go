package model

import "strings"

// Exported reports whether an object of namespace own with the exportTo
// list to is visible from namespace client, as Istio reads exportTo
// (docs/architecture.md §3.7): empty or "*" every namespace, "." its own,
// "~" none, else the namespaces named.
func Exported(to []string, own, client string) bool {
	if len(to) == 0 {
		return true
	}
	for _, ns := range to {
		switch ns {
		case "*":
			return true
		case ".":
			if own == client {
				return true
			}
		case "~":
			return false
		default:
			if ns == client {
				return true
			}
		}
	}
	return false
}

// ExportsAll reports whether the exportTo list to shows an object to
// every namespace.
func ExportsAll(to []string) bool {
	for _, ns := range to {
		if ns == "*" {
			return true
		}
	}
	return len(to) == 0
}

// HostMatches reports whether host matches pattern as Istio matches a
// Sidecar's egress dnsName: "*" matches every host, "*.suffix" every host
// ending in .suffix, anything else only itself (case-insensitively).
func HostMatches(pattern, host string) bool {
	switch {
	case pattern == "*":
		return true
	case strings.HasPrefix(pattern, "*."):
		return len(host) > len(pattern)-1 && strings.EqualFold(host[len(host)-len(pattern)+1:], pattern[1:])
	}
	return strings.EqualFold(pattern, host)
}
