// Package chart renders the Helm chart deploy/helm/meshfed with Helm's own
// template engine (as `helm template` does), for `make manifests`, the
// drift check of `make lint` and the tests that apply the chart to a real
// API server.
package chart

import (
	"bytes"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/strvals"
)

// Dir is the chart's directory relative to the repository root.
const Dir = "deploy/helm/meshfed"

// RepoDir returns the repository root (found from this source file), so
// tests in any package can name the chart.
func RepoDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Options are what `helm template` takes.
type Options struct {
	ChartDir    string   // default: RepoDir()/Dir
	ReleaseName string   // default "meshfed"
	Namespace   string   // default "meshfed"
	ValuesFiles []string // -f, in order
	Set         []string // --set key=value, applied after the files
}

// Render returns the chart's manifests as one multi-document YAML stream,
// the objects in the order Helm installs them (InstallOrder), each
// preceded by a "# Source: <template>" comment as `helm template` writes.
func Render(o Options) ([]byte, error) {
	if o.ChartDir == "" {
		o.ChartDir = filepath.Join(RepoDir(), Dir)
	}
	if o.ReleaseName == "" {
		o.ReleaseName = "meshfed"
	}
	if o.Namespace == "" {
		o.Namespace = "meshfed"
	}
	ch, err := loader.Load(o.ChartDir)
	if err != nil {
		return nil, fmt.Errorf("load chart: %w", err)
	}
	vals := map[string]any{}
	for _, f := range o.ValuesFiles {
		v, err := chartutil.ReadValuesFile(f)
		if err != nil {
			return nil, err
		}
		vals = chartutil.MergeTables(v.AsMap(), vals)
	}
	for _, s := range o.Set {
		if err := strvals.ParseInto(s, vals); err != nil {
			return nil, fmt.Errorf("--set %s: %w", s, err)
		}
	}
	if err := chartutil.ProcessDependenciesWithMerge(ch, vals); err != nil {
		return nil, err
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{
		Name: o.ReleaseName, Namespace: o.Namespace, Revision: 1, IsInstall: true,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		return nil, err
	}
	for name := range files {
		if strings.HasSuffix(name, "NOTES.txt") || strings.HasPrefix(filepath.Base(name), "_") {
			delete(files, name)
		}
	}
	_, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	for _, m := range manifests {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Name, strings.TrimSpace(m.Content))
	}
	return b.Bytes(), nil
}
