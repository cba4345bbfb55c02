package xds

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	bootstrap "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds/translate"
)

// XDSClusterName is the static cluster of the Envoy bootstrap that points
// at meshfed.
const XDSClusterName = "xds_cluster"

type grpcBootstrapLocality struct {
	Region  string `json:"region"`
	Zone    string `json:"zone"`
	SubZone string `json:"sub_zone"`
}

type grpcBootstrap struct {
	XDSServers []grpcBootstrapServer `json:"xds_servers"`
	Node       struct {
		ID       string                `json:"id"`
		Locality grpcBootstrapLocality `json:"locality"`
		Metadata map[string]string     `json:"metadata"`
	} `json:"node"`
}

type grpcBootstrapServer struct {
	ServerURI      string         `json:"server_uri"`
	ChannelCreds   []channelCreds `json:"channel_creds"`
	ServerFeatures []string       `json:"server_features"`
}

type channelCreds struct {
	Type string `json:"type"`
	// Config of "tls" creds: the file_watcher certificate provider's
	// (gRFC A65).
	Config map[string]string `json:"config,omitempty"`
}

// ClientTLS is how an xDS client reaches a TLS xDS server: PEM files on
// the client's machine. A nil *ClientTLS means plaintext.
type ClientTLS struct {
	// CAFile holds the CA certificates that verify the server's
	// certificate; "" uses the system roots (gRPC) or does not verify
	// (Envoy, which has no default trust store).
	CAFile string
	// CertFile and KeyFile are the client's certificate and key, needed
	// when the server requires client certificates (xds.tls.clientCA, mTLS);
	// both or neither.
	CertFile, KeyFile string
}

func (t *ClientTLS) check() error {
	if t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		return fmt.Errorf("client certificate and key go together")
	}
	return nil
}

func splitXDSAddr(addr string) (string, uint32, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("xds address %q: %w", addr, err)
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil || port == 0 || host == "" {
		return "", 0, fmt.Errorf("xds address %q: want host:port", addr)
	}
	return host, uint32(port), nil
}

// GRPCBootstrap returns the bootstrap JSON (GRPC_XDS_BOOTSTRAP) for a
// proxyless gRPC client (grpc-go, grpc-js-xds) of the xDS server at xdsAddr
// (host:port): channel credentials "insecure", or with tls set "tls" whose
// config names tls's files as the file_watcher certificate provider does
// (ca_certificate_file, certificate_file, private_key_file; gRFC A65); the
// server's certificate must then hold xdsAddr's host as a SAN. Server
// feature xds_v3, and a node with the id, a locality (grpc-js-xds requires
// one, even empty) and metadata GENERATOR=grpc, which makes meshfed serve
// it gRPC resources.
func GRPCBootstrap(xdsAddr, nodeID string, locality model.Locality, tls *ClientTLS) ([]byte, error) {
	if _, _, err := splitXDSAddr(xdsAddr); err != nil {
		return nil, err
	}
	if nodeID == "" {
		return nil, fmt.Errorf("empty node id")
	}
	if err := tls.check(); err != nil {
		return nil, err
	}
	creds := channelCreds{Type: "insecure"}
	if tls != nil {
		creds = channelCreds{Type: "tls", Config: map[string]string{}}
		for k, v := range map[string]string{"ca_certificate_file": tls.CAFile, "certificate_file": tls.CertFile, "private_key_file": tls.KeyFile} {
			if v != "" {
				creds.Config[k] = v
			}
		}
	}
	var b grpcBootstrap
	b.XDSServers = []grpcBootstrapServer{{
		ServerURI:      xdsAddr,
		ChannelCreds:   []channelCreds{creds},
		ServerFeatures: []string{"xds_v3"},
	}}
	b.Node.ID = nodeID
	b.Node.Locality = grpcBootstrapLocality{Region: locality.Region, Zone: locality.Zone, SubZone: locality.SubZone}
	b.Node.Metadata = map[string]string{"GENERATOR": "grpc"}
	out, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// EnvoyBootstrap returns an Envoy bootstrap (JSON) whose node is nodeID in
// cluster, with CDS and LDS over ADS (gRPC, API v3) from the static
// cluster xds_cluster at xdsAddr (HTTP/2; STATIC for an IP address,
// STRICT_DNS for a hostname). With tls set, the cluster has a TLS
// transport socket (UpstreamTlsContext: trusted CA, client certificate
// when given, SNI for a hostname). The bootstrap passes ValidateAll.
func EnvoyBootstrap(xdsAddr, nodeID, clusterName string, tls *ClientTLS) ([]byte, error) {
	host, port, err := splitXDSAddr(xdsAddr)
	if err != nil {
		return nil, err
	}
	if err := tls.check(); err != nil {
		return nil, err
	}
	discovery := cluster.Cluster_STRICT_DNS
	if _, err := netip.ParseAddr(host); err == nil {
		discovery = cluster.Cluster_STATIC
	}
	ads := &core.ConfigSource{
		ResourceApiVersion:    core.ApiVersion_V3,
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
	}
	b := &bootstrap.Bootstrap{
		Node: &core.Node{Id: nodeID, Cluster: clusterName},
		DynamicResources: &bootstrap.Bootstrap_DynamicResources{
			AdsConfig: &core.ApiConfigSource{
				ApiType:             core.ApiConfigSource_GRPC,
				TransportApiVersion: core.ApiVersion_V3,
				GrpcServices: []*core.GrpcService{{
					TargetSpecifier: &core.GrpcService_EnvoyGrpc_{EnvoyGrpc: &core.GrpcService_EnvoyGrpc{ClusterName: XDSClusterName}},
				}},
			},
			CdsConfig: ads,
			LdsConfig: ads,
		},
		// Envoy refuses a regex whose RE2 program is above
		// re2.max_program_size.error_level (default 100): raise it to the
		// limit the config validation keeps regexes within, as Istio's
		// bootstrap does; the admin layer keeps /runtime_modify working.
		LayeredRuntime: &bootstrap.LayeredRuntime{Layers: []*bootstrap.RuntimeLayer{
			{Name: "global config", LayerSpecifier: &bootstrap.RuntimeLayer_StaticLayer{StaticLayer: &structpb.Struct{Fields: map[string]*structpb.Value{
				"re2.max_program_size.error_level": structpb.NewNumberValue(istioconfig.RegexProgramLimit),
			}}}},
			{Name: "admin", LayerSpecifier: &bootstrap.RuntimeLayer_AdminLayer_{AdminLayer: &bootstrap.RuntimeLayer_AdminLayer{}}},
		}},
		StaticResources: &bootstrap.Bootstrap_StaticResources{
			Clusters: []*cluster.Cluster{{
				Name:                          XDSClusterName,
				ConnectTimeout:                durationpb.New(translate.EnvoyConnectTimeout),
				ClusterDiscoveryType:          &cluster.Cluster_Type{Type: discovery},
				TypedExtensionProtocolOptions: translate.HTTP2Options(),
				LoadAssignment: &endpoint.ClusterLoadAssignment{
					ClusterName: XDSClusterName,
					Endpoints: []*endpoint.LocalityLbEndpoints{{
						LoadBalancingWeight: wrapperspb.UInt32(1),
						LbEndpoints: []*endpoint.LbEndpoint{{
							HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
								Address: translate.SocketAddress(host, port),
							}},
						}},
					}},
				},
			}},
		},
	}
	if tls != nil {
		ts, err := upstreamTLS(host, tls)
		if err != nil {
			return nil, err
		}
		b.StaticResources.Clusters[0].TransportSocket = ts
	}
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("envoy bootstrap: %w", err)
	}
	out, err := protojson.Marshal(b)
	if err != nil {
		return nil, err
	}
	return indentJSON(out), nil
}

// upstreamTLS is the transport socket of Envoy's xds_cluster for tls.
func upstreamTLS(host string, t *ClientTLS) (*core.TransportSocket, error) {
	file := func(name string) *core.DataSource {
		return &core.DataSource{Specifier: &core.DataSource_Filename{Filename: name}}
	}
	ctx := &tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		AlpnProtocols: []string{"h2"},
	}}
	if t.CAFile != "" {
		ctx.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{
			ValidationContext: &tlsv3.CertificateValidationContext{TrustedCa: file(t.CAFile)},
		}
	}
	if t.CertFile != "" {
		ctx.CommonTlsContext.TlsCertificates = []*tlsv3.TlsCertificate{{
			CertificateChain: file(t.CertFile),
			PrivateKey:       file(t.KeyFile),
		}}
	}
	if _, err := netip.ParseAddr(host); err != nil {
		ctx.Sni = host
	}
	anyCtx, err := anypb.New(ctx)
	if err != nil {
		return nil, err
	}
	return &core.TransportSocket{
		Name:       "envoy.transport_sockets.tls",
		ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: anyCtx},
	}, nil
}
