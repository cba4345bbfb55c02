// Package crd is the Kubernetes config source: it reads Istio's
// networking CRDs (VirtualService, DestinationRule) from one or more
// Kubernetes clusters — those of registries of kind kubernetes, with
// their credentials — and hands them to istioconfig as a Feed, so they go
// through the same per-object gate, debounce and incremental translation
// as the objects of a directory (docs/architecture.md §3.6).
//
// The clusters are read by a kubeclient.IstioWatch (typed informers of
// istio.io/client-go's networking.istio.io/v1, every list and watch call
// tracked; kubeclient/istio.go says how versions, outages and refusals
// are handled); this package turns its parts into istioconfig's.
//
// # Objects, sources, states
//
// Each object is listed on /debug/configz with source
// "namespace/name (cluster)". The same object (same kind, namespace, name
// and spec) in several clusters is one object; differing ones are a
// conflict and the later cluster's is rejected.
//
// A cluster is Starting until every informer has listed once; the source
// keeps the gateway unready until then, bounded by the gateway (twice
// syncTimeout: the objects are not saved across restarts). A cluster whose
// first list is refused for good (404: Istio's CRDs not installed, 403: no
// rights, 401) is Failed instead, is not waited for, and syncs when the
// cause is fixed (client-go keeps relisting). When the
// API server becomes unreachable the cluster is Degraded: its informers'
// caches — the last objects seen — stay in force (stale beats empty), and
// client-go relists once it answers again. A cluster whose credentials
// cannot be read is Failed and retried every 30s.
package crd

import (
	"context"
	"log/slog"

	"github.com/meshfed/meshfed/istioconfig"
	"github.com/meshfed/meshfed/kubeclient"
)

// Options configure a Source.
type Options struct {
	// Name is the config source's name.
	Name     string
	Clusters []kubeclient.Cluster
	// Namespaces limits the source to these namespaces; empty: all.
	Namespaces []string
	Logger     *slog.Logger
}

// Source reads the VirtualServices and DestinationRules of its clusters.
// It implements istioconfig.DeltaFeed: the istioconfig.Source reads it
// with Deltas, so an event costs the object it changed.
type Source struct {
	name  string
	watch *kubeclient.IstioWatch
}

var _ istioconfig.DeltaFeed = (*Source)(nil)

// New returns a Source; it does no I/O.
func New(o Options) *Source {
	return &Source{name: o.Name, watch: kubeclient.NewIstioWatch(kubeclient.IstioOptions{
		Clusters:   o.Clusters,
		Namespaces: o.Namespaces,
		Kinds:      []string{istioconfig.KindVirtualService, istioconfig.KindDestinationRule, istioconfig.KindSidecar},
		Logger:     o.Logger,
	})}
}

// Name implements istioconfig.Feed.
func (s *Source) Name() string { return s.name }

// Run implements istioconfig.Feed: one goroutine per cluster.
func (s *Source) Run(ctx context.Context, changed func()) error {
	return s.watch.Run(ctx, changed)
}

// Parts implements istioconfig.Feed: one part per cluster, in the
// configured order.
func (s *Source) Parts() []istioconfig.FeedPart {
	parts := s.watch.Parts()
	out := make([]istioconfig.FeedPart, len(parts))
	for i, p := range parts {
		out[i] = istioconfig.FeedPart{Name: p.Name, Synced: p.Synced, Failed: p.Failed, Err: p.Err}
		if len(p.Objects) > 0 {
			out[i].Objects = make([]istioconfig.FeedObject, 0, len(p.Objects))
		}
		for _, o := range p.Objects {
			out[i].Objects = append(out[i].Objects, feedObject(o))
		}
	}
	return out
}

// Deltas implements istioconfig.DeltaFeed: one delta per cluster, in the
// configured order (kubeclient.IstioWatch.Deltas).
func (s *Source) Deltas() []istioconfig.FeedDelta {
	ds := s.watch.Deltas()
	out := make([]istioconfig.FeedDelta, len(ds))
	for i, d := range ds {
		out[i] = istioconfig.FeedDelta{Full: d.Full, FeedPart: istioconfig.FeedPart{Name: d.Name, Synced: d.Synced, Failed: d.Failed, Err: d.Err}}
		if len(d.Objects) > 0 {
			out[i].Objects = make([]istioconfig.FeedObject, len(d.Objects))
		}
		for j, o := range d.Objects {
			out[i].Objects[j] = feedObject(o)
		}
		for _, k := range d.Deleted {
			out[i].Deleted = append(out[i].Deleted, istioconfig.FeedKey{Kind: k.Kind, Namespace: k.Namespace, Name: k.Name})
		}
	}
	return out
}

// feedObject is o as istioconfig reads it (kubeclient's kind names are
// istioconfig's: KindVirtualService, KindDestinationRule), with the
// informers' record as the object put in force: one record per object.
func feedObject(o kubeclient.Object) istioconfig.FeedObject {
	return istioconfig.FeedObject{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Source: o.Source, Created: o.Created, Spec: o.Spec,
		Config: o.Config}
}
