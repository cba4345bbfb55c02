package gateway

import "github.com/meshfed/meshfed/admin"

// Configz returns /debug/configz.
func (g *Gateway) Configz() admin.Configz {
	cz := admin.Configz{Status: g.TrafficConfig(), NotForClients: g.xds.TrafficNotes(), Specs: []admin.ObjectSpec{}}
	if g.traffic != nil {
		cz.Specs = admin.ObjectSpecs(g.traffic.Snapshot().Objects())
	}
	return cz
}
