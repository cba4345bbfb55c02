// Package zookeeper is the registry for services kept in Apache ZooKeeper,
// in one of two layouts: Apache Curator's ServiceDiscovery (as Spring Cloud
// Zookeeper and Dubbo 3 application-level discovery write it) or Dubbo's
// interface-level providers. It watches the tree (child and data watches,
// re-armed on every event), never polls, and publishes the full state after
// each coalesced change.
//
// # Cost of a change
//
// A watch event re-reads the znodes it names (a service's children, one
// instance's data), never the tree; an instance already read is kept. Each
// service is one key of the Publisher (docs/architecture.md §3.1.1), and
// only the services an event touched are converted again and compared
// with their last conversion: one instance created among 10,000 services
// converts one service. A resync after a reconnection reads everything
// (watches may be lost) but converts only the services whose znodes read
// differently. Unchanged services keep their published values, so the
// aggregator finds them unchanged without a deep comparison.
//
// # Files
//
// zookeeper.go runs a Registry; session.go follows the client's session
// and events and drives the loop (authenticate, resync, re-read, publish);
// tree.go reads the tree with watches and keeps it; resolve.go resolves
// instance hostnames (under the Run's context); convert.go turns znodes
// into instances and the tree into services with the shared port plan.
package zookeeper

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/meshfed/meshfed/registries"
)

// Registry watches one ZooKeeper ensemble. Run may be called again after
// it returned, never twice at once.
type Registry struct {
	cfg    Config
	common registries.Common
	log    *slog.Logger
	m      *metrics

	// Coalescing of watch events (registries.Debouncer): a state is
	// published once no change came for quiet, or maxWait after the first
	// unpublished change.
	quiet, maxWait time.Duration
	// lookup resolves instance hostnames (net.DefaultResolver.LookupHost).
	lookup        func(ctx context.Context, host string) ([]string, error)
	lookupTimeout time.Duration
	// reconnect paces dials after failed ones, on top of the client's own
	// one-second pause after each round over the servers.
	reconnect registries.Backoff

	// conversions counts the services converted (and compared with their
	// last conversion) by every Run: one per service a change touched,
	// not one per service in the tree. For tests and diagnostics.
	conversions atomic.Uint64
}

var _ registries.Registry = (*Registry)(nil)

func newRegistry(c registries.Common, cfg Config, log *slog.Logger) *Registry {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Registry{
		cfg:           cfg,
		common:        c,
		log:           log,
		m:             newMetrics(c.Name),
		quiet:         time.Millisecond,
		maxWait:       100 * time.Millisecond,
		lookup:        net.DefaultResolver.LookupHost,
		lookupTimeout: 2 * time.Second,
		reconnect:     registries.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second},
	}
}

// Run implements registries.Registry. It connects, reads the whole tree
// with watches, publishes it, and then follows watch events. When the
// connection drops it reports Degraded at once and publishes nothing until
// it has a session again and has re-read the whole tree. It returns only
// when ctx ends, or with a Permanent error for a bad auth file or a root
// it is not allowed to read.
func (r *Registry) Run(ctx context.Context, sink registries.Sink) error {
	auth, err := r.readAuth()
	if err != nil {
		return registries.Permanent(err)
	}
	q := &eventQueue{signal: make(chan struct{}, 1)}
	d := &dialer{q: q, backoff: r.reconnect, done: make(chan struct{})}
	conn, events, err := zk.Connect(r.cfg.Servers, r.cfg.SessionTimeout.Std(),
		zk.WithLogger(zkLogger{r.log}), zk.WithLogInfo(false),
		zk.WithEventCallback(q.push), zk.WithDialer(d.dial))
	if err != nil {
		return fmt.Errorf("zookeeper %s: %w", strings.Join(r.cfg.Servers, ","), err)
	}
	// Closing the connection fails pending requests, so a loop blocked in
	// one returns promptly when ctx ends.
	stop := context.AfterFunc(ctx, func() { close(d.done); conn.Close() })
	defer func() {
		if stop() {
			close(d.done)
			conn.Close()
		}
		for range events { // closed once the client's goroutines are done
		}
		r.m.connected.Set(0)
	}()
	w := &watcher{
		ctx: ctx, r: r, conn: conn, q: q, auth: auth,
		dirty:         map[string]bool{},
		deb:           registries.Debouncer{Quiet: r.quiet, MaxWait: r.maxWait},
		armed:         map[watchKey]bool{},
		resyncBackoff: registries.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second},
		addrCache:     map[string]addrResult{},
	}
	w.pub = registries.NewPublisher(r.common, sink, r.log, registries.PublisherOptions[svcKey]{Compare: compareKeys})
	w.claims = newClaims(r.common, func(k svcKey, c registries.Converted) { w.pub.Set(k, c) }, func(k svcKey) { w.pub.Delete(k) })
	return w.loop(ctx)
}

// readAuth reads the digest credentials; nil without an auth file.
func (r *Registry) readAuth() ([]byte, error) {
	if r.cfg.AuthFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(r.cfg.AuthFile)
	if err != nil {
		return nil, fmt.Errorf("zookeeper auth file: %w", err)
	}
	b = []byte(strings.TrimSpace(string(b)))
	user, _, ok := strings.Cut(string(b), ":")
	if !ok || user == "" {
		return nil, fmt.Errorf("zookeeper auth file %s: want one line user:password", r.cfg.AuthFile)
	}
	return b, nil
}
