package translate

import (
	"cmp"
	"fmt"
	"math"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/model"
)

// MetadataKey is the filter_metadata key under which every endpoint carries
// its labels and source (registry, cluster, network).
const MetadataKey = "meshfed"

// maxWeightSum is the largest sum of endpoint weights in one locality, and
// of locality weights at one priority, that xDS clients accept (grpc-go
// rejects the CLA above it; Envoy documents the same bound). The
// aggregator's gate scales weights to fit; translation refuses a CLA that
// does not (docs/architecture.md §3.4, normalization gate).
const maxWeightSum = math.MaxUint32

// EnvoyConnectTimeout is the connect timeout of every Envoy cluster
// meshfed builds (and of the xDS cluster in its bootstrap).
const EnvoyConnectTimeout = 10 * time.Second

// httpProtocolOptionsKey is where Envoy reads a cluster's upstream HTTP options.
const httpProtocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

func adsSource() *core.ConfigSource {
	return &core.ConfigSource{
		ResourceApiVersion:    core.ApiVersion_V3,
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
	}
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		// Only fails for messages that cannot be marshalled, which the
		// builders never produce.
		panic(fmt.Sprintf("xds: marshal %T: %v", m, err))
	}
	return a
}

func compareLocality(a, b model.Locality) int {
	return cmp.Or(cmp.Compare(a.Region, b.Region), cmp.Compare(a.Zone, b.Zone), cmp.Compare(a.SubZone, b.SubZone))
}

// endpointMetadata is the meshfed filter metadata of an endpoint.
func endpointMetadata(e *model.Endpoint) (*core.Metadata, error) {
	fields := map[string]any{}
	if len(e.Labels) > 0 {
		labels := make(map[string]any, len(e.Labels))
		for k, v := range e.Labels {
			labels[k] = v
		}
		fields["labels"] = labels
	}
	for k, v := range map[string]string{"registry": e.Source.Registry, "cluster": e.Source.Cluster, "network": e.Source.Network} {
		if v != "" {
			fields[k] = v
		}
	}
	if len(fields) == 0 {
		return nil, nil
	}
	s, err := structpb.NewStruct(fields)
	if err != nil {
		return nil, fmt.Errorf("endpoint %s metadata: %w", e.Address, err)
	}
	return &core.Metadata{FilterMetadata: map[string]*structpb.Struct{MetadataKey: s}}, nil
}

// SocketAddress is the TCP address addr:port.
func SocketAddress(addr string, port uint32) *core.Address {
	return &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
		Protocol:      core.SocketAddress_TCP,
		Address:       addr,
		PortSpecifier: &core.SocketAddress_PortValue{PortValue: port},
	}}}
}

// HTTP2Options makes Envoy speak HTTP/2 to a cluster's endpoints.
func HTTP2Options() map[string]*anypb.Any {
	return map[string]*anypb.Any{httpProtocolOptionsKey: mustAny(&upstreamhttp.HttpProtocolOptions{
		UpstreamProtocolOptions: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
					Http2ProtocolOptions: &core.Http2ProtocolOptions{},
				},
			},
		},
	})}
}

// envoyCluster builds the Envoy cluster of a service port: EDS over ADS, or
// STRICT_DNS with the endpoints inline for DNS services.
func envoyCluster(name string, svc *model.Service, p model.Port, cla *endpoint.ClusterLoadAssignment) *cluster.Cluster {
	c := &cluster.Cluster{
		Name:           name,
		ConnectTimeout: durationpb.New(EnvoyConnectTimeout),
		LbPolicy:       cluster.Cluster_ROUND_ROBIN,
	}
	if svc.Resolution == model.ResolutionDNS {
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_STRICT_DNS}
		c.LoadAssignment = cla
	} else {
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_EDS}
		c.EdsClusterConfig = &cluster.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: name}
	}
	if p.Protocol == model.ProtocolHTTP2 || p.Protocol == model.ProtocolGRPC {
		c.TypedExtensionProtocolOptions = HTTP2Options()
	}
	return c
}

// grpcCluster builds the proxyless gRPC cluster of a service port: EDS over
// ADS with ROUND_ROBIN (grpc-go turns it into weighted-locality round
// robin). A DNS service becomes LOGICAL_DNS on its first endpoint (grpc-go
// accepts exactly one); a DNS service without endpoints is served as an
// empty EDS cluster (useEDS true).
func grpcCluster(name string, svc *model.Service, cla *endpoint.ClusterLoadAssignment) (c *cluster.Cluster, useEDS bool) {
	c = &cluster.Cluster{Name: name, LbPolicy: cluster.Cluster_ROUND_ROBIN}
	if svc.Resolution == model.ResolutionDNS && len(cla.GetEndpoints()) > 0 {
		first := cla.GetEndpoints()[0]
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_LOGICAL_DNS}
		c.LoadAssignment = &endpoint.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpoint.LocalityLbEndpoints{{
				Locality:            first.GetLocality(),
				LoadBalancingWeight: wrapperspb.UInt32(1),
				LbEndpoints: []*endpoint.LbEndpoint{{
					HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
						Address: first.GetLbEndpoints()[0].GetEndpoint().GetAddress(),
					}},
				}},
			}},
		}
		return c, false
	}
	c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_EDS}
	c.EdsClusterConfig = &cluster.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: name}
	return c, true
}

func routerFilter() *hcm.HttpFilter {
	return &hcm.HttpFilter{
		Name:       wellknown.Router,
		ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: mustAny(&router.Router{})},
	}
}

// virtualHost routes <host> and <host>:<port> to the service port's cluster.
func virtualHost(host string, port uint32) *route.VirtualHost {
	name := GRPCListenerName(host, port)
	return &route.VirtualHost{
		Name:    name,
		Domains: []string{host, name},
		Routes: []*route.Route{{
			Name:  "default",
			Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
			Action: &route.Route_Route{Route: &route.RouteAction{
				ClusterSpecifier: &route.RouteAction_Cluster{Cluster: ClusterName(host, port)},
				// No default 15s timeout: gRPC streams and long polls are common.
				Timeout: durationpb.New(0),
			}},
		}},
	}
}

// grpcListener is the API listener grpc-go resolves for name; its HCM reads
// the route configuration rdsName over ADS. withFault puts the HTTP fault
// filter before the router (routes of a VirtualService with a fault turn
// it on).
func grpcListener(name, rdsName string, withFault bool) *listener.Listener {
	filters := []*hcm.HttpFilter{routerFilter()}
	if withFault {
		filters = []*hcm.HttpFilter{faultFilter(), routerFilter()}
	}
	return &listener.Listener{
		Name: name,
		ApiListener: &listener.ApiListener{ApiListener: mustAny(&hcm.HttpConnectionManager{
			StatPrefix: name,
			RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
				ConfigSource:    adsSource(),
				RouteConfigName: rdsName,
			}},
			HttpFilters: filters,
		})},
	}
}

// envoyHTTPListener is the outbound listener of an HTTP port: an HCM that
// reads route configuration <port> over ADS.
func envoyHTTPListener(port uint32) *listener.Listener {
	return envoyOutboundListener(port, wellknown.HTTPConnectionManager, &hcm.HttpConnectionManager{
		StatPrefix: "outbound_" + EnvoyListenerName(port),
		CodecType:  hcm.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: EnvoyRouteName(port),
		}},
		HttpFilters: []*hcm.HttpFilter{routerFilter()},
	})
}

// envoyTCPListener is the outbound listener of a TCP port: tcp_proxy to one
// service's cluster.
func envoyTCPListener(port uint32, host string) *listener.Listener {
	cname := ClusterName(host, port)
	return envoyOutboundListener(port, wellknown.TCPProxy, &tcpproxy.TcpProxy{
		StatPrefix:       cname,
		ClusterSpecifier: &tcpproxy.TcpProxy_Cluster{Cluster: cname},
	})
}

// envoyOutboundListener is the outbound listener on 0.0.0.0:port whose one
// filter chain is the network filter named filter, configured by cfg.
func envoyOutboundListener(port uint32, filter string, cfg proto.Message) *listener.Listener {
	return &listener.Listener{
		Name:             EnvoyListenerName(port),
		Address:          SocketAddress("0.0.0.0", port),
		TrafficDirection: core.TrafficDirection_OUTBOUND,
		FilterChains: []*listener.FilterChain{{Filters: []*listener.Filter{{
			Name:       filter,
			ConfigType: &listener.Filter_TypedConfig{TypedConfig: mustAny(cfg)},
		}}}},
	}
}

// validate runs the resource's protoc-gen-validate rules.
func validate(r types.Resource) error {
	v, ok := r.(interface{ ValidateAll() error })
	if !ok {
		return nil
	}
	return v.ValidateAll()
}

// resourceName is the xDS name of a resource built here.
func resourceName(r types.Resource) string {
	switch r := r.(type) {
	case *cluster.Cluster:
		return r.GetName()
	case *endpoint.ClusterLoadAssignment:
		return r.GetClusterName()
	case *claResource:
		return r.GetClusterName()
	case *failoverCLA:
		return r.GetClusterName()
	case *listener.Listener:
		return r.GetName()
	case *route.RouteConfiguration:
		return r.GetName()
	}
	return ""
}
