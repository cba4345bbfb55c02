package translate

import (
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/istioconfig"
)

// envoyRouteConfig is the Envoy route configuration of a port holding
// vhosts. Its max_direct_response_body_size_bytes is the directResponse
// body limit the config validation enforces (1 MiB, as Istio sets it):
// Envoy's default, 4 KiB, would make one VirtualService with a larger body
// block every route update of every host on the port. proxyless gRPC route
// configurations carry no body (a direct response there is its status) and
// grpc-go does not read the field.
func envoyRouteConfig(port uint32, vhosts ...*route.VirtualHost) *route.RouteConfiguration {
	return &route.RouteConfiguration{
		Name:                           EnvoyRouteName(port),
		VirtualHosts:                   vhosts,
		MaxDirectResponseBodySizeBytes: wrapperspb.UInt32(istioconfig.MaxDirectResponseBodyBytes),
	}
}
