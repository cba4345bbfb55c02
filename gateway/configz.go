package gateway

import "github.com/meshfed/meshfed/admin"

// Configz returns /debug/configz.
func (g *Gateway) Configz() admin.Configz {
	return admin.Configz{Status: g.TrafficConfig(), NotForClients: g.xds.TrafficNotes()}
}
