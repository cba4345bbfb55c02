package serviceentry

// Reading ServiceEntries and WorkloadEntries from Kubernetes clusters
// (`serviceentry.kubernetes`) instead of files.

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

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
// keyed: each cluster object is declared at its own path (kubePath:
// clusters in configured order, each cluster's objects by kind,
// namespace and name), so that keyed's rules — first declaration wins,
// an invalid object keeps its last good version, a host is served by the
// first ServiceEntry claiming it — give the order runKube documents. It
// keeps each object's checked Object with the Spec it was checked from:
// kubeclient.IstioWatch hands the same Spec pointer back while an
// object's resourceVersion is unchanged, so an event checks, resolves and
// converts the object it changed only. Each object is held once: the
// one-object slice kept here is the one declared in keyed. Used by one
// goroutine.
type kubeObjects struct {
	k    *keyed
	objs []map[kubeclient.ObjectKey][]Object // per cluster: the checked object, alone in its slice
	// checked counts the objects checked (tests); may be nil.
	checked *atomic.Uint64
}

func newKubeObjects(k *keyed, clusters int, checked *atomic.Uint64) *kubeObjects {
	s := &kubeObjects{k: k, objs: make([]map[kubeclient.ObjectKey][]Object, clusters), checked: checked}
	for i := range s.objs {
		s.objs[i] = map[kubeclient.ObjectKey][]Object{}
	}
	return s
}

// kubePath is where cluster i's object key is declared in keyed: "\x00"
// sorts below any character of a kind or a name, so paths sort as
// (cluster, kind, namespace, name).
func kubePath(i int, key kubeclient.ObjectKey) string {
	return fmt.Sprintf("%04d\x00%s\x00%s\x00%s", i, key.Kind, key.Namespace, key.Name)
}

// apply takes the clusters' deltas (one per cluster, in configured order)
// in and sets the Publisher keys of what they changed; it reports whether
// any object changed. The same object (an equal spec) in several clusters
// is one object, the first cluster's; a differing one is declared too,
// and keyed rejects it as declared twice.
func (s *kubeObjects) apply(deltas []kubeclient.Delta, pub *registries.Publisher[string]) bool {
	touched := map[kubeclient.ObjectKey]bool{}
	for i, d := range deltas {
		last := s.objs[i]
		if d.Full {
			next := make(map[kubeclient.ObjectKey][]Object, len(d.Objects))
			for key := range last {
				touched[key] = true
			}
			for _, f := range d.Objects {
				key := kubeclient.ObjectKey{Kind: f.Kind, Namespace: f.Namespace, Name: f.Name}
				next[key] = s.check(last[key], f)
				touched[key] = true
			}
			s.objs[i] = next
			continue
		}
		for _, key := range d.Deleted {
			delete(last, key)
			touched[key] = true
		}
		for _, f := range d.Objects {
			key := kubeclient.ObjectKey{Kind: f.Kind, Namespace: f.Namespace, Name: f.Name}
			last[key] = s.check(last[key], f)
			touched[key] = true
		}
	}
	keys := map[string]bool{}
	for key := range touched {
		var first proto.Message
		for i, objs := range s.objs {
			o, ok := objs[key]
			if !ok || (first != nil && (first == o[0].Spec || proto.Equal(first, o[0].Spec))) {
				s.k.set(kubePath(i, key), nil, keys)
				continue
			}
			if first == nil {
				first = o[0].Spec
			}
			s.k.set(kubePath(i, key), o, keys)
		}
	}
	if len(keys) > 0 {
		s.k.apply(keys, pub)
	}
	return len(keys) > 0
}

// check returns f checked, alone in a new slice, or last (the same slice)
// when it was checked from the same Spec and source.
func (s *kubeObjects) check(last []Object, f kubeclient.Object) []Object {
	if len(last) == 1 && last[0].Spec == f.Spec && last[0].Source == f.Source && f.Spec != nil {
		return last
	}
	o := []Object{{Kind: f.Kind, Namespace: f.Namespace, Name: f.Name, Source: f.Source, Spec: f.Spec}}
	check(&o[0])
	if s.checked != nil {
		s.checked.Add(1)
	}
	return o
}
