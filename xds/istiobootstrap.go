package xds

import (
	"fmt"
	"net"
	"strings"
)

// IstioTLS is how istiod verifies meshfed's certificate: SIMPLE TLS (Istio's
// configSources client presents no client certificate, so a meshfed that
// requires mTLS cannot be its config source).
type IstioTLS struct {
	// CAPEM is the PEM of the CA that signed meshfed's serving certificate;
	// istiod's configSources client reads it inline, not from a file.
	CAPEM string
	// SNI is the server name istiod asks for and verifies; "" is the host
	// of the address.
	SNI string
}

// IstioMeshConfig returns the meshConfig snippet (YAML) that makes istiod
// read meshfed at xdsAddr as a config source over MCP-over-xDS; tls nil is
// plain text. xdsAddr must be an address istiod can dial (not 0.0.0.0).
func IstioMeshConfig(xdsAddr string, tls *IstioTLS) ([]byte, error) {
	host, _, err := splitXDSAddr(xdsAddr)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return nil, fmt.Errorf("xDS address %s is where meshfed listens, not an address istiod can dial: give --xds HOST:PORT", xdsAddr)
	}
	var b strings.Builder
	b.WriteString("# meshConfig for istiod (the \"mesh\" key of the istio ConfigMap, or --meshConfig):\n")
	b.WriteString("# meshfed as a config source over MCP-over-xDS. To keep istiod's own Kubernetes\n")
	b.WriteString("# config (VirtualServices, DestinationRules...) add `- address: k8s://` below.\n")
	b.WriteString("configSources:\n")
	fmt.Fprintf(&b, "- address: xds://%s\n", xdsAddr)
	if tls != nil {
		if strings.TrimSpace(tls.CAPEM) == "" {
			return nil, fmt.Errorf("TLS needs the CA certificate that signed meshfed's certificate")
		}
		sni := tls.SNI
		if sni == "" {
			sni = host
		}
		b.WriteString("  tlsSettings:\n    mode: SIMPLE\n")
		fmt.Fprintf(&b, "    sni: %q\n", sni)
		b.WriteString("    caCertificates: |\n")
		for _, l := range strings.Split(strings.TrimRight(tls.CAPEM, "\n"), "\n") {
			b.WriteString("      " + strings.TrimRight(l, "\r") + "\n")
		}
	}
	return []byte(b.String()), nil
}
