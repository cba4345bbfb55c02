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
	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/xds"
)

// version is set by the Makefile (-ldflags -X main.version=...).
var version = "dev"

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
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			gw, err := federation.NewGateway(cfg, federation.GatewayOptions{Logger: log, Version: version})
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
	var configDirs []string
	cmd := &cobra.Command{
		Use:   "validate [FILE] [--config-dir DIR]...",
		Short: "Check a clusters.yaml and/or directories of Istio traffic YAML; print every problem with its line and exit 1, or a summary and exit 0",
		Long: `Check a clusters.yaml (and the configSources directories it names) and
any --config-dir directory of Istio VirtualService/DestinationRule YAML,
offline. Every problem is printed with its file and line; the exit code is
1 if there is any.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && len(configDirs) == 0 {
				return errors.New("want a clusters.yaml FILE, --config-dir DIR, or both")
			}
			var dirs []istioconfig.Dir
			if len(args) == 1 {
				cfg, err := federation.Load(args[0])
				if err != nil {
					fmt.Fprintln(cmd.ErrOrStderr(), err)
					return exitError{1}
				}
				fmt.Fprintln(cmd.OutOrStdout(), cfg.Summary())
				for _, c := range cfg.ConfigSources {
					dirs = append(dirs, istioconfig.Dir{Name: c.Name, Path: c.Dir})
				}
			}
			for _, d := range configDirs {
				dirs = append(dirs, istioconfig.Dir{Name: d, Path: d})
			}
			if len(dirs) == 0 {
				return nil
			}
			st := istioconfig.Validate(dirs...)
			for _, o := range st.InForce {
				fmt.Fprintf(cmd.OutOrStdout(), "ok: %s %s/%s (%s)\n", o.Kind, o.Namespace, o.Name, o.Source)
			}
			for _, r := range st.Rejected {
				fmt.Fprintln(cmd.ErrOrStderr(), "rejected:", r.String())
			}
			if len(st.Rejected) > 0 {
				return exitError{1}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&configDirs, "config-dir", nil, "a directory of Istio traffic YAML to check (repeatable)")
	return cmd
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "meshfed", version)
		},
	}
}
