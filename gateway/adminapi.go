package gateway

// What the admin API (package admin) reads and changes of the gateway:
// Gateway implements admin.Gateway.

import (
	"context"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/aggregate"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/ads"
)

var _ admin.Gateway = (*Gateway)(nil)

// Handler serves the admin API and the status page (package admin) of g,
// behind the access policy of admin:.
func (g *Gateway) Handler() http.Handler { return g.admin.Handler() }

// Ready reports whether the aggregator holds a complete model, and if not,
// why (aggregate.Aggregator.Ready).
func (g *Gateway) Ready() (bool, string) { return g.agg.Ready() }

// Serving reports whether the xDS listener accepts streams.
func (g *Gateway) Serving() bool { return g.serving.Load() }

// Draining reports whether Run is shutting down.
func (g *Gateway) Draining() bool { return g.draining.Load() }

// TrafficReady reports whether the config sources have been read
// completely, and if not, why; true without configSources.
func (g *Gateway) TrafficReady() (bool, string) {
	if g.traffic == nil {
		return true, ""
	}
	return g.traffic.Ready()
}

// Registries returns the status of every registry, configured and started
// at runtime.
func (g *Gateway) Registries() []aggregate.RegistryStatus { return g.agg.Registries() }

// Restarts returns how often the supervisor restarted the registry name; 0
// for an unknown one.
func (g *Gateway) Restarts(name string) int {
	if r, ok := g.runner(name); ok {
		return r.Restarts()
	}
	return 0
}

// Release applies a registry's held-down update now
// (aggregate.Aggregator.Release).
func (g *Gateway) Release(ctx context.Context, name string) (aggregate.RegistryStatus, error) {
	return g.agg.Release(ctx, name)
}

// Snapshot returns the model snapshot served now.
func (g *Gateway) Snapshot() *model.Snapshot { return g.agg.Snapshot() }

// Proxies returns the sync status of every connected proxy.
func (g *Gateway) Proxies() []ads.ProxyStatus { return g.xds.Proxies() }

// ConfigDump returns the resources last sent to the proxy with this ID, as
// JSON; false if none is connected.
func (g *Gateway) ConfigDump(proxyID string) ([]byte, bool) { return g.xds.ConfigDump(proxyID) }

// XDSVersion returns the version of the snapshot the xDS server serves.
func (g *Gateway) XDSVersion() uint64 { return g.xds.Version() }

// Metrics returns the registry of every metric the process exports.
func (g *Gateway) Metrics() prometheus.Gatherer { return g.metrics }

// Conflicts lists everything kept from proxies: what the aggregator
// rejected or quarantined, then what translation could not serve.
func (g *Gateway) Conflicts() []aggregate.Conflict {
	out := nonNil(g.agg.Conflicts())
	for _, s := range g.xds.Skipped() {
		out = append(out, aggregate.Conflict{
			Rejection: model.Rejection{Host: s.Host, Subject: "port " + strconv.FormatUint(uint64(s.Port), 10), Reason: s.Reason},
			Category:  CategoryXDSSkipped,
		})
	}
	for _, i := range g.xds.Invalid() {
		out = append(out, aggregate.Conflict{
			Rejection: model.Rejection{Host: i.Host, Reason: i.Error},
			Category:  CategoryXDSInvalid,
		})
	}
	return out
}

// Conflict categories added by the xDS translation, beside the aggregator's.
const (
	CategoryXDSSkipped = "xds-skipped" // a TCP port another service owns on Envoy listeners
	CategoryXDSInvalid = "xds-invalid" // resources that failed validation; the service is not served
)

// nonNil makes empty lists encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
