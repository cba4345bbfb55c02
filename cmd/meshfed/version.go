package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version and revision may be set at link time (the Makefile's
// -ldflags -X main.version=... -X main.revision=...). When they are not,
// they come from the build info Go records: the module version of a
// `go install github.com/meshfed/meshfed/cmd/meshfed@vX.Y.Z` and the VCS
// revision of a build from a checkout.
var version, revision string

// buildInfo says which build runs: `meshfed version`, `meshfed --version`,
// the meshfed_build_info metric, the image labels.
type buildInfo struct {
	Version   string // a release tag (v0.1.0), a git describe, or "dev"
	Revision  string // the VCS commit, "+dirty" when built from a modified tree; "unknown" if not recorded
	GoVersion string
}

// readBuildInfo combines the link-time values with debug.ReadBuildInfo.
func readBuildInfo() buildInfo {
	b := buildInfo{Version: version, Revision: revision, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		var rev string
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if b.Revision == "" && rev != "" {
			b.Revision = rev
			if dirty {
				b.Revision += "+dirty"
			}
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	if b.Revision == "" {
		b.Revision = "unknown"
	}
	return b
}

// String is the one line `meshfed version` and `meshfed --version` print.
func (b buildInfo) String() string {
	return fmt.Sprintf("meshfed %s (revision %s, %s)", b.Version, b.Revision, b.GoVersion)
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the VCS revision and the Go version of this build",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), readBuildInfo())
		},
	}
}
