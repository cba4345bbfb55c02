package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds"
)

func bootstrapCmd() *cobra.Command {
	var (
		grpcClient, envoy, istio bool
		config, addr             string
		nodeID, locality         string
		cluster                  string
		caFile, sni              string
	)
	c := &cobra.Command{
		Use:   "bootstrap --grpc|--envoy|--istio [--config FILE | --xds ADDR] [--node-id ID]",
		Short: "Print the bootstrap JSON an xDS client needs to reach this server (--istio: istiod's meshConfig configSources)",
		Args:  cobra.NoArgs,
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
				cfg, err := federation.Load(config)
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
			loc, err := model.ParseLocality(locality)
			if err != nil {
				return fmt.Errorf("--locality: %w", err)
			}
			var out []byte
			if grpcClient {
				if nodeID == "" {
					nodeID = "grpc-client"
				}
				out, err = xds.GRPCBootstrap(addr, nodeID, loc)
			} else {
				if nodeID == "" {
					nodeID = "sidecar~127.0.0.1~envoy~default.svc.cluster.local"
				}
				out, err = xds.EnvoyBootstrap(addr, nodeID, cluster)
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
	f.StringVar(&config, "config", "clusters.yaml", "cluster registry file (for the xDS address)")
	f.StringVar(&addr, "xds", "", "xDS server address (overrides --config)")
	f.StringVar(&nodeID, "node-id", "", "node id (default grpc-client, or sidecar~127.0.0.1~envoy~default.svc.cluster.local)")
	f.StringVar(&locality, "locality", "local/local", "node locality region/zone/subzone (grpc-js-xds requires one)")
	f.StringVar(&cluster, "cluster", "meshfed", "Envoy node cluster")
	f.BoolVar(&istio, "istio", false, "print istiod's meshConfig snippet (configSources) that reads meshfed over MCP-over-xDS")
	f.StringVar(&caFile, "ca", "", "--istio: PEM file of the CA that signed meshfed's xDS certificate (turns TLS on)")
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
