// Command meshfed is the multi-registry federation gateway: it watches the
// registries listed in clusters.yaml and serves them over one xDS endpoint.
package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/xds"
)

// exitError carries a process exit code through cobra without printing.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func main() {
	cmd := newRootCmd(os.Stdout, os.Stderr)
	if err := cmd.Execute(); err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "meshfed:", err)
		os.Exit(1)
	}
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "meshfed",
		Short:         "Multi-registry federation gateway for service meshes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	bi := readBuildInfo()
	root.Version = bi.Version
	root.SetVersionTemplate(bi.String() + "\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(runCmd(), validateCmd(), statusCmd(), releaseCmd(), bootstrapCmd(), versionCmd())
	return root
}

func runCmd() *cobra.Command {
	var (
		config    string
		logLevel  string
		logFormat string
	)
	c := &cobra.Command{
		Use:   "run",
		Short: "Watch the registries in clusters.yaml and serve them over xDS",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(cmd.ErrOrStderr(), logLevel, logFormat)
			if err != nil {
				return err
			}
			cfg, err := federation.Load(config)
			if err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), err)
				return exitError{1}
			}
			bi := readBuildInfo()
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			gw, err := federation.NewGateway(cfg, federation.GatewayOptions{Logger: log, Version: bi.Version, Revision: bi.Revision})
			if err != nil {
				return err
			}
			// SIGHUP reloads clusters.yaml (one reload at a time; a SIGHUP
			// during a reload queues one more).
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			reloads := make(chan struct{})
			go func() {
				defer close(reloads)
				for {
					select {
					case <-ctx.Done():
						return
					case <-hup:
						log.Info("SIGHUP: reloading clusters.yaml", "path", config)
						_ = gw.Reload(ctx, config) // logged and shown on /readyz
					}
				}
			}()
			err = gw.Run(ctx)
			stop()
			<-reloads
			return err
		},
	}
	c.Flags().StringVar(&config, "config", "clusters.yaml", "cluster registry file")
	c.Flags().StringVar(&logLevel, "log-level", "info", "trace, debug, info, warn or error (trace adds go-control-plane's per-watch lines)")
	c.Flags().StringVar(&logFormat, "log-format", "text", "text or json")
	return c
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if strings.EqualFold(level, "trace") {
		lv = xds.LevelTrace
	} else if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: %q is not text or json", format)
}

func validateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a clusters.yaml; print every problem with its line and exit 1, or a summary and exit 0",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := federation.Load(args[0])
			if err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), err)
				return exitError{1}
			}
			fmt.Fprintln(cmd.OutOrStdout(), cfg.Summary())
			return nil
		},
	}
}
