package consul

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/portplan"
	"github.com/meshfed/meshfed/validate"
)

// Keys read from Consul metadata.
const (
	// metaProtocol in service meta sets the port protocol (http, http2,
	// grpc, tcp), like Consul's service-defaults protocol. Default tcp.
	metaProtocol = "protocol"
)

// Convert turns the health entries of one Consul service (the answer to
// /v1/health/service/<name>, as the API client decodes it) into what a Run
// publishes for it: at most one service, <name lower-cased>.<c.Domain>,
// and the rejections. dc is the configured datacenter, used when a node
// does not name its own. Malformed instances are rejected one by one; the
// rest are kept. It does not modify entries and does no I/O.
func Convert(c registries.Common, dc, name string, entries []*api.ServiceEntry) registries.Converted {
	var out registries.Converted
	host := strings.ToLower(name) + "." + c.Domain
	reject := func(subject, format string, args ...any) {
		out.Rejected = append(out.Rejected, model.Rejection{
			Registry: c.Name, Host: host, Subject: subject, Reason: fmt.Sprintf(format, args...),
		})
	}
	if !validate.Label(strings.ToLower(name)) {
		reject("service "+name, "service name is not a DNS label, so it cannot be a hostname")
		return out
	}

	// Validate each instance and collect the votes for the protocol, which
	// names the one port.
	type valid struct {
		ep   model.Endpoint
		port uint32
		ip   bool
	}
	kept := make([]valid, 0, len(entries))
	protoVotes := map[string]int{}
	for _, e := range entries {
		if e == nil || e.Service == nil || e.Node == nil {
			continue
		}
		s := e.Service
		subject := e.Node.Node + "/" + s.ID
		addr := s.Address
		if addr == "" {
			addr = e.Node.Address
		}
		switch {
		case addr == "":
			reject(subject, "instance has no address (neither service nor node address)")
			continue
		case !validate.Port(int64(s.Port)):
			reject(subject, "instance port %d is out of range 1-65535", s.Port)
			continue
		}
		ip, err := netip.ParseAddr(addr)
		isIP := err == nil
		if isIP {
			addr = ip.String()
		}
		nodeDC := e.Node.Datacenter
		if nodeDC == "" {
			nodeDC = dc
		}
		ep := model.Endpoint{
			Address:  addr,
			Labels:   labels(s.Tags, s.Meta),
			Locality: locality(c.Locality, nodeDC, e.Node.Meta),
			Source:   model.Source{Registry: c.Name, Cluster: c.Name},
			Origin:   subject,
		}
		ep.Health, ep.Weight = health(e.Checks.AggregatedStatus(), s.Weights)
		kept = append(kept, valid{ep: ep, port: uint32(s.Port), ip: isIP})
		protoVotes[strings.ToLower(s.Meta[metaProtocol])]++
	}

	proto, err := model.ParseProtocol(registries.Majority(protoVotes, ""))
	if err != nil {
		proto = model.ProtocolTCP
	}
	portName := strings.ToLower(string(proto))
	planned := make([]portplan.Instance, len(kept))
	for i, v := range kept {
		planned[i] = portplan.Instance{Endpoint: v.ep, IP: v.ip, Ports: map[string]portplan.Port{portName: {Number: v.port, Protocol: proto}}}
	}
	res, ok := portplan.Plan(planned, portplan.Options{}, portplan.Rejects{
		HostnameAmongIPs: func(in portplan.Instance) {
			reject(in.Endpoint.Origin, "address %q is a hostname while other instances use IPs", in.Endpoint.Address)
		},
	})
	if !ok {
		return out
	}
	out.Services = []model.Service{{Hostname: host, Ports: res.Ports, Resolution: res.Resolution, Endpoints: res.Endpoints}}
	return out
}

// labels maps tags and service meta to labels: a "k=v" tag is label k=v, a
// plain tag is label tag="" (present); meta wins over tags on a clash. The
// protocol meta key configures the port and is not a label.
func labels(tags []string, meta map[string]string) map[string]string {
	if len(tags) == 0 && len(meta) == 0 {
		return nil
	}
	l := make(map[string]string, len(tags)+len(meta))
	for _, t := range tags {
		if k, v, ok := strings.Cut(t, "="); ok && k != "" {
			l[k] = v
		} else if t != "" {
			l[t] = ""
		}
	}
	for k, v := range meta {
		if k != metaProtocol {
			l[k] = v
		}
	}
	if len(l) == 0 {
		return nil
	}
	return l
}

// locality: node meta region/zone/subzone win (registries.MetaLocality);
// else the registry's default locality; else the datacenter as region.
func locality(def model.Locality, dc string, nodeMeta map[string]string) model.Locality {
	l := def
	if l.IsZero() {
		l.Region = dc
	}
	return registries.MetaLocality(l, nodeMeta)
}

// health maps Consul's aggregated check status: passing → HEALTHY,
// warning → DEGRADED, critical → UNHEALTHY, maintenance → DRAINING. The
// weight is Consul's passing or warning weight (0, i.e. 1, when unset).
func health(status string, w api.AgentWeights) (model.Health, uint32) {
	switch status {
	case api.HealthPassing:
		return model.Healthy, uint32(max(w.Passing, 0))
	case api.HealthWarning:
		return model.Degraded, uint32(max(w.Warning, 0))
	case api.HealthMaint:
		return model.Draining, 0
	default:
		return model.Unhealthy, 0
	}
}
