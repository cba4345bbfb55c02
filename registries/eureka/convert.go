package eureka

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/hudl/fargo"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// Keys read from instance metadata.
const (
	// metaProtocol sets the protocol of the app's http port (http, http2,
	// grpc, tcp), overriding the registry's protocol; the value most of an
	// app's instances give wins. It is not a label. (Not "protocol":
	// Polaris, a Eureka-compatible server, overwrites that key.)
	metaProtocol = "meshfed.protocol"
	// Keys that set an endpoint's locality; zone is what Spring Cloud's
	// eureka.instance.metadata-map.zone uses.
	metaRegion  = "region"
	metaZone    = "zone"
	metaSubZone = "subzone"
)

// Service port names.
const (
	portHTTP  = "http"  // the instance's port
	portHTTPS = "https" // the instance's securePort, TLS passed through (TCP)
)

var (
	dnsLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	dnsName  = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*\.?$`)
)

// portSet says which of an instance's ports are enabled and valid.
type portSet uint8

const (
	hasHTTP portSet = 1 << iota
	hasHTTPS
)

// convertApp turns the instances of one Eureka app into a service named
// <app-lowercased>.<domain>. Malformed instances are rejected one by one;
// the rest are kept. It does not modify insts.
func convertApp(c registries.Common, cfg *Config, app string, insts []*instance) registries.Converted {
	var out registries.Converted
	name := strings.ToLower(app)
	host := name + "." + c.Domain
	reject := func(subject, format string, args ...any) {
		out.Rejected = append(out.Rejected, model.Rejection{
			Registry: c.Name, Host: host, Subject: subject, Reason: fmt.Sprintf(format, args...),
		})
	}
	if !dnsLabel.MatchString(name) {
		reject("app "+app, "app name is not a DNS label once lowercased, so it cannot be a hostname")
		return out
	}

	type inst struct {
		ep          model.Endpoint
		ports       portSet
		http, https uint32
		ip          bool
	}
	kept := make([]inst, 0, len(insts))
	protoVotes := map[model.Protocol]int{}
	for _, in := range insts {
		subject := in.id()
		if subject == "" {
			subject = "instance without instanceId or hostName"
		}
		if in.problem != "" {
			reject(subject, "%s", in.problem)
			continue
		}
		meta, err := parseMetadata(in.Metadata.Raw)
		if err != nil {
			reject(subject, "%v", err)
			continue
		}
		addr, what := in.IPAddr, "ipAddr"
		if cfg.UseHostName {
			addr, what = in.HostName, "hostName"
		}
		addr = strings.TrimSpace(addr)
		ip, ipErr := netip.ParseAddr(addr)
		switch {
		case addr == "":
			reject(subject, "instance has no %s", what)
			continue
		case !cfg.UseHostName && ipErr != nil:
			reject(subject, "ipAddr %q is not an IP address", addr)
			continue
		case ipErr != nil && !dnsName.MatchString(addr):
			reject(subject, "hostName %q is neither an IP address nor a DNS name", addr)
			continue
		case ipErr == nil:
			addr = ip.String()
		}
		var i inst
		if in.PortEnabled {
			if in.Port <= 0 || in.Port > 65535 {
				reject(subject, "port %d is out of range 1-65535", in.Port)
				continue
			}
			i.ports |= hasHTTP
			i.http = uint32(in.Port)
		}
		if in.SecurePortEnabled {
			if in.SecurePort <= 0 || in.SecurePort > 65535 {
				reject(subject, "securePort %d is out of range 1-65535", in.SecurePort)
				continue
			}
			i.ports |= hasHTTPS
			i.https = uint32(in.SecurePort)
		}
		if i.ports == 0 {
			reject(subject, "instance has no enabled port (port and securePort are both disabled)")
			continue
		}
		if p, err := model.ParseProtocol(meta[metaProtocol]); err == nil {
			protoVotes[p]++
		}
		delete(meta, metaProtocol)
		if len(meta) == 0 {
			meta = nil
		}
		i.ip = ipErr == nil
		i.ep = model.Endpoint{
			Address:  addr,
			Labels:   meta,
			Locality: locality(c.Locality, meta, in.DataCenterInfo),
			Health:   health(in.Status),
			Source:   model.Source{Registry: c.Name, Cluster: c.Name},
			Origin:   subject,
		}
		kept = append(kept, i)
	}

	// An EDS service needs IPs, a DNS one hostnames: when both appear, keep
	// the IPs and reject the hostnames.
	anyIP := slices.ContainsFunc(kept, func(i inst) bool { return i.ip })
	// The app serves every port one of its instances enables, each on the
	// number most of those instances give; an instance that does not
	// enable one of them is marked NotServed on it (left out of that
	// port's endpoints), not rejected.
	final := kept[:0]
	var union portSet
	httpVotes, httpsVotes := map[uint32]int{}, map[uint32]int{}
	for _, i := range kept {
		if anyIP && !i.ip {
			reject(i.ep.Origin, "hostName %q is not an IP address while other instances use IPs", i.ep.Address)
			continue
		}
		union |= i.ports
		if i.ports&hasHTTP != 0 {
			httpVotes[i.http]++
		}
		if i.ports&hasHTTPS != 0 {
			httpsVotes[i.https]++
		}
		final = append(final, i)
	}
	if len(final) == 0 {
		return out
	}

	proto := registries.Majority(protoVotes, cfg.Protocol)
	var ports []model.Port
	if union&hasHTTP != 0 {
		ports = append(ports, model.Port{Name: portHTTP, Number: registries.Majority(httpVotes, 0), Protocol: proto})
	}
	if union&hasHTTPS != 0 {
		// One number cannot be two ports: the secure port takes the most
		// given number that is not the plain port's, and is left out if
		// there is none.
		for _, n := range registries.Ranked(httpsVotes) {
			if union&hasHTTP == 0 || n != ports[0].Number {
				ports = append(ports, model.Port{Name: portHTTPS, Number: n, Protocol: model.ProtocolTCP})
				break
			}
		}
	}

	svc := model.Service{Hostname: host, Ports: ports, Resolution: model.ResolutionEDS}
	if !anyIP {
		svc.Resolution = model.ResolutionDNS
	}
	svc.Endpoints = make([]model.Endpoint, 0, len(final))
	for _, i := range final {
		served := 0
		for _, p := range ports {
			n, has := i.http, i.ports&hasHTTP != 0
			if p.Name == portHTTPS {
				n, has = i.https, i.ports&hasHTTPS != 0
			}
			if !has {
				n = model.NotServed
			} else {
				served++
			}
			if n != p.Number {
				if i.ep.Ports == nil {
					i.ep.Ports = map[string]uint32{}
				}
				i.ep.Ports[p.Name] = n
			}
		}
		if served == 0 {
			reject(i.ep.Origin, "instance enables only securePort %d, the number of the app's port", i.https)
			continue
		}
		svc.Endpoints = append(svc.Endpoints, i.ep)
	}
	if len(svc.Endpoints) == 0 {
		return out
	}
	slices.SortFunc(svc.Endpoints, func(a, b model.Endpoint) int { return strings.Compare(a.Origin, b.Origin) })
	out.Services = []model.Service{svc}
	return out
}

// health maps Eureka's status: UP → HEALTHY; OUT_OF_SERVICE → DRAINING
// (taken out on purpose, e.g. before a deploy); DOWN, STARTING, UNKNOWN
// and anything else → UNHEALTHY.
func health(s fargo.StatusType) model.Health {
	switch fargo.StatusType(strings.ToUpper(string(s))) {
	case fargo.UP:
		return model.Healthy
	case fargo.OUTOFSERVICE:
		return model.Draining
	default:
		return model.Unhealthy
	}
}

// locality starts from the registry's default locality; on AWS
// (dataCenterInfo Amazon) the availability zone sets zone and region
// (us-east-1a → us-east-1/us-east-1a); metadata region, zone and subzone
// win over both.
func locality(def model.Locality, meta map[string]string, dci fargo.DataCenterInfo) model.Locality {
	l := def
	if az := dci.Metadata.AvailabilityZone; dci.Name == fargo.Amazon && az != "" {
		l.Zone = az
		if r := strings.TrimRight(az, "abcdefghijklmnopqrstuvwxyz"); r != "" {
			l.Region = r
		}
	}
	if v := meta[metaRegion]; v != "" {
		l.Region = v
	}
	if v := meta[metaZone]; v != "" {
		l.Zone = v
	}
	if v := meta[metaSubZone]; v != "" {
		l.SubZone = v
	}
	return l
}
