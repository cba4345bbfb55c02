package consul

import (
	"context"
	"errors"
	"net/http"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
)

// The watch budget: how many connections the service queries may hold.
//
// A Consul agent refuses an address more than
// limits.http_max_conns_per_client connections (200 by default) and
// answers the extra ones 429 Too Many Requests, whoever holds the others.
// Unset, maxConcurrentWatches is sized from the limit the agent reports
// (/v1/agent/self, DebugConfig.HTTPMaxConnsPerClient; reading it needs
// agent:read), so that an operator who raises the limit for a large
// catalog gets a blocking query per service over plain HTTP with nothing
// changed in clusters.yaml, and one who lowered it gets no 429s.

const (
	// autoShareNum/autoShareDen is the share of the agent's limit an
	// unset maxConcurrentWatches takes: 64 %, 128 of the default 200,
	// leaving the rest to other clients on the same address (the node's
	// own tools, another meshfed behind the same NAT).
	autoShareNum, autoShareDen = 16, 25
	// extraConns are the registry's connections besides the service
	// queries: the catalog watch and the two health-state watches.
	extraConns = 3
	// maxAutoWatches caps the budget taken from an agent without a limit
	// (http_max_conns_per_client 0); each connection costs both sides a
	// file descriptor and a few buffers.
	maxAutoWatches = 16384
	// fdReserve is the least of the process's open files an automatic
	// budget leaves to the rest of it.
	fdReserve = 4096
	// selfTimeout bounds the read of the agent's limit.
	selfTimeout = 10 * time.Second
)

// agentLimit is what the agent said about its connection limit.
type agentLimit struct {
	known bool // the agent reported its limit
	limit int  // limits.http_max_conns_per_client; 0: none
	err   error
}

// watchBudget returns the budget for a configured maxConcurrentWatches (0:
// unset) and the agent's limit, and whether a configured value was
// lowered: one that leaves the agent's limit no room for the registry's
// other watches gets the automatic size. nofile is the process's
// open-file limit (0: unknown); an automatic budget leaves a quarter of
// it, at least fdReserve, to the rest of the process (xDS streams, files).
func watchBudget(configured int, a agentLimit, nofile uint64) (n int, lowered bool) {
	switch {
	case a.known && a.limit > 0:
		if configured > 0 && configured+extraConns <= a.limit {
			return configured, false
		}
		lowered = configured > 0 // past the limit: the automatic size
		n = min(max(1, a.limit*autoShareNum/autoShareDen), max(1, a.limit-extraConns))
	case configured > 0:
		return configured, false
	case a.known: // no limit
		n = maxAutoWatches
	default:
		return DefaultMaxConcurrentWatches, false
	}
	if nofile > 0 {
		free := int64(nofile) - max(fdReserve, int64(nofile/4))
		n = min(n, int(max(free, min(int64(n), DefaultMaxConcurrentWatches))))
	}
	return n, lowered
}

// readAgentLimit asks the agent for its limits.http_max_conns_per_client.
func (w *watch) readAgentLimit(ctx context.Context) agentLimit {
	ctx, cancel := context.WithTimeout(ctx, selfTimeout)
	defer cancel()
	var self struct {
		DebugConfig struct {
			HTTPMaxConnsPerClient *int
		}
	}
	if _, err := w.client.Raw().Query("/v1/agent/self", &self, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		return agentLimit{err: err}
	}
	if self.DebugConfig.HTTPMaxConnsPerClient == nil {
		return agentLimit{err: errors.New("the agent's /v1/agent/self has no DebugConfig.HTTPMaxConnsPerClient")}
	}
	return agentLimit{known: true, limit: *self.DebugConfig.HTTPMaxConnsPerClient}
}

// sizeBudget sets w.budget from the configuration and the agent's limit,
// and says so. It is called once per Run, before the first catalog state
// reaches the loop.
func (w *watch) sizeBudget(ctx context.Context) {
	cfg := w.r.cfg.MaxConcurrentWatches
	a := w.readAgentLimit(ctx)
	n, lowered := watchBudget(cfg, a, openFileLimit())
	w.budget = n
	// Before the first service query: an HTTP/2 transport would otherwise
	// dial a connection for every request that finds the others full.
	w.svcTr.MaxConnsPerHost, w.svcTr.MaxIdleConnsPerHost = n, n
	w.r.m.budget.Set(float64(n))
	log := w.r.log.With("maxConcurrentWatches", n)
	switch {
	case lowered:
		log.Warn("maxConcurrentWatches is past the agent's limits.http_max_conns_per_client (the agent answers 429 to connections past it): lowered to 64 % of the limit",
			"configured", cfg, "agentLimit", a.limit, "otherConnections", extraConns)
	case cfg > 0:
		log.Info("consul watch budget from maxConcurrentWatches", "agentLimit", a.limit, "agentLimitKnown", a.known)
	case a.known:
		log.Info("consul watch budget sized from the agent's limits.http_max_conns_per_client", "agentLimit", a.limit)
	default:
		var se api.StatusError
		hint := ""
		if errors.As(a.err, &se) && se.Code == http.StatusForbidden {
			hint = "; the token needs agent:read for /v1/agent/self"
		}
		log.Info("could not read the agent's limits.http_max_conns_per_client; assuming Consul's default 200"+hint, "err", a.err)
	}
}

// openFileLimit returns the process's soft limit on open files, 0 when
// unknown.
func openFileLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur >= 1<<62 {
		return 0
	}
	return l.Cur
}
