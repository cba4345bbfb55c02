package translate

import (
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/model"
)

// TLS origination from files (docs/architecture.md §3.6): a
// DestinationRule's tls block (SIMPLE or MUTUAL; DISABLE is plaintext)
// becomes an Envoy UpstreamTlsContext whose certificates are file
// DataSources read by the proxy on its own host. ISTIO_MUTUAL and
// credentialName are refused by the config source (they need SDS).
//
// Proxyless gRPC clients get no TLS from a rule: grpc-go accepts only
// certificate-provider instances named in its bootstrap, never file
// paths in CDS, and would NACK such a cluster. Their clusters are served
// without it, and the host is listed on /debug/configz (TrafficNotes).

// clusterTLS is the transport socket of a cluster for t (nil: plaintext).
// SNI defaults to the service hostname; HTTP/2 and gRPC ports offer ALPN
// h2.
func clusterTLS(t *networking.ClientTLSSettings, host string, p model.Port) *core.TransportSocket {
	if t == nil || (t.GetMode() != networking.ClientTLSSettings_SIMPLE && t.GetMode() != networking.ClientTLSSettings_MUTUAL) {
		return nil
	}
	file := func(path string) *core.DataSource {
		return &core.DataSource{Specifier: &core.DataSource_Filename{Filename: path}}
	}
	common := &tlsv3.CommonTlsContext{}
	if p.Protocol == model.ProtocolHTTP2 || p.Protocol == model.ProtocolGRPC {
		common.AlpnProtocols = []string{"h2"}
	}
	if t.GetMode() == networking.ClientTLSSettings_MUTUAL {
		common.TlsCertificates = []*tlsv3.TlsCertificate{{
			CertificateChain: file(t.GetClientCertificate()),
			PrivateKey:       file(t.GetPrivateKey()),
		}}
	}
	if !t.GetInsecureSkipVerify().GetValue() && t.GetCaCertificates() != "" {
		vc := &tlsv3.CertificateValidationContext{TrustedCa: file(t.GetCaCertificates())}
		if t.GetCaCrl() != "" {
			vc.Crl = file(t.GetCaCrl())
		}
		for _, san := range t.GetSubjectAltNames() {
			typ := tlsv3.SubjectAltNameMatcher_DNS
			if strings.Contains(san, "://") {
				typ = tlsv3.SubjectAltNameMatcher_URI
			}
			vc.MatchTypedSubjectAltNames = append(vc.MatchTypedSubjectAltNames, &tlsv3.SubjectAltNameMatcher{
				SanType: typ,
				Matcher: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: san}},
			})
		}
		common.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc}
	}
	sni := t.GetSni()
	if sni == "" {
		sni = host
	}
	return &core.TransportSocket{
		Name:       wellknown.TransportSocketTLS,
		ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: mustAny(&tlsv3.UpstreamTlsContext{CommonTlsContext: common, Sni: sni})},
	}
}
