// Package serviceentry is the `serviceentry` registry: Istio ServiceEntry
// and WorkloadEntry objects (istio.io/api networking v1; v1beta1 and
// v1alpha3 accepted) read from watched files, directories or globs of
// multi-document, kubectl-style YAML, or from Kubernetes clusters (kube.go),
// so that existing Istio YAML for VMs and external services is served
// unchanged. Each host of a ServiceEntry
// is a service with the entry's ports; its endpoints are the entry's own
// or the WorkloadEntries its workloadSelector picks (Convert says how each
// field maps).
//
// Domains. Like every registry it owns one DNS domain (clusters.yaml
// `domain`), checked against the other registries' domains when the
// config loads. A ServiceEntry may name any host, so the domain must
// cover every host the registry serves: a host outside it is rejected
// alone, listed on /debug/conflictz with its file:line, while the entry's
// other hosts are served (docs/architecture.md §3.4).
//
// Bad input is rejected one item at a time: a file that is not YAML keeps
// its last good objects (the registry is Degraded, invalid); an invalid
// object is rejected alone with its file:line while its last good version
// (same kind, namespace and name) stays served; a host or an endpoint
// that cannot be served is rejected alone; an endpoint whose address is
// not usable is quarantined by the aggregator's normalization gate.
package serviceentry

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/meshfed/meshfed/kubeclient"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/filewatch"
)

// New implements registries.Config. It does no I/O: a missing file is not
// an error at start (see Registry).
func (c *Config) New(common registries.Common, log *slog.Logger) (registries.Registry, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if k := c.Kubernetes; k != nil {
		return &Registry{
			common: common,
			log:    log.With("clusters", strings.Join(k.Clusters, ",")),
			kube: kubeclient.IstioOptions{Clusters: c.clusters(), Namespaces: k.Namespaces, Kinds: []string{KindServiceEntry, KindWorkloadEntry}, Logger: log,
				ShareLabels: (&registries.LabelSets{}).Share},
		}, nil
	}
	r := &Registry{common: common}
	r.patterns, r.timing, r.log = c.Watched(log)
	return r, nil
}

// Registry publishes the services of the ServiceEntries and
// WorkloadEntries in its files. It watches them with the shared loop of
// registries/filewatch (the file registry's: settle time, re-read of the
// files that changed, last good state per file, Degraded on a missing or
// broken file) and merges every file's objects in path order. An object
// declared twice (same kind, namespace and name) is served from its first
// declaration; the later one is rejected. A Registry holds no state
// between Run calls.
type Registry struct {
	common   registries.Common
	patterns []string
	log      *slog.Logger
	// timing: zero fields are filewatch's defaults (tests set them).
	timing filewatch.Timing
	// kube, with Clusters, reads clusters instead of files (kube.go).
	kube kubeclient.IstioOptions
	// confirmAfter: zero is filewatch.DefaultConfirmAfter (tests set it).
	confirmAfter time.Duration
	// kubeChecked counts the cluster objects checked (kubeObjects): one
	// per changed object, not one per object per event. For tests.
	kubeChecked atomic.Uint64
	// kubeWatch is the watch of the running runKube (tests).
	kubeWatch atomic.Pointer[kubeclient.IstioWatch]
	// work counts what the Runs over files did (Work).
	work work
}

// Run implements registries.Registry. It fails only when the file watcher
// cannot be created or breaks.
func (r *Registry) Run(ctx context.Context, sink registries.Sink) error {
	if len(r.kube.Clusters) > 0 {
		return r.runKube(ctx, sink)
	}
	return r.fileWatch().Run(ctx, sink)
}

// fileWatch returns the shared watch loop (registries/filewatch) over the
// files: each Run keeps every file's documents by the hash of their bytes
// (docs.go) and publishes one key per ServiceEntry.
func (r *Registry) fileWatch() *filewatch.Watch[[]Object] {
	k := newKeyed(r)
	return &filewatch.Watch[[]Object]{
		Patterns: r.patterns,
		Parse: func(path string, data []byte) ([]Object, error) {
			cache := k.caches[path]
			if cache == nil {
				cache = &docCache{}
				k.caches[path] = cache
			}
			return parseDocs(path, data, cache, &r.work)
		},
		Publish: k.publish,
		Equal:   sameObjects,
		Shard:   r.common.Shard(),
		Log:     r.log,
		Timing:  r.timing,
		Read:    filewatch.CountReads(reloads, r.common.Name),
	}
}

// sameObjects: two parses of a file hold the same objects.
func sameObjects(a, b []Object) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Kind != y.Kind || x.Namespace != y.Namespace || x.Name != y.Name || x.Source != y.Source || x.Hash != y.Hash || errText(x.Err) != errText(y.Err) {
			return false
		}
	}
	return true
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// merger merges the files' objects, keeping the last good version of an
// object that turned invalid. Used from one Run's goroutine only.
type merger struct {
	common   registries.Common
	lastGood map[string]Object // by kind/namespace/name
}

// mergeObjects merges the objects of every source (files in path order,
// clusters in configured order), keeping the last good version of an
// object that turned invalid, and converts them.
func (m *merger) mergeObjects(objs []Object) ([]model.Service, []model.Rejection) {
	inForce, rejected := m.resolve(objs)
	services, convRejected := Convert(inForce, m.common)
	return services, append(rejected, convRejected...)
}

// resolve returns the objects in force, in order: the first declaration
// of each object, or its last good version when it is invalid; and the
// rejection of every duplicate and invalid object.
func (m *merger) resolve(objs []Object) (inForce []Object, rejected []model.Rejection) {
	next := map[string]Object{}
	first := map[string]string{} // key → source of its first declaration
	nIn, nRej := map[string]int{}, map[string]int{}
	for _, o := range objs {
		key := o.Kind + "/" + o.Namespace + "/" + o.Name
		subject := o.Source
		if o.Kind != "" {
			subject += " " + describe(o)
		}
		if at, dup := first[key]; dup && o.Kind != "" {
			nRej[o.Kind]++
			rejected = append(rejected, model.Rejection{Registry: m.common.Name, Subject: subject,
				Reason: fmt.Sprintf("object rejected: %s is already declared at %s, which is served", describe(o), at)})
			continue
		}
		if o.Kind != "" {
			first[key] = o.Source
		}
		if o.Err != nil {
			nRej[o.Kind]++
			last, kept := m.lastGood[key]
			kept = kept && o.Kind != ""
			rejected = append(rejected, problemRejections(m.common.Name, o, last, kept)...)
			if !kept {
				continue
			}
			o = last
		}
		next[key] = o
		nIn[o.Kind]++
		inForce = append(inForce, o)
	}
	m.lastGood = next
	setObjects(m.common.Name, nIn, nRej)
	return inForce, rejected
}

// problemRejections rejects the invalid object o, one rejection per
// problem, each at its field; kept: its last good version last stays
// served.
func problemRejections(registry string, o, last Object, kept bool) []model.Rejection {
	var out []model.Rejection
	for _, p := range problems(o) {
		reason := "object rejected: " + p.msg
		if kept {
			reason += "; its last good version (" + last.Source + ") stays served"
		}
		at := p.at
		if o.Kind != "" {
			at += " " + describe(o)
		}
		out = append(out, model.Rejection{Registry: registry, Subject: at, Reason: reason})
	}
	return out
}

// Work returns what this Registry's Runs over files have done so far:
// objects decoded from YAML and checked, ServiceEntries converted, and
// Publisher keys compared (one key per ServiceEntry). An edit of one
// object in files of any size decodes one; an edit of a ServiceEntry
// converts and compares it alone, one of a WorkloadEntry every
// ServiceEntry with a workloadSelector in its namespace. For tests and
// diagnostics.
func (r *Registry) Work() (decoded, converted, compared uint64) {
	return r.work.decoded.Load(), r.work.converted.Load(), r.work.compared.Load()
}
