package chaos

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"
)

const (
	sigStop = syscall.SIGSTOP
	sigCont = syscall.SIGCONT
)

// fault is one entry of the schedule: what, on what.
type fault struct {
	name string // see faultList

	target string
}

func (f fault) String() string { return f.name + " " + f.target }

func (w *world) faultList() []fault {
	var fs []fault
	for _, b := range w.backends {
		fs = append(fs, fault{"kill", b.name}, fault{"hang", b.name})
	}
	fs = append(fs, fault{"meshfed-kill", w.a.Name}, fault{"reload", w.a.Name})
	for _, b := range w.backends {
		fs = append(fs, fault{"meshfed-kill-backend-down", b.name}, fault{"reload-backend-down", b.name})
	}
	if w.a.state.OK() {
		fs = append(fs, fault{"state-full", w.a.Name}, fault{"state-ro", w.a.Name}, fault{"state-full-kill", w.a.Name},
			fault{"state-ro-kill", w.a.Name})
	}
	for _, k := range w.kinds {
		if _, ok := k.(BadItems); ok {
			fs = append(fs, fault{"bad-item", k.Name()})
		}
		if _, ok := k.(Broken); ok {
			fs = append(fs, fault{"broken-file", k.Name()})
		}
	}
	fs = append(fs, fault{"broken-rules", "traffic"})
	for _, c := range w.clients {
		fs = append(fs, fault{"client-disconnect", c.ID}, fault{"client-stall", c.ID})
	}
	fs = append(fs, fault{"client-join", w.a.Name}, fault{"client-join", w.b.Name})
	for _, g := range w.grpc {
		fs = append(fs, fault{"grpc-restart", g.id}, fault{"grpc-stall", g.id})
	}
	if only := os.Getenv("CHAOS_FAULTS"); only != "" {
		// Only these faults (comma-separated names, or "name target"
		// such as "hang polaris"), to chase one finding.
		names := strings.Split(only, ",")
		fs = slices.DeleteFunc(fs, func(f fault) bool { return !slices.Contains(names, f.name) && !slices.Contains(names, f.String()) })
	}
	return fs
}

// schedule applies faults until deadline: a seeded shuffle of every fault,
// cycled, each lasting 2–8s, 2–6s apart. The choices depend on the seed
// only, so CHAOS_SEED replays the same sequence (the times shift with the
// machine's speed).
func (w *world) schedule(ctx context.Context, deadline time.Time) {
	r := w.rng()
	list := w.faultList()
	var order []fault
	for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		if len(order) == 0 {
			order = slices.Clone(list)
			r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		f := order[0]
		order = order[1:]
		d := time.Duration(2+r.IntN(7)) * time.Second
		gap := time.Duration(2+r.IntN(5)) * time.Second
		w.hist.Note("fault %s for %s", f, d)
		w.t.Logf("fault %d: %s for %s", i, f, d)
		w.mu.Lock()
		w.faults[f.name]++
		w.mu.Unlock()
		w.apply(f, d)
		if err := w.traffic.edit(); err != nil {
			w.t.Logf("traffic edit: %v", err)
		}
		sleepUntil(ctx, time.Now().Add(gap), deadline)
	}
}

func sleepUntil(ctx context.Context, t, limit time.Time) {
	if t.After(limit) {
		t = limit
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(t)):
	}
}

func (w *world) backendNamed(name string) *backend {
	for _, b := range w.backends {
		if b.name == name {
			return b
		}
	}
	return nil
}

func (w *world) kindNamed(name string) Kind {
	for _, k := range w.kinds {
		if k.Name() == name {
			return k
		}
	}
	return nil
}

func (w *world) kindsNamed(names []string) []Kind {
	var out []Kind
	for _, n := range names {
		out = append(out, w.kindNamed(n))
	}
	return out
}

// holder is an xDS client whose endpoints the live convergence check
// compares with the truth: a raw ADS client or a grpc-go client.
type holder interface {
	Name() string
	// Connected: in a current session (or, grpc-go, its CSDS synced).
	Connected() bool
	// Subscribes reports whether the client asks for host's endpoints.
	Subscribes(host string) bool
	View(want func(host string) bool) map[Key]bool
}

// holders are every client, raw and grpc-go.
func (w *world) holders() []holder {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []holder
	for _, c := range w.clients {
		out = append(out, c)
	}
	for _, g := range w.grpc {
		out = append(out, g)
	}
	return out
}

// clientsOf are the clients, raw and grpc-go, of m.
func (w *world) clientsOf(m *Meshfed) []holder {
	var out []holder
	for _, c := range w.holders() {
		if w.scopeOf[c.Name()] == m.Name {
			out = append(out, c)
		}
	}
	return out
}

func (w *world) clientNamed(id string) *ADSClient {
	for _, c := range w.clients {
		if c.ID == id {
			return c
		}
	}
	return nil
}

// pauseKinds pauses the churn of kinds; the returned func resumes it.
func (w *world) pauseKinds(kinds []Kind) func() {
	for _, k := range kinds {
		w.churn[k.Name()].pause()
	}
	return func() {
		for _, k := range kinds {
			w.churn[k.Name()].resume()
		}
	}
}

func (w *world) apply(f fault, d time.Duration) {
	switch f.name {
	case "kill", "hang":
		b := w.backendNamed(f.target)
		kinds := w.kindsNamed(b.kinds)
		resume := w.pauseKinds(kinds)
		var ends []func()
		what := "SIGKILL and restart"
		if f.name == "hang" {
			what = "SIGSTOP/SIGCONT"
		}
		for _, k := range b.kinds {
			if slices.Contains(b.forgets, k) {
				ends = append(ends, w.hist.Forgets(k, what+" of "+b.name))
			} else {
				ends = append(ends, w.hist.Down(k, what+" of "+b.name))
			}
		}
		if f.name == "kill" {
			b.kill()
			time.Sleep(d)
			b.restart()
		} else {
			b.signal(true)
			time.Sleep(d)
			b.signal(false)
		}
		w.restore(kinds, f.String())
		for _, e := range ends {
			e()
		}
		w.burst(kinds)
		w.converge(f.name+" backend", kinds, w.holders(), false)
		resume()
	case "meshfed-kill-backend-down", "reload-backend-down":
		// A backend is down while meshfed-a restarts (warm start: its
		// saved state is served, nothing removed) or reloads (the new
		// instance of each registry cannot sync; the old one keeps
		// serving).
		b := w.backendNamed(f.target)
		kinds := w.kindsNamed(b.kinds)
		resume := w.pauseKinds(kinds)
		var ends []func()
		for _, k := range b.kinds {
			if slices.Contains(b.forgets, k) {
				ends = append(ends, w.hist.Forgets(k, "SIGKILL of "+b.name+" across "+f.name))
			} else {
				ends = append(ends, w.hist.Down(k, "SIGKILL of "+b.name+" across "+f.name))
			}
		}
		b.kill()
		time.Sleep(time.Second)
		if f.name == "reload-backend-down" {
			w.aCfg.edit = !w.aCfg.edit
			w.reloadA()
			time.Sleep(d)
		} else {
			w.a.Kill()
			time.Sleep(d / 2)
			w.restartA()
			time.Sleep(d / 2)
		}
		b.restart()
		w.restore(kinds, f.String())
		for _, e := range ends {
			e()
		}
		w.burst(kinds)
		w.converge(f.name, w.kinds, w.holders(), false)
		resume()
	case "state-ro-kill":
		// meshfed-a restarts on a read-only state dir: it must start,
		// restore and serve.
		if err := w.a.state.ReadOnly(true); err != nil {
			w.t.Logf("state-ro-kill: %v", err)
		}
		time.Sleep(d / 2)
		w.a.Kill()
		time.Sleep(time.Second)
		w.restartA()
		time.Sleep(d / 2)
		if err := w.a.state.ReadOnly(false); err != nil {
			w.t.Logf("state-ro-kill: %v", err)
		}
		w.converge("meshfed kill, state dir read-only", w.kinds, w.clientsOf(w.a), false)
	case "meshfed-kill":
		w.a.Kill()
		time.Sleep(d)
		w.restartA()
		w.converge("meshfed kill", w.kinds, w.clientsOf(w.a), false)
	case "state-full-kill":
		// The state directory is full when meshfed is killed: its last
		// writes failed, so the warm start restores an older state.
		if err := w.a.state.Fill(); err != nil {
			w.t.Logf("fill: %v", err)
		}
		time.Sleep(d)
		w.a.Kill()
		time.Sleep(time.Second)
		w.restartA()
		if err := w.a.state.Unfill(); err != nil {
			w.t.Logf("unfill: %v", err)
		}
		w.converge("meshfed kill, state dir full", w.kinds, w.clientsOf(w.a), false)
	case "reload":
		w.aCfg.edit = !w.aCfg.edit
		w.reloadA()
		w.converge("SIGHUP reload", w.kinds, w.clientsOf(w.a), false)
	case "state-full", "state-ro":
		var err error
		if f.name == "state-full" {
			err = w.a.state.Fill()
		} else {
			err = w.a.state.ReadOnly(true)
		}
		if err != nil {
			w.t.Logf("%s: %v", f.name, err)
		}
		time.Sleep(d)
		if f.name == "state-full" {
			err = w.a.state.Unfill()
		} else {
			err = w.a.state.ReadOnly(false)
		}
		if err != nil {
			w.t.Logf("%s: %v", f.name, err)
		}
	case "bad-item":
		k := w.kindNamed(f.target)
		b := k.(BadItems)
		w.retry(func() error { return b.Bad(context.Background(), true) })
		time.Sleep(d)
		w.retry(func() error { return b.Bad(context.Background(), false) })
	case "broken-file":
		k := w.kindNamed(f.target)
		resume := w.pauseKinds([]Kind{k})
		w.retry(func() error { return k.(Broken).Break(true) })
		time.Sleep(d)
		w.retry(func() error { return k.(Broken).Break(false) })
		w.burst([]Kind{k})
		w.converge("broken file", []Kind{k}, w.holders(), false)
		resume()
	case "broken-rules":
		w.retry(func() error { return w.traffic.setBroken(true) })
		time.Sleep(d)
		w.retry(func() error { return w.traffic.setBroken(false) })
	case "client-disconnect", "client-stall":
		c := w.clientNamed(f.target)
		if f.name == "client-disconnect" {
			c.Disconnect(d)
		} else {
			c.Stall(d)
		}
		time.Sleep(d)
		w.converge(strings.TrimPrefix(f.name, "client-")+" client", w.kinds, []holder{c}, false)
	case "client-join":
		m := w.a
		if f.target == w.b.Name {
			m = w.b
		}
		c := w.addClient(m, len(w.clients)%2 == 0)
		time.Sleep(d)
		w.converge("client joins", w.kinds, []holder{c}, false)
	case "grpc-restart", "grpc-stall":
		g := w.grpcNamed(f.target)
		if f.name == "grpc-restart" {
			g.restart(d)
		} else {
			g.stall(d)
		}
		w.converge(f.name+" client", w.kinds, []holder{g}, false)
	}
}

// burst makes one change per service of each kind right after a fault
// healed (the churn of the kinds is paused).
func (w *world) burst(kinds []Kind) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, k := range kinds {
		w.churn[k.Name()].burst(ctx)
	}
}

// restoreTimeout bounds a backend's recovery of what a fault made it lose.
const restoreTimeout = 90 * time.Second

// restore has the kinds of a backend that came back register again what
// the backend lost in the fault (Restorer), before the fault's window
// closes, and counts it: the truth stays what the clients hold registered.
func (w *world) restore(kinds []Kind, after string) {
	ctx, cancel := context.WithTimeout(context.Background(), restoreTimeout)
	defer cancel()
	for _, k := range kinds {
		n, err := w.churn[k.Name()].restore(ctx)
		if n > 0 || err != nil {
			w.hist.Note("after %s: %s re-registered %d instances its backend had lost (err: %v)", after, k.Name(), n, err)
			w.t.Logf("after %s: %s re-registered %d instances its backend had lost (err: %v)", after, k.Name(), n, err)
		}
		w.mu.Lock()
		w.restored[k.Name()] += n
		w.mu.Unlock()
	}
}

func (w *world) restartA() {
	if err := w.a.Start(); err != nil {
		w.violate(Violation{Rule: "exit", At: time.Now(), Detail: "meshfed-a did not become ready after a warm restart: " + err.Error()})
	}
}

func (w *world) reloadA() {
	if err := w.aCfg.write(); err != nil {
		w.t.Fatal(err)
	}
	if !w.a.Reload() {
		w.t.Logf("reload: meshfed-a not running")
	}
}

// retry runs f until it succeeds, for at most a minute.
func (w *world) retry(f func() error) {
	deadline := time.Now().Add(time.Minute)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			w.t.Logf("gave up: %v", err)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// hostsOf are the hosts kind serves.
func hostsOf(k Kind) map[string]bool {
	out := map[string]bool{}
	for svc := range churnServices {
		out[k.Host(svc)] = true
	}
	return out
}

// expected is the truth now of the hosts of k (of every kind that serves
// them: the two Kubernetes clusters share their hosts).
func (w *world) expected(k Kind) map[Key]bool {
	hosts := hostsOf(k)
	out := map[Key]bool{}
	for _, o := range w.kinds {
		for key, h := range w.hist.Current(o.Name()) {
			if hosts[key.Host] {
				out[key] = h
			}
		}
	}
	return out
}

// converge pauses the churn of kinds, then waits until every client of
// clients holds their truth, at most each kind's Heal bound, and records
// how long it took (issue 25's rule 2: after each fault heals, every client
// converges within T). A kind that does not converge is a violation with
// the difference.
func (w *world) converge(label string, kinds []Kind, clients []holder, _ bool) {
	resume := w.pauseKinds(kinds)
	defer resume()
	start := time.Now()
	pending := map[string]Kind{}
	for _, k := range kinds {
		pending[k.Name()] = k
	}
	for len(pending) > 0 {
		now := time.Now()
		for _, name := range slices.Sorted(maps.Keys(pending)) {
			k := pending[name]
			want := w.expected(k)
			hosts := hostsOf(k)
			diff := ""
			for _, c := range clients {
				if !c.Connected() {
					diff = c.Name() + " not connected"
					break
				}
				sub := func(h string) bool { return hosts[h] && c.Subscribes(h) }
				if d := diffViews(maps.Collect(filterKeys(want, sub)), c.View(sub)); d != "" {
					diff = c.Name() + ": " + d
					break
				}
			}
			if diff == "" {
				w.mu.Lock()
				w.conv[label+"|"+name] = append(w.conv[label+"|"+name], now.Sub(start))
				w.mu.Unlock()
				delete(pending, name)
				continue
			}
			if now.Sub(start) > k.Bounds().Heal {
				w.violate(Violation{Rule: "convergence", Kind: name, At: now,
					Detail: fmt.Sprintf("after %s, not converged within %s: %s", label, k.Bounds().Heal, diff)})
				delete(pending, name)
			}
		}
		if len(pending) > 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// filterKeys yields the keys of m whose host is accepted by want.
func filterKeys(m map[Key]bool, want func(host string) bool) iter.Seq2[Key, bool] {
	return func(yield func(Key, bool) bool) {
		for k, h := range m {
			if want(k.Host) && !yield(k, h) {
				return
			}
		}
	}
}

// diffViews describes how got differs from want ("" = equal).
func diffViews(want, got map[Key]bool) string {
	var out []string
	for k, h := range want {
		gh, ok := got[k]
		switch {
		case !ok:
			out = append(out, "missing "+k.String())
		case gh != h:
			out = append(out, fmt.Sprintf("%s healthy=%v, want %v", k, gh, h))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			out = append(out, "extra "+k.String())
		}
	}
	if len(out) == 0 {
		return ""
	}
	slices.Sort(out)
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("... %d more", len(out)-5))
	}
	return strings.Join(out, ", ")
}

func (w *world) addClient(m *Meshfed, delta bool) *ADSClient {
	mode := "sotw"
	if delta {
		mode = "delta"
	}
	id := fmt.Sprintf("%s-%s-%d", strings.TrimPrefix(m.Name, "meshfed-"), mode, len(w.clients))
	c := NewADSClient(id, m.XDS, delta, w.hist, func(h string) bool { return w.kindOfHost(h) != "" }, w.onNack)
	w.mu.Lock()
	w.clients = append(w.clients, c)
	w.scopeOf[id] = m.Name
	w.mu.Unlock()
	w.clientWG.Go(func() { c.Run(w.clientCtx) })
	return c
}

func (w *world) onNack(client, detail string) {
	w.violate(Violation{Rule: "nack", Client: client, At: time.Now(), Detail: detail})
}
