package federation

import (
	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/xds/translate"
)

// Configz is /debug/configz: the traffic objects in force and rejected
// (istioconfig.Status), and what of the objects in force a client kind is
// not sent because it does not implement it (docs/architecture.md §3.6).
type Configz struct {
	istioconfig.Status
	// NotForClients lists, per host, parts of the rules in force that a
	// client kind does not get: proxyless gRPC (TLS origination from files,
	// cookie hashing, rewrites...), and Envoy (matches on the calling
	// workload's labels).
	NotForClients []translate.TrafficNote `json:"notForClients"`
}

// Configz returns /debug/configz.
func (g *Gateway) Configz() Configz {
	return Configz{Status: g.TrafficConfig(), NotForClients: g.xds.TrafficNotes()}
}
