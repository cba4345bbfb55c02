package serviceentry

// Reading ServiceEntries and WorkloadEntries from Kubernetes clusters
// (`serviceentry.kubernetes`) instead of files.

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/kubeclient"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/filewatch"
)

// kubeQuiet is how long the loop lets informer events gather before it
// converts the clusters' objects again.
const kubeQuiet = 100 * time.Millisecond

// runKube reads the objects of the configured clusters with a
// kubeclient.IstioWatch (the same informers and connection handling as
// the Kubernetes config source's VirtualServices and DestinationRules:
// docs/architecture.md §3.6) and publishes them through the same checks,
// merge and conversion as objects read from files:
//
//   - Each object's source is "namespace/name (cluster)". Objects are
//     taken cluster by cluster in configured order, each cluster's by kind,
//     namespace and name; the same object (same spec) in several clusters
//     is one object, a differing one in a later cluster is rejected.
//   - The first publish waits until every cluster has listed its objects
//     once. A cluster that cannot be read (credentials, no CRDs, RBAC, API
//     server down) makes the registry Degraded with the reason; what the
//     others list is published as a partial state (not Complete), which
//     the aggregator does not take as a Run's first state while it serves
//     one (restored after a restart), and afterwards the cluster's last
//     listed objects stay served (stale beats empty).
//   - An update that removed endpoints is sent again after confirmAfter
//     when nothing changed meanwhile and every cluster is read,
//     confirming it to the aggregator's hold-down, as filewatch does for
//     files.
func (r *Registry) runKube(ctx context.Context, sink registries.Sink) error {
	src := kubeclient.NewIstioWatch(r.kube)
	r.kubeWatch.Store(src)
	m := &merger{common: r.common, lastGood: map[string]Object{}}
	checks := &kubeChecks{checked: &r.kubeChecked}
	pub := registries.NewPublisher(r.common, sink, r.log, registries.PublisherOptions[int]{Compare: cmp.Compare[int]})
	changes := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = src.Run(ctx, func() {
			select {
			case changes <- struct{}{}:
			default:
			}
		})
	}()
	defer func() { cancel(); <-done }()

	confirmAfter := cmp.Or(r.confirmAfter, filewatch.DefaultConfirmAfter)
	confirm := time.NewTimer(time.Hour)
	confirm.Stop()
	endpoints := -1 // endpoints of the last publish; -1: none yet
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-confirm.C:
			// Nothing changed since an update that removed endpoints:
			// send it again, unless a cluster fails (the aggregator would
			// take the re-send for a confirmation of a state that may lack
			// what the cluster cannot show): retry after another period.
			st := kubeStatus(src.Parts())
			if st.Failing() {
				confirm.Reset(confirmAfter)
				continue
			}
			pub.Confirm()
			continue
		case <-changes:
		}
		select { // let a burst of events gather
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(kubeQuiet):
		}
		select {
		case <-changes:
		default:
		}
		parts := src.Parts()
		st := kubeStatus(parts)
		if !decided(parts) {
			if st.Failing() {
				pub.Report(st)
			}
			continue
		}
		pub.Changed(time.Now())
		services, rejected := m.mergeObjects(checks.objects(parts))
		pub.Set(0, registries.Converted{Services: services, Rejected: rejected})
		if pub.Flush(st) {
			n := 0
			for _, s := range services {
				n += len(s.Endpoints)
			}
			confirm.Stop()
			if endpoints < 0 || n < endpoints {
				confirm.Reset(confirmAfter)
			}
			endpoints = n
		}
	}
}

// decided: every cluster has listed its objects once, or cannot be read
// (then the Flush only reports Degraded until something was published).
func decided(parts []kubeclient.Part) bool {
	for _, p := range parts {
		if !p.Synced && !p.Failed && p.Err == "" {
			return false
		}
	}
	return true
}

// kubeStatus is Synced, or Degraded naming every cluster that fails.
func kubeStatus(parts []kubeclient.Part) registries.Condition {
	var errs []string
	for _, p := range parts {
		if p.Err != "" {
			errs = append(errs, "cluster "+p.Name+": "+p.Err)
		}
	}
	if len(errs) == 0 {
		return registries.Condition{}
	}
	return registries.Condition{Err: strings.Join(errs, "; ")}
}

// kubeChecks keeps the checked Object of every cluster object, by
// cluster, kind, namespace and name, with the Spec it was checked from.
// kubeclient.IstioWatch returns the same Spec pointer while an object's
// resourceVersion is unchanged (kubeclient.Object), so an event that
// changed one object checks that one only. Used by one goroutine.
type kubeChecks struct {
	last map[kubeKey]Object
	// checked counts the objects checked (tests); may be nil.
	checked *atomic.Uint64
}

type kubeKey struct{ cluster, kind, namespace, name string }

// objects turns the synced clusters' objects into checked Objects,
// cluster by cluster, each by kind, namespace and name; an object equal
// to one of an earlier cluster is left out (it is the same object).
// Objects whose Spec is the one checked last time are not checked again.
func (c *kubeChecks) objects(parts []kubeclient.Part) []Object {
	var out []Object
	seen := map[string]proto.Message{}
	next := make(map[kubeKey]Object, len(c.last))
	for _, p := range parts {
		if !p.Synced {
			continue
		}
		objs := slices.Clone(p.Objects)
		slices.SortFunc(objs, func(a, b kubeclient.Object) int {
			return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		})
		for _, f := range objs {
			key := f.Kind + "/" + f.Namespace + "/" + f.Name
			if spec, ok := seen[key]; ok && (spec == f.Spec || proto.Equal(spec, f.Spec)) {
				continue
			}
			if _, ok := seen[key]; !ok {
				seen[key] = f.Spec
			}
			k := kubeKey{p.Name, f.Kind, f.Namespace, f.Name}
			o, ok := c.last[k]
			if !ok || o.Spec != f.Spec || o.Source != f.Source {
				o = Object{Kind: f.Kind, Namespace: f.Namespace, Name: f.Name, Source: f.Source, Spec: f.Spec}
				check(&o)
				if c.checked != nil {
					c.checked.Add(1)
				}
			}
			next[k] = o
			out = append(out, o)
		}
	}
	c.last = next
	return out
}
