package translate

import (
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/meshfed/meshfed/xds/ads"
)

// Class is the kind of xDS client a proxy is; each class is served its own
// set of listeners, routes and clusters (endpoints are shared).
type Class = ads.Class

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

// TypeLabel is the metrics label of a type URL: CDS, EDS, LDS or RDS, the
// Kind of an MCP collection (ServiceEntry), "other" for any other.
func TypeLabel(typeURL string) string { return shortType(typeURL) }

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

// ShortType is CDS, EDS, LDS or RDS for the four Envoy type URLs,
// <version>/<Kind> for Istio's MCP collections (v1/ServiceEntry), the type
// URL's last element otherwise.
func ShortType(typeURL string) string {
	if s := shortType(typeURL); s != "other" {
		return s
	}
	if g, rest, ok := strings.Cut(typeURL, "/"); ok && !strings.Contains(g, "googleapis") {
		return rest
	}
	if i := strings.LastIndex(typeURL, "."); i >= 0 {
		return typeURL[i+1:]
	}
	return typeURL
}
