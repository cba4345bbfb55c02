package xds

import (
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// Class is the kind of xDS client a proxy is; each class is served its own
// set of listeners, routes and clusters (endpoints are shared).
type Class string

// Client classes.
const (
	// ClassEnvoy is an Envoy sidecar or gateway (node id sidecar~… or router~…,
	// or any node without GENERATOR=grpc).
	ClassEnvoy Class = "envoy"
	// ClassGRPC is a proxyless gRPC client (node metadata GENERATOR=grpc).
	ClassGRPC Class = "grpc"
)

// Type URLs served by meshfed.
const (
	ClusterType  = resource.ClusterType
	EndpointType = resource.EndpointType
	ListenerType = resource.ListenerType
	RouteType    = resource.RouteType
)

// TypeURLs lists the served type URLs in the order Envoy applies them.
var TypeURLs = []string{ClusterType, EndpointType, ListenerType, RouteType}

// shortType maps a type URL to the short label used in metrics.
func shortType(typeURL string) string {
	switch typeURL {
	case ClusterType:
		return "CDS"
	case EndpointType:
		return "EDS"
	case ListenerType:
		return "LDS"
	case RouteType:
		return "RDS"
	}
	if k := mcpShortType(typeURL); k != "" {
		return k
	}
	return "other"
}

// ClusterName is the cluster (and ClusterLoadAssignment) name of a service
// port, as Istio names it: outbound|<port>||<host>.
func ClusterName(host string, port uint32) string {
	return "outbound|" + strconv.FormatUint(uint64(port), 10) + "||" + host
}

// EnvoyListenerName is the Envoy outbound listener of a port: 0.0.0.0_<port>.
func EnvoyListenerName(port uint32) string {
	return "0.0.0.0_" + strconv.FormatUint(uint64(port), 10)
}

// EnvoyRouteName is the Envoy route configuration of an HTTP port: <port>.
func EnvoyRouteName(port uint32) string {
	return strconv.FormatUint(uint64(port), 10)
}

// GRPCListenerName is the proxyless gRPC listener (and route configuration)
// of a service port: <host>:<port>, the name grpc-go asks for when it dials
// xds:///<host>:<port>.
func GRPCListenerName(host string, port uint32) string {
	return host + ":" + strconv.FormatUint(uint64(port), 10)
}

// ClassifyNode returns the class of a node: ClassGRPC when its metadata has
// GENERATOR=grpc (as Istio's proxyless clients set), ClassEnvoy otherwise.
func ClassifyNode(n *core.Node) Class {
	if v, ok := n.GetMetadata().GetFields()["GENERATOR"]; ok && strings.EqualFold(v.GetStringValue(), "grpc") {
		return ClassGRPC
	}
	return ClassEnvoy
}

// NodeType returns the proxy type of an Istio-style node id
// (<type>~<ip>~<id>~<domain>): "sidecar" or "router"; "" when the id has
// another form.
func NodeType(id string) string {
	parts := strings.Split(id, "~")
	if len(parts) != 4 {
		return ""
	}
	switch parts[0] {
	case "sidecar", "router":
		return parts[0]
	}
	return ""
}
