package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Instance is one endpoint the churn generator registered: service Svc's
// instance ID at IP:Port.
type Instance struct {
	Svc, ID int
	IP      string
	Port    int
	Healthy bool
}

// Kind is one registry of the run: how to register, deregister and flip the
// health of an instance in its backend (each call idempotent: the churn
// generator retries it until the backend confirms), and its bounds.
type Kind interface {
	Name() string  // the registry's name in clusters.yaml
	Entry() string // its clusters.yaml registries item, YAML flow mapping
	Host(svc int) string
	Port(svc int) int // the endpoints' port
	Add(ctx context.Context, in Instance) error
	Remove(ctx context.Context, in Instance) error
	SetHealth(ctx context.Context, in Instance) error
	Bounds() Bounds
}

// BadItems is a Kind that can inject an item its registry must refuse
// alone (quarantine, /debug/conflictz) and take it out again.
type BadItems interface {
	Bad(ctx context.Context, on bool) error
}

// Broken is a Kind whose backend is files that can be broken (not YAML)
// and fixed: the registry keeps its last good state meanwhile.
type Broken interface {
	Break(on bool) error
}

// Churn shape: every kind has churnServices services, each kept between
// minInstances and maxInstances instances, so that one change never drops
// more than a small share of a registry's endpoints (the hold-down,
// maxDeleteRatio 0.5, never holds churn).
const (
	churnServices = 3
	minInstances  = 3
	maxInstances  = 6
	// opTimeout bounds one operation's retries; after it the key is
	// uncertain (excluded from the checks) and reported.
	opTimeout = 60 * time.Second
)

// churner drives one kind at a steady rate and records the truth.
type churner struct {
	kind  Kind
	idx   int // the kind's index: its addresses are 10.<idx>.x.y
	hist  *History
	rnd   *rand.Rand
	every time.Duration

	mu       sync.Mutex
	paused   int
	inFlight sync.WaitGroup
	live     [churnServices][]Instance
	nextID   int
	ops      map[Op]int
	failures []string
}

func newChurner(k Kind, idx int, h *History, seed uint64, every time.Duration) *churner {
	return &churner{kind: k, idx: idx, hist: h, rnd: rand.New(rand.NewPCG(seed, uint64(idx))), every: every, ops: map[Op]int{}}
}

func (c *churner) newInstance(svc int) Instance {
	c.nextID++
	id := c.nextID
	return Instance{Svc: svc, ID: id, IP: fmt.Sprintf("10.%d.%d.%d", c.idx, id/250, id%250+1), Port: c.kind.Port(svc), Healthy: true}
}

func (c *churner) key(in Instance) Key {
	return Key{Host: c.kind.Host(in.Svc), Addr: fmt.Sprintf("%s:%d", in.IP, in.Port)}
}

// seed registers the initial instances (not paced).
func (c *churner) seed(ctx context.Context) error {
	for svc := range churnServices {
		for range minInstances + 1 {
			if err := c.do(ctx, OpAdd, c.newInstance(svc)); err != nil {
				return err
			}
		}
	}
	return nil
}

// run churns until ctx ends.
func (c *churner) run(ctx context.Context) {
	tick := time.NewTicker(c.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		c.mu.Lock()
		if c.paused > 0 {
			c.mu.Unlock()
			continue
		}
		c.inFlight.Add(1)
		c.mu.Unlock()
		c.step(ctx)
		c.inFlight.Done()
	}
}

func (c *churner) step(ctx context.Context) {
	if _, ok := c.kind.(static); ok {
		return
	}
	svc := c.rnd.IntN(churnServices)
	c.mu.Lock()
	n := len(c.live[svc])
	c.mu.Unlock()
	switch r := c.rnd.IntN(3); {
	case r == 0 && n < maxInstances || n <= minInstances && !noRemoves(c.kind):
		in := c.newInstance(svc)
		in.Healthy = c.rnd.IntN(4) != 0
		if _, ok := c.kind.(noHealth); ok {
			in.Healthy = true
		}
		_ = c.do(ctx, OpAdd, in)
	case r == 1 && !noRemoves(c.kind):
		c.mu.Lock()
		in := c.live[svc][c.rnd.IntN(n)]
		c.mu.Unlock()
		_ = c.do(ctx, OpRemove, in)
	default:
		if _, ok := c.kind.(noHealth); ok {
			return
		}
		c.mu.Lock()
		in := c.live[svc][c.rnd.IntN(n)]
		c.mu.Unlock()
		in.Healthy = !in.Healthy
		_ = c.do(ctx, OpHealth, in)
	}
}

// do applies op until the backend confirms it (or opTimeout) and records
// it.
func (c *churner) do(ctx context.Context, op Op, in Instance) error {
	start := time.Now()
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	var err error
	for {
		switch op {
		case OpAdd:
			err = c.kind.Add(octx, in)
		case OpRemove:
			err = c.kind.Remove(octx, in)
		case OpHealth:
			err = c.kind.SetHealth(octx, in)
		}
		if err == nil || octx.Err() != nil {
			break
		}
		select {
		case <-octx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	e := Event{Start: start, Done: time.Now(), Kind: c.kind.Name(), Key: c.key(in), Op: op, Healthy: in.Healthy}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		e.Op = OpUncertain
		c.failures = append(c.failures, fmt.Sprintf("%s %s %s: %v", c.kind.Name(), op, e.Key, err))
		c.forget(in)
		c.hist.Record(e)
		return err
	}
	c.ops[op]++
	c.hist.Record(e)
	switch op {
	case OpAdd:
		c.live[in.Svc] = append(c.live[in.Svc], in)
	case OpRemove:
		c.forget(in)
	case OpHealth:
		for i := range c.live[in.Svc] {
			if c.live[in.Svc][i].ID == in.ID {
				c.live[in.Svc][i].Healthy = in.Healthy
			}
		}
	}
	return nil
}

func (c *churner) forget(in Instance) {
	l := c.live[in.Svc]
	for i := range l {
		if l[i].ID == in.ID {
			c.live[in.Svc] = append(l[:i:i], l[i+1:]...)
			return
		}
	}
}

// pause stops the churn and waits for the operation in flight.
func (c *churner) pause() {
	c.mu.Lock()
	c.paused++
	c.mu.Unlock()
	c.inFlight.Wait()
}

func (c *churner) resume() {
	c.mu.Lock()
	c.paused--
	c.mu.Unlock()
}

// static is a Kind the churn leaves alone after its seed.
type static interface{ Static() }

// Restorer is a Kind whose backend can lose instances in a fault while
// their clients hold them registered, as real clients' recovery then puts
// them back: Restore registers the live ones again until the backend
// lists every one (bounded by ctx) and returns how many it registered
// again.
type Restorer interface {
	Restore(ctx context.Context, live []Instance) (int, error)
}

// restore runs the kind's Restore over its live instances (0, nil for a
// Kind that is no Restorer). The churn is paused meanwhile.
func (c *churner) restore(ctx context.Context) (int, error) {
	r, ok := c.kind.(Restorer)
	if !ok {
		return 0, nil
	}
	c.mu.Lock()
	var live []Instance
	for _, l := range c.live {
		live = append(live, l...)
	}
	c.mu.Unlock()
	return r.Restore(ctx, live)
}

// noRemover is a Kind whose instances are never removed (adds stop at
// maxInstances; then only health changes).
type noRemover interface{ NoRemoves() }

func noRemoves(k Kind) bool { _, ok := k.(noRemover); return ok }

// burst makes one change per service at once (an add while there is room,
// else a removal or a health flip), with the churn paused: the changes a
// backend takes right after a fault healed, whose arrival measures the
// registry's reconnect.
func (c *churner) burst(ctx context.Context) {
	if _, ok := c.kind.(static); ok {
		return
	}
	for svc := range churnServices {
		c.mu.Lock()
		n := len(c.live[svc])
		var pick Instance
		if n > 0 {
			pick = c.live[svc][c.rnd.IntN(n)]
		}
		c.mu.Unlock()
		switch {
		case n < maxInstances:
			in := c.newInstance(svc)
			_ = c.do(ctx, OpAdd, in)
		case !noRemoves(c.kind):
			_ = c.do(ctx, OpRemove, pick)
		default:
			pick.Healthy = !pick.Healthy
			_ = c.do(ctx, OpHealth, pick)
		}
	}
}
