// Package admin is the admin HTTP API of a running gateway: health and
// readiness, metrics, the debug endpoints, the log level, the status page
// and its embedded ui/, behind the access policy of clusters.yaml's
// admin: block (bearer token, client certificates, loopback-only changes).
// The types here are the JSON the API answers; the CLI decodes them too.
//
// It reads the gateway through Gateway, the narrow interface its handlers
// call (package gateway implements it and serves Handler on admin.address).
package admin

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/config"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/ads"
)

// Gateway is what the admin API reads and changes of the running gateway.
type Gateway interface {
	// Ready reports whether the aggregator holds a complete model (every
	// registry synced, failed or past syncTimeout), and if not, why.
	Ready() (bool, string)
	// Serving reports whether the xDS listener accepts streams; Draining,
	// whether the gateway is shutting down.
	Serving() bool
	Draining() bool
	// TrafficReady reports whether the config sources have been read
	// completely (true without any), and if not, why. TrafficNotes names
	// those served without; "" if none.
	TrafficReady() (bool, string)
	TrafficNotes() string
	// LastReload is the outcome of the last reload of clusters.yaml; nil
	// before the first.
	LastReload() *ReloadStatus
	// Registries is the status of every registry, configured and started
	// at runtime; Restarts, how often the supervisor restarted one (0 for
	// an unknown name).
	Registries() []aggregate.RegistryStatus
	Restarts(name string) int
	// Release applies a registry's held-down update now
	// (aggregate.Aggregator.Release).
	Release(ctx context.Context, name string) (aggregate.RegistryStatus, error)
	// Snapshot is the model snapshot served now.
	Snapshot() *model.Snapshot
	// Conflicts lists everything kept from proxies.
	Conflicts() []aggregate.Conflict
	// Configz is /debug/configz; Digest, /debug/digestz.
	Configz() Configz
	Digest() DigestInfo
	// Proxies, ConfigDump and XDSVersion are the xDS server's.
	Proxies() []ads.ProxyStatus
	ConfigDump(proxyID string) ([]byte, bool)
	XDSVersion() uint64
	// Metrics gathers every metric the process exports.
	Metrics() prometheus.Gatherer
}

// Options are the process-level settings of the admin API.
type Options struct {
	Logger *slog.Logger
	// Level is the level of Logger's handler: PUT /debug/loglevel changes
	// it. Nil: a level variable of its own that changes nothing.
	Level *slog.LevelVar
	// Version names the build on the status page.
	Version string
}

// Server is the admin API of one gateway.
type Server struct {
	gw      Gateway
	guard   *adminGuard
	log     *slog.Logger
	level   *slog.LevelVar
	version string
	pprof   bool
}

// New builds the admin API of gw with the access policy of a. It reads
// the token file; it does not call gw.
func New(gw Gateway, a config.Admin, o Options) (*Server, error) {
	guard, err := newAdminGuard(a)
	if err != nil {
		return nil, err
	}
	s := &Server{gw: gw, guard: guard, log: o.Logger, level: o.Level, version: o.Version, pprof: a.Pprof}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.level == nil {
		s.level = new(slog.LevelVar)
	}
	return s, nil
}
