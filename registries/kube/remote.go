package kube

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/meshfed/meshfed/kubeclient"
	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

var _ registries.LauncherUser = (*Registry)(nil)

// SetLauncher gives the registry what starts remote cluster registries.
// Call it before the first Run.
func (r *Registry) SetLauncher(l registries.Launcher) {
	r.disc.mu.Lock()
	defer r.disc.mu.Unlock()
	r.disc.launcher = l
}

// discovery is a registry's secretDiscovery state. It outlives Run: remote
// clusters keep running while their parent restarts.
type discovery struct {
	mu       sync.Mutex
	launcher registries.Launcher
	remotes  map[string]*remoteCluster // by cluster (registry) name
	warned   bool                      // logged the missing launcher
}

// remoteCluster is one cluster found in a Secret.
type remoteCluster struct {
	secret string // namespace/name of the Secret it came from
	reg    *Registry
	stop   func()
}

// remoteSource is the current kubeconfig of a remote cluster registry.
type remoteSource struct {
	mu         sync.Mutex
	kubeconfig []byte
	network    string
	changed    chan struct{} // capacity 1
}

func (s *remoteSource) get() ([]byte, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kubeconfig, s.network
}

// set stores a new kubeconfig and network; it reports whether they differ.
func (s *remoteSource) set(kc []byte, network string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if bytes.Equal(s.kubeconfig, kc) && s.network == network {
		return false
	}
	s.kubeconfig, s.network = kc, network
	select {
	case s.changed <- struct{}{}:
	default:
	}
	return true
}

// clusterSpec is one cluster a Secret names.
type clusterSpec struct {
	kubeconfig []byte
	network    string
}

// parseSecret returns the clusters a remote secret names: each data key is
// a cluster name, its value a kubeconfig. Entries that cannot be used are
// returned in bad (by cluster name) with the reason.
func (r *Registry) parseSecret(s *corev1.Secret) (good map[string]clusterSpec, bad map[string]string) {
	good, bad = map[string]clusterSpec{}, map[string]string{}
	network := cmp.Or(s.Labels[labelNetwork], s.Annotations[labelNetwork], r.cfg.SecretDiscovery.Network, r.cfg.Network)
	for name, kc := range s.Data {
		if name == r.common.Name {
			continue // this cluster's own secret
		}
		if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
			bad[name] = fmt.Sprintf("cluster name %q is not a DNS label: %v", name, msgs)
			continue
		}
		if err := kubeclient.CheckRemoteKubeconfig(kc); err != nil {
			bad[name] = err.Error()
			continue
		}
		good[name] = clusterSpec{kubeconfig: kc, network: network}
	}
	return good, bad
}

// connectKubeconfig is the default clientFor.
func (r *Registry) connectKubeconfig(kc []byte) (clients, func(), error) {
	rc, err := kubeclient.RemoteConfig(kc)
	if err != nil {
		return clients{}, nil, err
	}
	return r.connect(rc)
}

// discoverSecrets watches the remote secrets of this cluster and keeps one
// launched registry per cluster they name, until ctx ends. Remote clusters
// keep running when it returns.
func (r *Registry) discoverSecrets(ctx context.Context, client kubernetes.Interface) {
	sd := r.cfg.SecretDiscovery
	log := r.log.With("secretNamespace", sd.Namespace, "secretSelector", sd.Selector)
	tr := kubeclient.NewTracker()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sd.Selector
			return client.CoreV1().Secrets(sd.Namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sd.Selector
			return client.CoreV1().Secrets(sd.Namespace).Watch(ctx, o)
		},
	}
	inf := tr.Informer("secrets/"+sd.Namespace, lw, &corev1.Secret{}, nil, func() { r.m.watchError(resSecret) })
	in := acquireInterning()
	defer releaseInterning() // after the informer stopped (deferred below)
	must(inf.SetTransform(in.slim))
	queue := workqueue.NewTyped[string]()
	enqueue := func(ev string) func(obj any) {
		return func(obj any) {
			r.m.event(resSecret, ev)
			if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				queue.Add(k)
			}
		}
	}
	if err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue(evAdd),
		UpdateFunc: func(_, n any) { enqueue(evUpdate)(n) },
		DeleteFunc: enqueue(evDelete),
	}); err != nil {
		log.Error("secretDiscovery cannot start", "error", err)
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		queue.ShutDown()
		wg.Wait()
	}()
	wg.Go(func() { inf.RunWithContext(ctx) })
	wg.Go(func() { <-ctx.Done(); queue.ShutDown() })
	wg.Go(func() {
		var last string
		for {
			select {
			case <-ctx.Done():
				return
			case <-tr.Changed():
				msg := ""
				if err := tr.Err(); err != nil {
					msg = err.Error()
				}
				if msg != last {
					if msg != "" {
						log.Warn("cannot list or watch remote secrets", "error", msg)
					}
					last = msg
				}
			}
		}
	})
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	// Synced: every existing Secret is in the cache, so clusters whose
	// Secret is gone can be stopped now (not before).
	r.reconcileAll(inf.GetStore(), log)
	for {
		k, quit := queue.Get()
		if quit {
			return
		}
		r.reconcile(k, inf.GetStore(), log)
		queue.Done(k)
	}
}

// reconcileAll reconciles every Secret in the store and every Secret
// that owned a running cluster.
func (r *Registry) reconcileAll(store cache.Store, log *slog.Logger) {
	keys := store.ListKeys()
	r.disc.mu.Lock()
	for _, rc := range r.disc.remotes {
		if !slices.Contains(keys, rc.secret) {
			keys = append(keys, rc.secret)
		}
	}
	r.disc.mu.Unlock()
	slices.Sort(keys)
	for _, k := range keys {
		r.reconcile(k, store, log)
	}
}

// reconcile makes the running remote clusters of Secret key match it.
func (r *Registry) reconcile(key string, store cache.Store, log *slog.Logger) {
	want, bad := map[string]clusterSpec{}, map[string]string{}
	if obj, ok, err := store.GetByKey(key); err == nil && ok {
		want, bad = r.parseSecret(obj.(*corev1.Secret))
	}
	for name, why := range bad {
		log.Warn("remote cluster in Secret ignored", "secret", key, "cluster", name, "reason", why)
	}

	r.disc.mu.Lock()
	if r.disc.remotes == nil {
		r.disc.remotes = map[string]*remoteCluster{}
	}
	launcher := r.disc.launcher
	var stops []func()
	var stopped []string
	for name, rc := range r.disc.remotes {
		if rc.secret != key {
			continue
		}
		if _, keep := want[name]; keep {
			continue
		}
		if _, broken := bad[name]; broken {
			continue // an unusable update: keep what runs
		}
		delete(r.disc.remotes, name)
		stops = append(stops, func() { rc.stop(); rc.reg.m.forget() })
		stopped = append(stopped, name)
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	slices.Sort(names)
	type launch struct {
		name string
		reg  *Registry
	}
	var launches []launch
	for _, name := range names {
		spec := want[name]
		if rc, ok := r.disc.remotes[name]; ok {
			if rc.secret != key {
				log.Warn("remote cluster named by two Secrets; the first one is used", "cluster", name, "secret", key, "usedSecret", rc.secret)
				continue
			}
			if rc.reg.remote.set(spec.kubeconfig, spec.network) {
				log.Info("remote cluster kubeconfig changed; switching once the new one synced", "cluster", name, "secret", key)
			}
			continue
		}
		launches = append(launches, launch{name, r.newRemote(name, spec)})
	}
	if launcher == nil && len(launches) > 0 {
		if !r.disc.warned {
			log.Warn(errNoLauncher.Error())
			r.disc.warned = true
		}
		launches = nil
	}
	r.disc.mu.Unlock()

	for i, stop := range stops {
		log.Info("remote cluster removed", "cluster", stopped[i], "secret", key)
		stop()
	}
	for _, l := range launches {
		common := registries.Common{Name: l.name, Kind: r.common.Kind, Domain: r.common.Domain, Locality: r.common.Locality}
		stop, err := launcher.Launch(r.common.Name, common, l.reg)
		if err != nil {
			log.Warn("remote cluster not started", "cluster", l.name, "secret", key, "error", err)
			continue
		}
		log.Info("remote cluster added", "cluster", l.name, "secret", key)
		r.disc.mu.Lock()
		r.disc.remotes[l.name] = &remoteCluster{secret: key, reg: l.reg, stop: stop}
		r.disc.mu.Unlock()
	}
	r.disc.mu.Lock()
	r.m.remotes.Set(float64(len(r.disc.remotes)))
	r.disc.mu.Unlock()
}

// newRemote builds the registry of a remote cluster: this registry's
// settings without credentials and secretDiscovery.
func (r *Registry) newRemote(name string, spec clusterSpec) *Registry {
	cfg := r.cfg.clone()
	cfg.Kubeconfig, cfg.Context, cfg.SecretDiscovery = "", "", nil
	cfg.Network = spec.network
	common := registries.Common{Name: name, Kind: r.common.Kind, Domain: r.common.Domain, Locality: r.common.Locality}
	reg := newRegistry(common, cfg, nil, r.log.With("cluster", name))
	reg.clientFor = r.clientFor
	reg.remote = &remoteSource{kubeconfig: spec.kubeconfig, network: spec.network, changed: make(chan struct{}, 1)}
	return reg
}

// attempt is one connection of a remote cluster registry.
type attempt struct {
	kubeconfig []byte
	network    string
	gate       *gate
	cancel     context.CancelFunc
	done       chan error // receives Run's result once
}

func (a *attempt) stop() {
	a.cancel()
	if a.done != nil {
		<-a.done
		a.done = nil
	}
}

// startAttempt connects with kc and runs a watch that publishes through a
// gate, open (live) or not.
func (r *Registry) startAttempt(ctx context.Context, sink registries.Sink, kc []byte, network string, live bool) *attempt {
	ctx, cancel := context.WithCancel(ctx)
	a := &attempt{kubeconfig: kc, network: network, gate: newGate(sink, live), cancel: cancel, done: make(chan error, 1)}
	go func() {
		client, closeClient, err := r.clientFor(kc)
		if err != nil {
			a.done <- registries.Permanent(err)
			return
		}
		err = newWatch(r, client, r.clusterInfo(network)).run(ctx, a.gate)
		closeClient()
		a.done <- err
	}()
	return a
}

// runRemote runs a remote cluster registry: one watch with the current
// kubeconfig; when the Secret changes, a second watch with the new one
// whose state is held back until it synced, then the first one stops and
// the second one publishes (make-before-break).
func (r *Registry) runRemote(ctx context.Context, sink registries.Sink) error {
	kc, network := r.remote.get()
	active := r.startAttempt(ctx, sink, kc, network, true)
	var next *attempt
	defer func() {
		if next != nil {
			next.stop()
		}
		active.stop()
	}()
	for {
		var nextSynced <-chan struct{}
		var nextDone <-chan error
		if next != nil {
			nextSynced, nextDone = next.gate.synced, next.done
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-active.done:
			active.done = nil
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		case <-r.remote.changed:
			kc, network := r.remote.get()
			if next != nil {
				next.stop()
				next = nil
			}
			if bytes.Equal(kc, active.kubeconfig) && network == active.network {
				continue
			}
			next = r.startAttempt(ctx, sink, kc, network, false)
		case <-nextSynced:
			r.log.Info("new kubeconfig synced; replacing the old connection")
			active.stop()
			next.gate.open()
			active, next = next, nil
		case err := <-nextDone:
			next.done = nil
			r.log.Warn("new kubeconfig from the Secret cannot be used; keeping the old connection", "error", err)
			next.cancel()
			next = nil
		}
	}
}

// gate passes a watch's updates to the sink once open; until then it
// keeps the last update with a state (and drops the others) and closes
// synced at the first.
type gate struct {
	mu       sync.Mutex
	sink     registries.Sink
	live     bool
	held     *heldUpdate
	synced   chan struct{}
	isSynced bool
}

type heldUpdate struct {
	shard model.ShardKey
	u     registries.Update
}

func newGate(sink registries.Sink, live bool) *gate {
	return &gate{sink: sink, live: live, synced: make(chan struct{})}
}

// Publish implements registries.Sink.
func (g *gate) Publish(shard model.ShardKey, u registries.Update) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if u.HasState && !g.isSynced {
		g.isSynced = true
		close(g.synced)
	}
	switch {
	case g.live:
		g.sink.Publish(shard, u)
	case u.HasState:
		g.held = &heldUpdate{shard, u}
	}
}

// open makes the gate pass updates through, starting with the held one.
func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.live = true
	if h := g.held; h != nil {
		g.held = nil
		g.sink.Publish(h.shard, h.u)
	}
}

// stopAll stops every remote cluster; for tests and shutdown of a
// registry that is not supervised by a gateway.
func (r *Registry) stopAll() {
	r.disc.mu.Lock()
	remotes := r.disc.remotes
	r.disc.remotes = nil
	r.disc.mu.Unlock()
	for _, rc := range remotes {
		rc.stop()
	}
}
