// Command meshfed is the multi-registry federation gateway: it watches the
// registries listed in clusters.yaml and serves them over one xDS endpoint.
package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v4"

	"github.com/meshfed/meshfed/admin"
	"github.com/meshfed/meshfed/config"
	"github.com/meshfed/meshfed/gateway"
	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/registries/serviceentry"
	"github.com/meshfed/meshfed/yamlconf"
	"github.com/meshfed/meshfed/yamlconf/yamlpath"
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
	root.AddCommand(runCmd(), validateCmd(), statusCmd(), proxyConfigCmd(), describeCmd(), releaseCmd(), bootstrapCmd(), versionCmd())
	return root
}

func runCmd() *cobra.Command {
	var (
		cfgPath   string
		logLevel  string
		logFormat string
	)
	c := &cobra.Command{
		Use:   "run",
		Short: "Watch the registries in clusters.yaml and serve them over xDS",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			level := new(slog.LevelVar)
			log, err := newLogger(cmd.ErrOrStderr(), level, logLevel, logFormat)
			if err != nil {
				return err
			}
			cfg, err := config.Load(cfgPath)
			if err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), err)
				return exitError{1}
			}
			// Files the xDS listener needs stop the start, with their line;
			// registries re-read theirs on every start: a warning.
			fatal := false
			for _, p := range config.CheckFiles(cfg) {
				if strings.HasPrefix(p.Key, "xds.") {
					fmt.Fprintln(cmd.ErrOrStderr(), p)
					fatal = true
					continue
				}
				log.Warn("a file named in the config has a problem", "problem", p.String())
			}
			if fatal {
				return exitError{1}
			}
			bi := readBuildInfo()
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			gw, err := gateway.NewGateway(cfg, gateway.GatewayOptions{Logger: log, Level: level, Version: bi.Version, Revision: bi.Revision})
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
						log.Info("SIGHUP: reloading clusters.yaml", "path", cfgPath)
						_ = gw.Reload(ctx, cfgPath) // logged and shown on /readyz
					}
				}
			}()
			err = gw.Run(ctx)
			stop()
			<-reloads
			return err
		},
	}
	c.Flags().StringVar(&cfgPath, "config", "clusters.yaml", "cluster registry file")
	c.Flags().StringVar(&logLevel, "log-level", "info", "trace, debug, info, warn or error (trace adds go-control-plane's per-watch lines)")
	c.Flags().StringVar(&logFormat, "log-format", "text", "text or json")
	return c
}

// newLogger builds the process logger; lv holds its level, which PUT
// /debug/loglevel changes at run time.
func newLogger(w io.Writer, lv *slog.LevelVar, level, format string) (*slog.Logger, error) {
	l, err := admin.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	lv.Set(l)
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
		Short: "Check a clusters.yaml and the files it names, and/or directories of Istio traffic YAML; print every problem with its line and exit 1, or a summary and exit 0",
		Long: `Check a clusters.yaml: its keys and values, conflicts between entries
(names, domains, listeners on the same port), and every file it names (TLS
certificate, key and CA, token and auth files, kubeconfigs, services files):
missing, unreadable or not parsing. Every problem is printed as
FILE:LINE:COL: KEY: MESSAGE; the exit code is then 1. The traffic rules of
the configSources directories the file names are checked even then, and
their problems printed after the file's own.

The Istio VirtualServices and DestinationRules of the configSources
directories it names, and of every --config-dir, are checked too, offline:
"ok: KIND NS/NAME (FILE:LINE)" on stdout per valid object, "rejected:
FILE:LINE:COL KIND NS/NAME: FIELD: REASON" on stderr per problem of a
refused one, each at its field (exit code 1).
The ServiceEntries and WorkloadEntries of every --config-dir are checked
the same way, as a serviceentry registry reads them (the domain rule
needs a registry's domain and is checked when meshfed runs); those of
serviceentry registries in the clusters.yaml are checked with its files.
A Kubernetes config source is named but not read: its objects are checked
when meshfed runs (see /debug/configz).

A --config-dir that does not exist is one problem (exit code 1); one that
holds no Istio objects is reported on stdout ("no Istio objects found in
DIR") and is not an error (exit code 0), as meshfed serves it, empty.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && len(configDirs) == 0 {
				return errors.New("want a clusters.yaml FILE, --config-dir DIR, or both")
			}
			var dirs []istioconfig.Dir
			bad := false
			if len(args) == 1 {
				cfg, err := config.Load(args[0])
				if err == nil {
					if probs := config.CheckFiles(cfg); len(probs) > 0 {
						err = &config.LoadError{Problems: probs}
					}
				}
				if err != nil {
					// The traffic rules of the configSources directories
					// that the file names are checked all the same.
					fmt.Fprintln(cmd.ErrOrStderr(), err)
					bad = true
					dirs = configSourceDirs(args[0], cfg != nil)
				} else {
					fmt.Fprintln(cmd.OutOrStdout(), cfg.Summary())
					for _, c := range cfg.ConfigSources {
						if k := c.Kubernetes; k != nil {
							fmt.Fprintf(cmd.OutOrStdout(), "config source %s: the Istio CRDs of kubernetes clusters %s, read at run time (not checked offline)\n",
								c.Name, strings.Join(k.Clusters, ", "))
							continue
						}
						dirs = append(dirs, istioconfig.Dir{Name: c.Name, Path: c.Dir})
					}
				}
			}
			found := map[string]int{} // objects seen per --config-dir
			var checked []string
			for _, d := range configDirs {
				// A missing directory is one problem, not one per checker.
				if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
					var pe *fs.PathError
					if err == nil {
						err = errors.New("not a directory")
					} else if errors.As(err, &pe) {
						err = pe.Err // the path is named once, below
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "rejected: --config-dir %s: %v\n", d, err)
					bad = true
					continue
				}
				checked = append(checked, d)
				dirs = append(dirs, istioconfig.Dir{Name: d, Path: d})
				inForce, rejected := serviceentry.CheckDir(d)
				found[d] += len(inForce) + len(rejected)
				for _, o := range inForce {
					fmt.Fprintln(cmd.OutOrStdout(), "ok:", serviceentry.Describe(o))
				}
				for _, r := range rejected {
					fmt.Fprintln(cmd.ErrOrStderr(), "rejected:", r.String())
				}
				bad = bad || len(rejected) > 0
			}
			if len(dirs) > 0 {
				st := istioconfig.Validate(dirs...)
				for _, o := range st.InForce {
					fmt.Fprintf(cmd.OutOrStdout(), "ok: %s %s/%s (%s)\n", o.Kind, o.Namespace, o.Name, o.Source)
					countIn(found, checked, o.Source)
				}
				for _, r := range st.Rejected {
					for _, line := range strings.Split(r.String(), "\n") { // one line per problem
						fmt.Fprintln(cmd.ErrOrStderr(), "rejected:", line)
					}
					countIn(found, checked, r.Source)
				}
				bad = bad || len(st.Rejected) > 0
			}
			for _, d := range checked {
				if found[d] == 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "no Istio objects found in %s (no VirtualService, DestinationRule, ServiceEntry or WorkloadEntry in its YAML files)\n", d)
				}
			}
			if bad {
				return exitError{1}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&configDirs, "config-dir", nil, "a directory of Istio traffic YAML to check (repeatable)")
	return cmd
}

// configSourceDirs are the directories of the configSources entries of
// the clusters.yaml at path that has problems, as far as they can be read
// from it: every entry that names a dir (made absolute against the file's
// directory). When the file decoded (loaded: its problems are missing
// files), a directory that cannot be read is left out: it is one of the
// problems already printed.
func configSourceDirs(path string, loaded bool) []istioconfig.Dir {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	root, probs := yamlconf.Parse(path, data)
	if len(probs) > 0 || root == nil {
		return nil
	}
	base, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		base = filepath.Dir(path)
	}
	list, ok := yamlpath.Lookup(root, "configSources")
	if !ok || list == nil {
		return nil
	}
	// Lookup points at the key of a list: its value follows it.
	if m := yamlpath.Resolve(root); m != nil && m.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i] == list {
				list = yamlpath.Resolve(m.Content[i+1])
			}
		}
	}
	if list == nil || list.Kind != yaml.SequenceNode {
		return nil
	}
	var dirs []istioconfig.Dir
	for i, item := range list.Content {
		item = yamlpath.Resolve(item)
		if item == nil || item.Kind != yaml.MappingNode {
			continue
		}
		var name, dir string
		for j := 0; j+1 < len(item.Content); j += 2 {
			v := yamlpath.Resolve(item.Content[j+1])
			if v == nil || v.Kind != yaml.ScalarNode {
				continue
			}
			switch item.Content[j].Value {
			case "name":
				name = v.Value
			case "dir":
				dir = v.Value
			}
		}
		if dir == "" {
			continue
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(base, dir)
		}
		if fi, err := os.Stat(dir); loaded && (err != nil || !fi.IsDir()) {
			continue
		}
		if name == "" {
			name = yamlpath.Index("configSources", i)
		}
		dirs = append(dirs, istioconfig.Dir{Name: name, Path: dir})
	}
	return dirs
}

// countIn counts an object whose source ("<file>:<line>") lies in one of
// dirs under that directory.
func countIn(found map[string]int, dirs []string, source string) {
	for _, d := range dirs {
		if strings.HasPrefix(source, filepath.Clean(d)+string(filepath.Separator)) {
			found[d]++
		}
	}
}
