package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/meshfed/meshfed/validate"
)

type addrResult struct {
	ip      string
	err     error
	expires time.Time
}

// address checks an instance address: IP literals are served as they
// are, hostnames are resolved (cached for the duration of a resync, and
// for 30s otherwise) and their first IPv4 address (else IPv6) served. A
// lookup is bounded by lookupTimeout and ends with the Run.
func (w *watcher) address(host string) (string, error) {
	if ip, ok := parseIP(host); ok {
		return ip, nil
	}
	if !validate.Resolvable(host) {
		return "", fmt.Errorf("address %q is neither an IP address nor a hostname", host)
	}
	key := strings.ToLower(host)
	w.readMu.Lock()
	r, ok := w.addrCache[key]
	w.readMu.Unlock()
	if ok && time.Now().Before(r.expires) {
		return r.ip, r.err
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.r.lookupTimeout)
	defer cancel()
	addrs, err := w.r.lookup(ctx, host)
	var res addrResult
	if err != nil {
		res.err = fmt.Errorf("address %q does not resolve: %v", host, lookupErr(err))
	} else {
		var ips []string
		for _, a := range addrs {
			if ip, ok := parseIP(a); ok {
				ips = append(ips, ip)
			}
		}
		slices.SortStableFunc(ips, func(a, b string) int {
			return boolInt(strings.Contains(a, ":")) - boolInt(strings.Contains(b, ":"))
		})
		if len(ips) == 0 {
			res.err = fmt.Errorf("address %q resolves to no IP address", host)
		} else {
			res.ip = ips[0]
		}
	}
	res.expires = time.Now().Add(30 * time.Second)
	w.readMu.Lock()
	w.addrCache[key] = res
	w.readMu.Unlock()
	return res.ip, res.err
}

func lookupErr(err error) string {
	var de *net.DNSError
	if errors.As(err, &de) {
		if de.IsNotFound {
			return "no such host"
		}
		if de.IsTimeout {
			return "lookup timed out"
		}
		return de.Err
	}
	return err.Error()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
