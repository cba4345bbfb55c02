package eureka

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"strings"

	"github.com/hudl/fargo"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/pack"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/portplan"
	"github.com/meshfed/meshfed/validate"
)

// Keys read from instance metadata.
const (
	// metaProtocol sets the protocol of the app's http port (http, http2,
	// grpc, tcp), overriding the registry's protocol; the value most of an
	// app's instances give wins. It is not a label. (Not "protocol":
	// Polaris, a Eureka-compatible server, overwrites that key.)
	metaProtocol = "meshfed.protocol"
)

// Service port names.
const (
	portHTTP  = "http"  // the instance's port
	portHTTPS = "https" // the instance's securePort, TLS passed through (TCP)
)

// Convert decodes an /apps answer (JSON or XML, told apart by its first
// byte, as a Run does) and converts it as a full fetch: it returns the
// state a Run publishes after that fetch, each app a service named
// <app-lowercased>.<c.Domain> (or none), and every rejection. cfg is the
// `eureka:` block after ApplyDefaults. An answer that does not decode is
// an error, as it is for a Run (which then keeps its last good state). It
// does no I/O.
func Convert(c registries.Common, cfg Config, body []byte) ([]model.Service, []model.Rejection, error) {
	p, err := decodePayload(body)
	if err != nil {
		return nil, nil, err
	}
	w := newWatch(&Registry{cfg: cfg, common: c}, nil)
	w.applyFull(p)
	services, rejected := w.pub.State()
	return services, rejected, nil
}

// convertApp turns the instances of one Eureka app into a service named
// <app-lowercased>.<domain>, in three steps: validate each instance,
// decide which ports it serves, and materialise the service with the
// shared port plan. Malformed instances are rejected one by one; the rest
// are kept. It does not modify insts, and what it returns holds none of
// their strings (the state's records share them: state.go). Metadata is
// parsed through memo (nil: each instance's apart).
func convertApp(c registries.Common, cfg *Config, app string, insts []*instance, memo metaMemo) registries.Converted {
	var out registries.Converted
	name := strings.ToLower(app)
	host := name + "." + c.Domain
	reject := func(subject, format string, args ...any) {
		out.Rejected = append(out.Rejected, model.Rejection{
			Registry: c.Name, Host: host, Subject: strings.Clone(subject), Reason: fmt.Sprintf(format, args...),
		})
	}
	if !validate.Label(name) {
		reject("app "+app, "app name is not a DNS label once lowercased, so it cannot be a hostname")
		return out
	}
	planned := make([]portplan.Instance, 0, len(insts))
	for _, in := range insts {
		v, err := validateInstance(cfg, in, memo)
		if err != nil {
			reject(v.subject, "%s", err)
			continue
		}
		planned = append(planned, decide(c, v))
	}
	res, ok := portplan.Plan(planned, portplan.Options{
		Protocol: func(string) model.Protocol { return cfg.Protocol },
	}, portplan.Rejects{
		HostnameAmongIPs: func(in portplan.Instance) {
			reject(in.Endpoint.Origin, "hostName %q is not an IP address while other instances use IPs", in.Endpoint.Address)
		},
		ServesNoPort: func(in portplan.Instance) {
			reject(in.Endpoint.Origin, "instance enables only securePort %d, the number of the app's port", in.Ports[portHTTPS].Number)
		},
	})
	if !ok {
		return out
	}
	// With the registry's defaults (weight) set here, the Publisher keeps
	// these endpoints instead of copies (Common.FillDefaults: a copy
	// leaves the original among the heap's live objects as garbage of
	// the same size). The strings an endpoint may take from its instance
	// (origin, host name, AWS zone) are copied into one allocation per
	// app.
	kept := make([]*string, 0, 4*len(res.Endpoints))
	for i := range res.Endpoints {
		e := &res.Endpoints[i]
		*e = c.EndpointDefaults(*e)
		kept = append(kept, &e.Origin, &e.Address, &e.Locality.Region, &e.Locality.Zone)
	}
	pack.Strings(kept...)
	out.Services = []model.Service{{Hostname: host, Ports: res.Ports, Resolution: res.Resolution, Endpoints: res.Endpoints}}
	return out
}

// valid is an instance that passed validateInstance.
type valid struct {
	in      *instance
	subject string            // names the instance in rejections and origins
	addr    string            // canonical if an IP
	ip      bool              // addr is an IP address
	meta    map[string]string // metadata, parsed; shared, not to be modified
}

// validateInstance checks one instance: metadata (parsed through memo),
// address (ipAddr, or hostName with useHostName) and enabled ports. The
// error says why it is rejected.
func validateInstance(cfg *Config, in *instance, memo metaMemo) (valid, error) {
	v := valid{in: in, subject: in.id()}
	if v.subject == "" {
		v.subject = "instance without instanceId or hostName"
	}
	if p := in.rareOf().problem; p != "" {
		return v, errors.New(p)
	}
	meta, err := memo.parse(in.Metadata)
	if err != nil {
		return v, err
	}
	v.meta = meta
	addr, what := in.IPAddr, "ipAddr"
	if cfg.UseHostName {
		addr, what = in.HostName, "hostName"
	}
	addr = strings.TrimSpace(addr)
	ip, ipErr := netip.ParseAddr(addr)
	switch {
	case addr == "":
		return v, fmt.Errorf("instance has no %s", what)
	case !cfg.UseHostName && ipErr != nil:
		return v, fmt.Errorf("ipAddr %q is not an IP address", addr)
	case ipErr != nil && !validate.Hostname(addr):
		return v, fmt.Errorf("hostName %q is neither an IP address nor a DNS name", addr)
	case ipErr == nil:
		addr = ip.String()
	}
	v.addr, v.ip = addr, ipErr == nil
	if in.PortEnabled && !validate.Port(int64(in.Port)) {
		return v, fmt.Errorf("port %d is out of range 1-65535", in.Port)
	}
	if in.SecurePortEnabled && !validate.Port(int64(in.SecurePort)) {
		return v, fmt.Errorf("securePort %d is out of range 1-65535", in.SecurePort)
	}
	if !in.PortEnabled && !in.SecurePortEnabled {
		return v, errors.New("instance has no enabled port (port and securePort are both disabled)")
	}
	return v, nil
}

// decide says what a valid instance serves: its port as http (with its
// meshfed.protocol as the vote for the port's protocol), its securePort
// as https (TCP, TLS passed through), and its endpoint.
func decide(c registries.Common, v valid) portplan.Instance {
	in := v.in
	ports := map[string]portplan.Port{}
	if in.PortEnabled {
		p := portplan.Port{Number: uint32(in.Port)}
		if s := v.meta[metaProtocol]; s != "" {
			if proto, err := model.ParseProtocol(s); err == nil {
				p.Protocol = proto
			}
		}
		ports[portHTTP] = p
	}
	if in.SecurePortEnabled {
		ports[portHTTPS] = portplan.Port{Number: uint32(in.SecurePort), Protocol: model.ProtocolTCP}
	}
	labels := v.meta // shared: published labels are never modified
	if _, ok := labels[metaProtocol]; ok {
		labels = maps.Clone(labels)
		delete(labels, metaProtocol)
	}
	if len(labels) == 0 {
		labels = nil
	}
	return portplan.Instance{
		IP:    v.ip,
		Ports: ports,
		Endpoint: model.Endpoint{
			Address:  v.addr,
			Labels:   labels,
			Locality: locality(c.Locality, labels, in.rareOf().zone),
			Health:   health(in.Status),
			Source:   model.Source{Registry: c.Name, Cluster: c.Name},
			Origin:   v.subject,
		},
	}
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
// win over both (registries.MetaLocality).
func locality(def model.Locality, meta map[string]string, awsZone string) model.Locality {
	l := def
	if az := awsZone; az != "" {
		l.Zone = az
		if r := strings.TrimRight(az, "abcdefghijklmnopqrstuvwxyz"); r != "" {
			l.Region = r
		}
	}
	return registries.MetaLocality(l, meta)
}

// metaMemo parses each distinct metadata once for a batch of conversions
// (the apps one fetch changed: instances alike carry the same metadata,
// held once by the state, settle). The maps it returns are shared and
// never modified. A nil metaMemo parses every call.
type metaMemo map[string]parsedMeta

type parsedMeta struct {
	m   map[string]string
	err error
}

func (mm metaMemo) parse(raw string) (map[string]string, error) {
	if p, ok := mm[raw]; ok {
		return p.m, p.err
	}
	m, err := parseMetadata([]byte(raw))
	if mm != nil {
		mm[raw] = parsedMeta{m, err}
	}
	return m, err
}
