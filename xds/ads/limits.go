package ads

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Limits bound what one ADS stream may make the server hold
// (docs/architecture.md §3.5; docs/xds.md "Bounded streams"). A request that would exceed
// one ends its stream with codes.ResourceExhausted, a message naming the
// limit, and a count in meshfed_xds_stream_limit_exceeded_total; the
// client reconnects and may ask again within the limits.
type Limits struct {
	// MaxTypeURLs is how many type URLs one stream may subscribe to
	// (meshfed serves 4 Envoy types and istiod's MCP collections, 16 of
	// which a current istiod asks for; unknown ones are answered empty, and
	// count).
	MaxTypeURLs int
	// MaxNames is how many resource names one stream may subscribe to,
	// over all its type URLs (wildcard subscriptions count none).
	MaxNames int
	// MaxResponseBytes is the largest response sent to a client that is a
	// gRPC library (see respsize.go); default DefaultMaxResponseBytes.
	MaxResponseBytes int
}

// Default limits: far above what a proxy asks for (Envoy subscribes to 4
// type URLs and, with EDS by name, one name per cluster; a gRPC client to
// one name per type per target), low enough that one stream cannot hold
// more than a few tens of MB of names.
const (
	DefaultMaxTypeURLs = 64
	DefaultMaxNames    = 100_000
	// MaxNameBytes bounds one subscribed resource name; meshfed's own
	// names are under 300 bytes.
	MaxNameBytes = 1024
	// MaxNackDetail bounds a NACK's error_detail as logged and shown on
	// /debug/syncz.
	MaxNackDetail = 1024
)

func (l Limits) withDefaults() Limits {
	if l.MaxTypeURLs <= 0 {
		l.MaxTypeURLs = DefaultMaxTypeURLs
	}
	if l.MaxNames <= 0 {
		l.MaxNames = DefaultMaxNames
	}
	if l.MaxResponseBytes <= 0 {
		l.MaxResponseBytes = DefaultMaxResponseBytes
	}
	return l
}

// limitErr counts and returns the status ending a stream over limit.
func limitErr(limit string, format string, args ...any) error {
	limitExceeded.WithLabelValues(limit).Inc()
	return status.Errorf(codes.ResourceExhausted, "meshfed xDS stream limit %s exceeded: %s", limit, fmt.Sprintf(format, args...))
}

// checkNameBytes returns an error for a name over MaxNameBytes.
func checkNameBytes(names []string) error {
	for _, n := range names {
		if len(n) > MaxNameBytes {
			return limitErr("nameBytes", "a resource name of %d bytes is over %d", len(n), MaxNameBytes)
		}
	}
	return nil
}

// truncate shortens s to at most n bytes (on a UTF-8 boundary), saying
// how long it was.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (truncated, %d bytes)", s[:cut], len(s))
}
