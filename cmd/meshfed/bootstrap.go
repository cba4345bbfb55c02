package main

import (
	"fmt"
	"path/filepath"

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
		tlsOn             bool
		caFile            string
		certFile, keyFile string
	)
	c := &cobra.Command{
		Use:   "bootstrap --grpc|--envoy [--config FILE | --xds ADDR [--tls]] [--ca FILE] [--cert FILE --key FILE] [--node-id ID]",
		Short: "Print the bootstrap JSON an xDS client needs to reach this server",
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
			if grpcClient == envoy {
				return fmt.Errorf("give exactly one of --grpc or --envoy")
			}
			mTLS := false
			if addr == "" {
				cfg, err := federation.Load(config)
				if err != nil {
					fmt.Fprintln(cmd.ErrOrStderr(), err)
					return exitError{1}
				}
				addr = cfg.XDS.Address
				if t := cfg.XDS.TLS; t != nil {
					tlsOn, mTLS = true, t.ClientCA != ""
				}
			}
			var clientTLS *xds.ClientTLS
			if tlsOn || caFile != "" || certFile != "" || keyFile != "" {
				clientTLS = &xds.ClientTLS{}
				for _, f := range []struct {
					flag string
					in   string
					out  *string
				}{{"--ca", caFile, &clientTLS.CAFile}, {"--cert", certFile, &clientTLS.CertFile}, {"--key", keyFile, &clientTLS.KeyFile}} {
					if f.in == "" {
						continue
					}
					abs, err := filepath.Abs(f.in)
					if err != nil {
						return fmt.Errorf("%s: %w", f.flag, err)
					}
					*f.out = abs
				}
				if (certFile == "") != (keyFile == "") {
					return fmt.Errorf("--cert and --key go together")
				}
				if mTLS && certFile == "" {
					return fmt.Errorf("%s: xds.tls.clientCA is set, so the server requires a client certificate: give --cert and --key", config)
				}
				if envoy && caFile == "" {
					fmt.Fprintln(cmd.ErrOrStderr(), "meshfed bootstrap: warning: no --ca: Envoy will not verify meshfed's certificate")
				}
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
	f.StringVar(&config, "config", "clusters.yaml", "cluster registry file (for the xDS address)")
	f.StringVar(&addr, "xds", "", "xDS server address (overrides --config)")
	f.StringVar(&nodeID, "node-id", "", "node id (default grpc-client, or sidecar~127.0.0.1~envoy~default.svc.cluster.local)")
	f.StringVar(&locality, "locality", "local/local", "node locality region/zone/subzone (grpc-js-xds requires one)")
	f.StringVar(&cluster, "cluster", "meshfed", "Envoy node cluster")
	f.BoolVar(&tlsOn, "tls", false, "the server serves TLS (implied by xds.tls in --config, and by --ca, --cert, --key)")
	f.StringVar(&caFile, "ca", "", "PEM CA certificates the client verifies the server's certificate with (gRPC default: system roots)")
	f.StringVar(&certFile, "cert", "", "PEM client certificate, for a server that requires one (xds.tls.clientCA)")
	f.StringVar(&keyFile, "key", "", "PEM private key of --cert")
	return c
}
