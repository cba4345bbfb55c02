package serviceentry

// Reading ServiceEntries and WorkloadEntries from Kubernetes clusters
// (`serviceentry.kubernetes`) instead of files.

import (
	"cmp"
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/meshfed/meshfed/kubeclient"
	"github.com/meshfed/meshfed/registries"
	"github.com/meshfed/meshfed/registries/filewatch"
)

// Coalescing of informer events (registries.Debouncer with Leading): an
// event after kubeQuiet without any is read at once; the events of a
// burst that follow it are read once kubeQuiet passed without another,
// at most kubeMaxWait after the first. A read costs what changed
// (kubeObjects), so a burst of a `kubectl apply` is read a few times, not
// once per object.
const (
	kubeQuiet   = 10 * time.Millisecond
	kubeMaxWait = 100 * time.Millisecond
)

// runKube reads the objects of the configured clusters with a
// kubeclient.IstioWatch (the same informers and connection handling as
// the Kubernetes config source's VirtualServices and DestinationRules:
// docs/architecture.md §3.6) and publishes them through the same checks,
// merge and conversion as objects read from files (keyed: one Publisher
// key per ServiceEntry; an event converts and compares the objects it
// changed, not the others):
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
	pub := registries.NewPublisher(r.common, sink, r.log, registries.PublisherOptions[string]{Compare: strings.Compare})
	objs := newKubeObjects(newKeyed(r), len(r.kube.Clusters), &r.kubeChecked)
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
	defer confirm.Stop()
	deb := registries.Debouncer{Quiet: kubeQuiet, MaxWait: kubeMaxWait, Leading: true}
	wake := time.NewTimer(time.Hour)
	wake.Stop()
	defer wake.Stop()
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
			// Changes read meanwhile are published instead.
			deltas := src.Deltas()
			if changed := objs.apply(deltas, pub); !changed && !deb.Pending() {
				if kubeStatus(parts(deltas)).Failing() {
					confirm.Reset(confirmAfter)
				} else {
					pub.Confirm()
				}
				continue
			}
			deb.Add(time.Now())
		case <-changes:
			deb.Add(time.Now())
		case <-wake.C:
		}
		due, wait := deb.Next(time.Now())
		if !due {
			if deb.Pending() {
				wake.Reset(wait)
			}
			continue
		}
		deb.Done()
		deltas := src.Deltas()
		objs.apply(deltas, pub)
		ps := parts(deltas)
		st := kubeStatus(ps)
		if !decided(ps) {
			if st.Failing() {
				pub.Report(st)
			}
			continue
		}
		pub.Changed(time.Now())
		if pub.Flush(st) {
			_, n, _ := pub.SentCounts() // not Sent: that assembles every key after a delta
			confirm.Stop()
			if endpoints < 0 || n < endpoints {
				confirm.Reset(confirmAfter)
			}
			endpoints = n
		}
	}
}

// parts are the clusters' states of deltas.
func parts(deltas []kubeclient.Delta) []kubeclient.Part {
	ps := make([]kubeclient.Part, len(deltas))
	for i, d := range deltas {
		ps[i] = d.Part
	}
	return ps
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

// kubeObjects is runKube's state over the clusters' objects, fed to
// keyed (keyed.place): cluster i's object is declared under its object
// key at order{key, i}, so that keyed's rules — first declaration wins,
// an invalid object keeps its last good version, a host is served by the
// first ServiceEntry claiming it — give the order runKube documents
// (clusters in configured order, each cluster's objects by kind,
// namespace and name), and an object equal to an earlier cluster's is
// one object. It keeps each object's checked Object with the Spec it was
// checked from: kubeclient.IstioWatch hands the same Spec pointer back
// while an object's resourceVersion is unchanged, so an event checks,
// resolves and converts the object it changed only. Each object is held
// once, by keyed's record of its key (no map of its own: per-object state
// at size, docs/architecture.md §8). Used by one goroutine.
type kubeObjects struct {
	k        *keyed
	clusters int
	// checked counts the objects checked (tests); may be nil.
	checked *atomic.Uint64
}

func newKubeObjects(k *keyed, clusters int, checked *atomic.Uint64) *kubeObjects {
	k.kube = true
	return &kubeObjects{k: k, clusters: clusters, checked: checked}
}

// kubeKey is the object key (objKey) of a cluster object.
func kubeKey(kind, namespace, name string) string { return kind + "/" + namespace + "/" + name }

// apply takes the clusters' deltas (one per cluster, in configured order)
// in and sets the Publisher keys of what they changed; it reports whether
// any object changed.
func (s *kubeObjects) apply(deltas []kubeclient.Delta, pub *registries.Publisher[string]) bool {
	touched := map[string]bool{}
	for i, d := range deltas {
		if d.Full {
			listed := make(map[string]bool, len(d.Objects))
			for _, f := range d.Objects {
				listed[kubeKey(f.Kind, f.Namespace, f.Name)] = true
			}
			for key := range s.k.recs {
				if !listed[key] {
					s.k.place(key, i, nil, touched)
				}
			}
		}
		for _, key := range d.Deleted {
			s.k.place(kubeKey(key.Kind, key.Namespace, key.Name), i, nil, touched)
		}
		for _, f := range d.Objects {
			key := kubeKey(f.Kind, f.Namespace, f.Name)
			s.k.place(key, i, s.check(s.k.declared(key, i), f), touched)
		}
	}
	if len(touched) > 0 {
		s.k.apply(touched, pub)
	}
	return len(touched) > 0
}

// check returns f checked, as a new Object, or last when it was checked
// from the same Spec and source.
func (s *kubeObjects) check(last *Object, f kubeclient.Object) *Object {
	if last != nil && last.Spec == f.Spec && last.Source == f.Source && f.Spec != nil {
		return last
	}
	o := &Object{Kind: f.Kind, Namespace: f.Namespace, Name: f.Name, Source: f.Source, Spec: f.Spec}
	check(o)
	if s.checked != nil {
		s.checked.Add(1)
	}
	return o
}
