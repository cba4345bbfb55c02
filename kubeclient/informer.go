package kubeclient

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

// RetryBackoff is how an Informer's reflector waits before it retries a
// refused or throttled watch and before it lists again after a watch
// ended with an error (an expired resource version after an API server
// restart, above all): 200ms doubling to a 5s cap, with up to 50% jitter
// (so 5–7.5s per wait at the cap), reset after two minutes without a wait.
//
// client-go's shared informers wait 0.8s doubling to 30s with full jitter
// (30–60s at the cap) and cannot be told otherwise (v0.37); one API server
// restart advances that backoff several times, and the relist that brings
// the changes made meanwhile then waited 13–82s in a measured kill and
// restart loop (docs/registries/kubernetes.md#outages). client-go's cap
// protects an API server from thousands of kubelets; meshfed runs a few
// informers per cluster, so during an outage the 5s cap costs each API
// server about one request per second.
var RetryBackoff = wait.Backoff{
	Duration: 200 * time.Millisecond,
	Factor:   2,
	Jitter:   0.5,
	Cap:      5 * time.Second,
	Steps:    int(math.Ceil(float64(5*time.Second) / float64(200*time.Millisecond))),
}

// Informer keeps the objects of one resource in an indexer, listed and
// watched by a client-go Reflector, and calls its handlers on every
// change. It is client-go's shared informer reduced to what meshfed uses,
// built from client-go's own parts (Reflector, RealFIFO, Indexer) so that
// its reflector retries on RetryBackoff. Differences: handlers are added
// before Run and are called in order on the goroutine that runs the
// informer (they must not block; every meshfed handler enqueues), and an
// object is in the indexer before its handlers see it.
type Informer struct {
	name     string
	lw       cache.ListerWatcher
	obj      runtime.Object
	indexer  cache.Indexer
	indexers cache.Indexers
	mu       sync.Mutex
	handlers []cache.ResourceEventHandler
	trans    cache.TransformFunc
	fifo     *cache.RealFIFO // set by Run
}

// NewInformer returns an Informer named name over lw, for objects of
// type obj, keyed by namespace/name and indexed by indexers (nil: none).
func NewInformer(name string, lw cache.ListerWatcher, obj runtime.Object, indexers cache.Indexers) *Informer {
	if indexers == nil {
		indexers = cache.Indexers{}
	}
	return &Informer{
		name:     name,
		lw:       lw,
		obj:      obj,
		indexer:  cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, indexers),
		indexers: indexers,
	}
}

// SetKeyFunc makes the informer's cache key objects by f instead of
// cache.DeletionHandlingMetaNamespaceKeyFunc, whose keys f must equal
// (it may return them without allocating one, as a substring of a string
// the object holds). It replaces the cache: call it before GetIndexer.
// It fails once the informer runs.
func (i *Informer) SetKeyFunc(f cache.KeyFunc) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.fifo != nil {
		return errStarted
	}
	i.indexer = cache.NewIndexer(f, i.indexers)
	return nil
}

var errStarted = errors.New("informer already started")

// SetTransform sets the function applied to every object before it is
// stored (nil: none). It fails once the informer runs.
func (i *Informer) SetTransform(f cache.TransformFunc) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.fifo != nil {
		return errStarted
	}
	i.trans = f
	return nil
}

// AddEventHandler adds h, called for every add (with isInInitialList
// true for the objects of the first list), update and delete. It fails
// once the informer runs.
func (i *Informer) AddEventHandler(h cache.ResourceEventHandler) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.fifo != nil {
		return errStarted
	}
	i.handlers = append(i.handlers, h)
	return nil
}

// GetIndexer returns the informer's cache; callers must not modify what
// it returns.
func (i *Informer) GetIndexer() cache.Indexer { return i.indexer }

// GetStore is GetIndexer as a Store.
func (i *Informer) GetStore() cache.Store { return i.indexer }

// HasSynced reports whether the first list has been stored and handed to
// the handlers.
func (i *Informer) HasSynced() bool {
	i.mu.Lock()
	f := i.fifo
	i.mu.Unlock()
	return f != nil && f.HasSynced()
}

// RunWithContext lists, watches and calls the handlers until ctx ends;
// it returns once the reflector and the handlers stopped. An Informer
// runs once.
func (i *Informer) RunWithContext(ctx context.Context) {
	i.mu.Lock()
	if i.fifo != nil {
		i.mu.Unlock()
		panic("kubeclient: Informer " + i.name + " run twice")
	}
	// Atomic events, as client-go's own informers use by default since
	// v0.36: a list is one queued replacement, applied to the indexer at
	// once (replaceAll).
	fifo := cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{
		Name:                  i.name,
		KeyFunction:           cache.MetaNamespaceKeyFunc,
		Transformer:           i.trans,
		AtomicEvents:          true,
		UnlockWhileProcessing: true,
	})
	i.fifo = fifo
	handlers := i.handlers
	i.mu.Unlock()

	// The reflector's own logs are dropped: its failures reach the
	// Tracker, whose owner reports them once per change of health rather
	// than once per retry.
	quiet := logr.Discard()
	backoff := RetryBackoff
	r := cache.NewReflectorWithOptions(i.lw, i.obj, fifo, cache.ReflectorOptions{
		Name:            i.name,
		TypeDescription: i.name,
		Backoff:         &backoff,
		Logger:          &quiet,
	})
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { r.RunWithContext(logr.NewContext(ctx, quiet)) })
	stop := context.AfterFunc(ctx, fifo.Close)
	defer stop()
	for {
		_, err := fifo.Pop(func(obj any, isInInitialList bool) error {
			deltas, _ := obj.(cache.Deltas)
			i.process(deltas, isInInitialList, handlers)
			return nil
		})
		if errors.Is(err, cache.ErrFIFOClosed) {
			return
		}
	}
}

// process stores one queued change and hands it to the handlers, like
// client-go's informers do. The indexer fails only for an object without
// a name or an index function's error; such an object is dropped.
func (i *Informer) process(deltas cache.Deltas, isInInitialList bool, handlers []cache.ResourceEventHandler) {
	for _, d := range deltas {
		switch d.Type {
		case cache.ReplacedAll:
			if info, ok := d.Object.(cache.ReplacedAllInfo); ok {
				i.replaceAll(info, isInInitialList, handlers)
			}
		case cache.Sync, cache.Replaced, cache.Added, cache.Updated:
			if old, exists, err := i.indexer.Get(d.Object); err == nil && exists {
				if i.indexer.Update(d.Object) != nil {
					continue
				}
				for _, h := range handlers {
					h.OnUpdate(old, d.Object)
				}
			} else {
				if i.indexer.Add(d.Object) != nil {
					continue
				}
				for _, h := range handlers {
					h.OnAdd(d.Object, isInInitialList)
				}
			}
		case cache.Deleted:
			if i.indexer.Delete(d.Object) != nil {
				continue
			}
			for _, h := range handlers {
				h.OnDelete(d.Object)
			}
		}
	}
}

// replaceAll applies a list: the indexer holds exactly its objects, then
// the handlers see the objects gone from it deleted (with their last
// state) and every listed object added or updated, in list order.
func (i *Informer) replaceAll(info cache.ReplacedAllInfo, isInInitialList bool, handlers []cache.ResourceEventHandler) {
	known := i.indexer.ListKeys()
	if len(known) == 0 { // the first list: nothing to compare with
		if err := i.indexer.Replace(info.Objects, info.ResourceVersion); err != nil {
			return
		}
		for _, obj := range info.Objects {
			for _, h := range handlers {
				h.OnAdd(obj, isInInitialList)
			}
		}
		return
	}
	listed := make(map[string]struct{}, len(info.Objects))
	olds := make([]any, len(info.Objects))
	for n, obj := range info.Objects {
		key, err := cache.MetaNamespaceKeyFunc(obj)
		if err != nil {
			continue
		}
		listed[key] = struct{}{}
		if old, ok, err := i.indexer.GetByKey(key); err == nil && ok {
			olds[n] = old
		}
	}
	var gone []cache.DeletedFinalStateUnknown
	for _, key := range known {
		if _, ok := listed[key]; ok {
			continue
		}
		if old, ok, err := i.indexer.GetByKey(key); err == nil && ok {
			gone = append(gone, cache.DeletedFinalStateUnknown{Key: key, Obj: old})
		}
	}
	if err := i.indexer.Replace(info.Objects, info.ResourceVersion); err != nil {
		return
	}
	for _, g := range gone {
		for _, h := range handlers {
			h.OnDelete(g)
		}
	}
	for n, obj := range info.Objects {
		for _, h := range handlers {
			if olds[n] != nil {
				h.OnUpdate(olds[n], obj)
			} else {
				h.OnAdd(obj, isInInitialList)
			}
		}
	}
}
