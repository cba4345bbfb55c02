package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/xds"
)

func bootstrapCmd() *cobra.Command {
	var (
		grpcClient, envoy bool
		config, addr      string
		nodeID, locality  string
		cluster           string
	)
	c := &cobra.Command{
		Use:   "bootstrap --grpc|--envoy [--config FILE | --xds ADDR] [--node-id ID]",
		Short: "Print the bootstrap JSON an xDS client needs to reach this server",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if grpcClient == envoy {
				return fmt.Errorf("give exactly one of --grpc or --envoy")
			}
			if addr == "" {
				cfg, err := federation.Load(config)
				if err != nil {
					fmt.Fprintln(cmd.ErrOrStderr(), err)
					return exitCode{1}
				}
				addr = cfg.XDS.Address
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
	return c
}
