package nacos

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/portplan"
	"github.com/meshfed/meshfed/validate"
)

// instance is one Nacos instance as both the gRPC API (serviceInfo.hosts)
// and the 1.x open API (/ns/instance/list hosts) spell it.
type instance struct {
	InstanceID  string            `json:"instanceId"`
	IP          string            `json:"ip"`
	Port        int64             `json:"port"`
	Weight      float64           `json:"weight"`
	Healthy     *bool             `json:"healthy"` // absent: true
	Enabled     *bool             `json:"enabled"` // absent: true
	Ephemeral   bool              `json:"ephemeral"`
	ClusterName string            `json:"clusterName"`
	ServiceName string            `json:"serviceName"`
	Metadata    map[string]string `json:"metadata"`
}

// id names an instance in rejections and endpoint origins: ip:port, and
// the server's instanceId when it gives one.
func (in *instance) id() string {
	s := net.JoinHostPort(in.IP, strconv.FormatInt(in.Port, 10))
	if in.InstanceID != "" {
		s += " (" + in.InstanceID + ")"
	}
	return s
}

// Metadata keys read from instances, and the labels meshfed adds.
const (
	// metaProtocol sets the protocol of the instance's port (http, http2,
	// grpc, tcp), overriding what other keys say.
	metaProtocol = "meshfed.protocol"
	// metaNacosProtocol is the protocol Dubbo (dubbo, tri, rest) and
	// others declare.
	metaNacosProtocol = "protocol"
	// metaGRPCPort is the extra gRPC port grpc-spring-boot-starter
	// declares next to a Spring Boot app's HTTP port (gRPC_port; gRPC.port
	// in some versions).
	metaGRPCPort    = "gRPC_port"
	metaGRPCPortDot = "gRPC.port"
	// metaDubboEndpoints is Dubbo 3's list of every protocol an
	// application instance serves: [{"port":20880,"protocol":"dubbo"}].
	metaDubboEndpoints = "dubbo.endpoints"
	// metaSecure is Spring Cloud Alibaba's flag for an https port.
	metaSecure = "secure"
	// polarisInternal prefixes metadata that Polaris, a Nacos-compatible
	// server, adds to every instance; it is not the user's and not a label.
	polarisInternal = "internal-nacos-"

	// labelCluster carries the instance's Nacos cluster name, labelEphemeral
	// whether it is ephemeral (heartbeat-bound) or persistent.
	labelCluster   = "nacos.cluster"
	labelEphemeral = "nacos.ephemeral"
)

// weightScale turns Nacos' decimal weights (0-10000, default 1.0) into
// integer load-balancing weights keeping two decimals: 1.0 → 100, 0.5 → 50.
const weightScale = 100

// hostname returns the hostname of a Nacos service: <service>.<domain> in
// DEFAULT_GROUP, <service>.<group>.<domain> in other groups, lowercased;
// or why there is none. Names are never rewritten beyond lowercasing: a
// name that is not a DNS label is refused, not mangled into one that could
// collide with another service's.
func hostname(domain, group, service string) (string, error) {
	s := strings.ToLower(service)
	if !validate.Label(s) {
		return "", fmt.Errorf("service name %q is not a DNS label once lowercased (letters, digits and '-', at most 63), so it cannot be a hostname", service)
	}
	if group == DefaultGroup {
		return s + "." + domain, nil
	}
	g := strings.ToLower(group)
	if !validate.Label(g) {
		return "", fmt.Errorf("group name %q is not a DNS label once lowercased, so it cannot be part of a hostname", group)
	}
	return s + "." + g + "." + domain, nil
}

// serviceKey names a Nacos service within a namespace.
type serviceKey struct{ group, name string }

func (k serviceKey) String() string { return k.group + "@@" + k.name }

func compareKeys(a, b serviceKey) int {
	return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.name, b.name))
}

// Convert applies answers in order, as a Run applies the instance lists it
// receives, and returns the state a Run publishes then: each service
// converted (hostname <name>.<group>.<c.Domain>, DEFAULT_GROUP left out),
// services whose hostnames collide rejected, and every rejection. Each
// answer is one service's instance list as Nacos sends it (subscription
// answers, pushes and /v1/ns/instance/list share the JSON: name,
// groupName, hosts, lastRefTime); it is applied to the service it names
// (an empty groupName is DEFAULT_GROUP), and ignored when its lastRefTime
// is older than that of a list already applied to that service. cfg is
// the `nacos:` block after ApplyDefaults. An answer that does not decode
// is an error: a Run refuses it as a whole. It does no I/O.
func Convert(c registries.Common, cfg Config, answers ...[]byte) ([]model.Service, []model.Rejection, error) {
	st := newState(&Registry{cfg: cfg, common: c}, nil)
	for _, b := range answers {
		var info serviceInfo
		if err := json.Unmarshal(b, &info); err != nil {
			return nil, nil, fmt.Errorf("decode service info: %w", err)
		}
		key := serviceKey{group: cmp.Or(info.GroupName, DefaultGroup), name: info.Name}
		st.set(key, info.Hosts, info.LastRefTime)
	}
	services, rejected := st.pub.State()
	return services, rejected, nil
}

// convertService turns the instances of one Nacos service into a service.
// Malformed instances are rejected one by one; the rest are kept. It does
// not modify insts.
func convertService(c registries.Common, cfg *Config, key serviceKey, insts []instance) registries.Converted {
	var out registries.Converted
	host, err := hostname(c.Domain, key.group, key.name)
	subjectSvc := "service " + key.String()
	reject := func(subject, format string, args ...any) {
		out.Rejected = append(out.Rejected, model.Rejection{
			Registry: c.Name, Host: host, Subject: subject, Reason: fmt.Sprintf(format, args...),
		})
	}
	if err != nil {
		reject(subjectSvc, "%v", err)
		return out
	}

	planned := make([]portplan.Instance, 0, len(insts))
	for i := range insts {
		in := &insts[i]
		subject := in.id()
		addr := strings.TrimSpace(in.IP)
		ip, ipErr := netip.ParseAddr(addr)
		switch {
		case addr == "":
			reject(subject, "instance has no ip")
			continue
		case ipErr != nil && !validate.Hostname(addr):
			reject(subject, "ip %q is neither an IP address nor a DNS name", addr)
			continue
		case ipErr == nil:
			addr = ip.Unmap().String()
		}
		if !validate.Port(in.Port) {
			reject(subject, "port %d is out of range 1-65535", in.Port)
			continue
		}
		if math.IsNaN(in.Weight) || in.Weight < 0 {
			reject(subject, "weight %v is negative", in.Weight)
			continue
		}
		ports, labels, err := instancePorts(cfg, in)
		if err != nil {
			reject(subject, "%v", err)
			continue
		}
		if in.ClusterName != "" {
			labels[labelCluster] = in.ClusterName
		}
		labels[labelEphemeral] = strconv.FormatBool(in.Ephemeral)
		h, w := health(in)
		planned = append(planned, portplan.Instance{
			IP:    ipErr == nil,
			Ports: ports,
			Endpoint: model.Endpoint{
				Address:  addr,
				Labels:   labels,
				Locality: registries.MetaLocality(c.Locality, in.Metadata),
				Weight:   w,
				Health:   h,
				Source:   model.Source{Registry: c.Name, Cluster: c.Name},
				Origin:   subject,
			},
		})
	}

	// The service serves every port name one of its instances declares; a
	// port declared by more instances picks its number first.
	res, ok := portplan.Plan(planned, portplan.Options{
		ByUse:        true,
		SortByNumber: true,
		Protocol:     func(string) model.Protocol { return cfg.Protocol },
	}, portplan.Rejects{
		HostnameAmongIPs: func(in portplan.Instance) {
			reject(in.Endpoint.Origin, "ip %q is a hostname while other instances use IP addresses", in.Endpoint.Address)
		},
		ServesNoPort: func(in portplan.Instance) {
			reject(in.Endpoint.Origin, "instance serves none of the service's ports (its port numbers are taken by other ports)")
		},
	})
	if !ok {
		return out
	}
	out.Services = []model.Service{{Hostname: host, Ports: res.Ports, Resolution: res.Resolution, Endpoints: res.Endpoints}}
	return out
}

// instancePorts reads the ports an instance serves and returns them by
// port name with the instance's labels (its metadata without the keys
// meshfed consumed).
//
//   - The instance's port is named after its protocol: meshfed.protocol
//     if set; else the metadata protocol (Dubbo: dubbo → TCP, tri → GRPC;
//     grpc, http, http2/h2c; rest → HTTP; others → TCP), named as
//     declared; else https (TCP) when secure=true (Spring Cloud); else the
//     registry's protocol.
//   - gRPC_port (or gRPC.port) adds a port grpc (GRPC).
//   - dubbo.endpoints adds one port per protocol it lists.
func instancePorts(cfg *Config, in *instance) (map[string]portplan.Port, map[string]string, error) {
	meta := in.Metadata
	labels := make(map[string]string, len(meta)+2)
	for k, v := range meta {
		switch {
		case k == metaProtocol, k == metaGRPCPort, k == metaGRPCPortDot, k == metaDubboEndpoints:
		case strings.HasPrefix(k, polarisInternal):
		default:
			labels[k] = v
		}
	}
	ports := map[string]portplan.Port{}
	main := portplan.Port{Number: uint32(in.Port), Protocol: cfg.Protocol}
	name := strings.ToLower(string(cfg.Protocol))
	if v := meta[metaProtocol]; v != "" {
		p, err := model.ParseProtocol(v)
		if err != nil {
			return nil, nil, fmt.Errorf("metadata %s: %v", metaProtocol, err)
		}
		main.Protocol, name = p, strings.ToLower(string(p))
	} else if v := strings.ToLower(strings.TrimSpace(meta[metaNacosProtocol])); v != "" {
		main.Protocol = declaredProtocol(v)
		name = v
		if !validate.Label(name) {
			name = strings.ToLower(string(main.Protocol))
		}
	} else if strings.EqualFold(meta[metaSecure], "true") {
		main.Protocol, name = model.ProtocolTCP, "https"
	}
	ports[name] = main

	for _, k := range []string{metaGRPCPort, metaGRPCPortDot} {
		v := meta[k]
		if v == "" {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 16)
		if err != nil || n == 0 {
			return nil, nil, fmt.Errorf("metadata %s %q is not a port number 1-65535", k, v)
		}
		if _, dup := ports["grpc"]; !dup {
			ports["grpc"] = portplan.Port{Number: uint32(n), Protocol: model.ProtocolGRPC}
		}
		break
	}

	if v := meta[metaDubboEndpoints]; v != "" {
		var eps []struct {
			Port     int64  `json:"port"`
			Protocol string `json:"protocol"`
		}
		if err := json.Unmarshal([]byte(v), &eps); err != nil {
			return nil, nil, fmt.Errorf("metadata %s is not a JSON list of {port, protocol}: %v", metaDubboEndpoints, err)
		}
		for _, e := range eps {
			pn := strings.ToLower(strings.TrimSpace(e.Protocol))
			if !validate.Port(e.Port) || !validate.Label(pn) {
				return nil, nil, fmt.Errorf("metadata %s: entry {port: %d, protocol: %q} needs a port 1-65535 and a protocol name", metaDubboEndpoints, e.Port, e.Protocol)
			}
			if _, dup := ports[pn]; !dup {
				ports[pn] = portplan.Port{Number: uint32(e.Port), Protocol: declaredProtocol(pn)}
			}
		}
	}
	// One number cannot be two ports of one instance: the first declared
	// (the instance port, then gRPC, then Dubbo's) keeps it.
	seen := map[uint32]string{}
	for _, n := range append([]string{name}, slices.Sorted(maps.Keys(ports))...) {
		p, ok := ports[n]
		if !ok {
			continue
		}
		if other, dup := seen[p.Number]; dup && other != n {
			delete(ports, n)
			continue
		}
		seen[p.Number] = n
	}
	return ports, labels, nil
}

// declaredProtocol maps a protocol name from instance metadata to a port
// protocol: Dubbo's triple is gRPC-compatible; names that are not HTTP or
// gRPC are passed through as TCP.
func declaredProtocol(name string) model.Protocol {
	switch name {
	case "grpc", "tri", "triple":
		return model.ProtocolGRPC
	case "http", "rest":
		return model.ProtocolHTTP
	case "http2", "h2c", "h2":
		return model.ProtocolHTTP2
	default:
		return model.ProtocolTCP
	}
}

// health maps an instance's state: enabled=false → DRAINING (taken out of
// service on purpose); healthy=false → UNHEALTHY; weight 0 → DRAINING
// (Nacos clients send nothing to it); else HEALTHY. The weight is Nacos'
// times weightScale, at least 1.
func health(in *instance) (model.Health, uint32) {
	w := uint32(max(1, min(math.Round(in.Weight*weightScale), 10000*weightScale)))
	switch {
	case in.Enabled != nil && !*in.Enabled:
		return model.Draining, w
	case in.Healthy != nil && !*in.Healthy:
		return model.Unhealthy, w
	case in.Weight == 0:
		return model.Draining, w
	}
	return model.Healthy, w
}

// assemble builds the published lists from every service's conversion,
// in key order (the Publisher's Assemble). Services whose hostnames
// collide (names that differ only in case) are all rejected: choosing one
// would hide the other.
func assemble(c registries.Common, entries []registries.Entry[serviceKey]) ([]model.Service, []model.Rejection) {
	byHost := map[string][]serviceKey{}
	for _, e := range entries {
		if e.OK() {
			h := e.Service().Hostname
			byHost[h] = append(byHost[h], e.Key)
		}
	}
	services := make([]model.Service, 0, len(entries))
	var rejected []model.Rejection
	for _, e := range entries {
		rejected = append(rejected, e.Rejected...)
		if !e.OK() {
			continue
		}
		host := e.Service().Hostname
		if same := byHost[host]; len(same) > 1 {
			var others []string
			for _, o := range same {
				if o != e.Key {
					others = append(others, o.String())
				}
			}
			rejected = append(rejected, model.Rejection{
				Registry: c.Name, Host: host, Subject: "service " + e.Key.String(),
				Reason: fmt.Sprintf("hostname collides with service %s (names differ only in case); neither is served", strings.Join(others, ", ")),
			})
			continue
		}
		services = append(services, e.Services...)
	}
	return services, rejected
}
