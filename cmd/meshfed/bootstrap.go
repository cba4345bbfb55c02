package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshfed/meshfed/config"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds"
)

func bootstrapCmd() *cobra.Command {
	var (
		grpcClient, envoy, istio bool
		cfgPath, addr            string
		nodeID, locality         string
		cluster                  string
		caFile, sni              string
		tlsFlag                  bool
		certFile, keyFile        string
	)
	c := &cobra.Command{
		Use:   "bootstrap --grpc|--envoy|--istio [--config FILE | --xds ADDR [--tls]] [--ca FILE] [--cert FILE --key FILE] [--node-id ID]",
		Short: "Print the bootstrap JSON an xDS client needs to reach this server (--istio: istiod's meshConfig configSources)",
		Long: `Print the bootstrap JSON an xDS client needs to reach this server.

With --config, the address and whether the server serves TLS (xds.tls) and
requires client certificates (xds.tls.clientCA) come from clusters.yaml.
The files the client uses live on the client's machine, so they are flags:
--ca verifies the server's certificate (gRPC: default the system roots;
Envoy has no default and does not verify without it), --cert and --key are
the client's certificate and key, required when the server wants them.
With --xds ADDR instead of --config, --tls (or any of --ca, --cert, --key)
turns TLS on.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n := 0
			for _, b := range []bool{grpcClient, envoy, istio} {
				if b {
					n++
				}
			}
			if n != 1 {
				return fmt.Errorf("give exactly one of --grpc, --envoy or --istio")
			}
			var tlsOn, mtls bool
			if addr == "" || (istio && !cmd.Flags().Changed("ca")) {
				cfg, err := config.Load(cfgPath)
				switch {
				case err == nil:
					if addr == "" {
						addr = cfg.XDS.Address
					}
					tlsOn, mtls = cfg.XDS.TLS != nil, cfg.XDS.TLS != nil && cfg.XDS.TLS.ClientCA != ""
				case addr == "":
					fmt.Fprintln(cmd.ErrOrStderr(), err)
					return exitError{1}
				}
			}
			if istio {
				return printIstio(cmd, addr, tlsOn, mtls, caFile, sni)
			}
			clientTLS, err := bootstrapTLS(cmd, tlsOn || tlsFlag, mtls, envoy, cfgPath, caFile, certFile, keyFile)
			if err != nil {
				return err
			}
			loc, err := model.ParseLocality(locality)
			if err != nil {
				return fmt.Errorf("--locality: %w", err)
			}
			var out []byte
			if grpcClient {
				if nodeID == "" {
					nodeID = defaultGRPCNodeID()
				}
				out, err = xds.GRPCBootstrap(addr, nodeID, loc, clientTLS)
			} else {
				if nodeID == "" {
					nodeID = "sidecar~127.0.0.1~envoy~default.svc.cluster.local"
				}
				out, err = xds.EnvoyBootstrap(addr, nodeID, cluster, clientTLS)
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), string(out))
			return nil
		},
	}
	f := c.Flags()
	f.BoolVar(&grpcClient, "grpc", false, "bootstrap for proxyless gRPC (grpc-go, grpc-js-xds); sets GENERATOR: grpc")
	f.BoolVar(&envoy, "envoy", false, "bootstrap for Envoy")
	f.StringVar(&cfgPath, "config", "clusters.yaml", "cluster registry file (for the xDS address)")
	f.StringVar(&addr, "xds", "", "xDS server address (overrides --config)")
	f.StringVar(&nodeID, "node-id", "", "node id (default --grpc: grpc-client-<host>-<random>, unique per bootstrap; --envoy: sidecar~127.0.0.1~envoy~default.svc.cluster.local)")
	f.StringVar(&locality, "locality", "local/local", "node locality region/zone/subzone (grpc-js-xds requires one)")
	f.StringVar(&cluster, "cluster", "meshfed", "Envoy node cluster")
	f.BoolVar(&istio, "istio", false, "print istiod's meshConfig snippet (configSources) that reads meshfed over MCP-over-xDS")
	f.StringVar(&caFile, "ca", "", "PEM CA that signed meshfed's xDS certificate (turns TLS on); gRPC default: the system roots")
	f.BoolVar(&tlsFlag, "tls", false, "the server serves TLS (implied by xds.tls in --config, and by --ca, --cert, --key)")
	f.StringVar(&certFile, "cert", "", "--grpc, --envoy: PEM client certificate, for a server that requires one (xds.tls.clientCA)")
	f.StringVar(&keyFile, "key", "", "--grpc, --envoy: PEM private key of --cert")
	f.StringVar(&sni, "sni", "", "--istio: server name istiod verifies (default: the host of the address)")
	return c
}

// printIstio prints the meshConfig snippet. TLS is on when the config
// serves TLS or --ca is given; it needs the CA (istiod embeds it).
func printIstio(cmd *cobra.Command, addr string, tlsOn, mtls bool, caFile, sni string) error {
	if mtls {
		return fmt.Errorf("xds.tls.clientCA is set: istiod's configSources client presents no client certificate " +
			"(Istio implements SIMPLE TLS only), so it cannot connect; serve istiod from a listener without clientCA")
	}
	var t *xds.IstioTLS
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return fmt.Errorf("--ca: %w", err)
		}
		t = &xds.IstioTLS{CAPEM: string(pem), SNI: sni}
	} else if tlsOn {
		return fmt.Errorf("xds.tls is set: give --ca FILE, the CA that signed meshfed's certificate, for istiod to verify it")
	}
	out, err := xds.IstioMeshConfig(addr, t)
	if err != nil {
		return err
	}
	_, err = cmd.OutOrStdout().Write(out)
	return err
}

// bootstrapTLS returns the client TLS settings of a gRPC or Envoy
// bootstrap: nil for plaintext; TLS when the config serves it or a TLS
// flag is given. File paths are made absolute.
func bootstrapTLS(cmd *cobra.Command, tlsOn, mtls, envoy bool, config, caFile, certFile, keyFile string) (*xds.ClientTLS, error) {
	if !tlsOn && caFile == "" && certFile == "" && keyFile == "" {
		return nil, nil
	}
	t := &xds.ClientTLS{}
	for _, f := range []struct {
		flag, in string
		out      *string
	}{{"--ca", caFile, &t.CAFile}, {"--cert", certFile, &t.CertFile}, {"--key", keyFile, &t.KeyFile}} {
		if f.in == "" {
			continue
		}
		abs, err := filepath.Abs(f.in)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.flag, err)
		}
		*f.out = abs
	}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("--cert and --key go together")
	}
	if mtls && certFile == "" {
		return nil, fmt.Errorf("%s: xds.tls.clientCA is set, so the server requires a client certificate: give --cert and --key", config)
	}
	if envoy && caFile == "" {
		fmt.Fprintln(cmd.ErrOrStderr(), "meshfed bootstrap: warning: no --ca: Envoy will not verify meshfed's certificate")
	}
	return t, nil
}

// defaultGRPCNodeID is the node id of a --grpc bootstrap without
// --node-id: grpc-client-<host>-<8 random hex digits>, so that two clients
// bootstrapped alike are two proxies in meshfed status and proxy-config,
// not one id shared by two streams.
func defaultGRPCNodeID() string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	suffix := hex.EncodeToString(b[:])
	host, err := os.Hostname()
	host, _, _ = strings.Cut(host, ".")
	if err != nil || host == "" {
		return "grpc-client-" + suffix
	}
	return "grpc-client-" + host + "-" + suffix
}
