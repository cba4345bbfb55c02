// Package eureka is the registry of kind eureka: it polls one Eureka
// cluster the way Eureka's own clients do and publishes every app in it as
// <app-name-lowercased>.<domain>.
//
// # Polling
//
// Run starts with a full fetch (GET <url>/apps), then every pollInterval
// (default 30s, Eureka clients' registryFetchIntervalSeconds; polls start
// that far apart, however long a fetch took) fetches
// <url>/apps/delta and applies its ADDED, MODIFIED and DELETED instances to
// the local state. After each delta it computes the apps__hashcode of the
// merged state (instance counts per status, "DOWN_1_UP_3_") and compares it
// with the server's; on a mismatch it fetches /apps in full at once, as
// Netflix's DiscoveryClient does. The first fetch after an error is a full
// one too, since deltas only cover the server's last few minutes. A server
// that refuses deltas (403/404/501, e.g. eureka.disableDelta) is polled
// with full fetches. Staleness is thus bounded by pollInterval, as for any
// Eureka client; meshfed adds nothing on top.
//
// The state is published only when an app's converted form changed, and
// never while it may be partial or diverged: a delta whose hashcode does
// not match is published only after the full fetch that repairs it. Each
// app is one key of the Publisher (docs/architecture.md §3.1.1); only the
// apps whose instances a fetch changed are converted again and compared.
// Eureka repeats a change in every delta for minutes (its delta window,
// eureka.retentionTimeInMSInDeltaQueue, 3 min): an entry equal to the
// instance held (lease times aside) touches nothing, and a full fetch
// converts only the apps that differ from what is held.
//
// # Servers and outages
//
// The URLs are tried in order; on an error the request moves on to the
// next one, and the one that answered stays current. When every URL fails,
// Run reports Degraded, keeps the last published state and retries with
// jittered backoff (at most pollInterval apart); the next success
// publishes again (Synced). Credentials in a URL are sent as basic auth and
// never appear in logs or errors.
//
// # Wire formats
//
// Answers are parsed by their first byte, XML or JSON, whatever was asked
// for; see decode.go for what fargo lacks and this package adds.
//
// # Memory
//
// The state keeps copies of what it reads, made after the decode: a full
// fetch's instances in one array, their strings in one allocation
// (state.go); conversion copies the strings it publishes and parses each
// distinct metadata once per fetch (docs/registries/eureka.md, "At
// scale").
package eureka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unique"

	"github.com/meshfed/meshfed/registries"
)

// maxAnswer bounds the size of one answer read from Eureka.
const maxAnswer = 256 << 20

// Registry polls one Eureka cluster. Build it with Config.New.
type Registry struct {
	cfg       Config
	common    registries.Common
	endpoints []endpoint
	log       *slog.Logger
	m         metrics

	// conversions counts the apps converted (and compared with their last
	// conversion): one per app a fetch changed, not one per app held. For
	// tests and diagnostics.
	conversions atomic.Uint64
}

// endpoint is one configured Eureka service URL.
type endpoint struct {
	raw      string // as configured, without a trailing slash; may hold credentials
	redacted string // for logs and errors
}

var _ registries.Registry = (*Registry)(nil)

// Run implements registries.Registry.
func (r *Registry) Run(ctx context.Context, sink registries.Sink) error {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 2
	defer tr.CloseIdleConnections()
	w := newWatch(r, sink)
	w.http = &http.Client{Transport: tr, Timeout: r.cfg.Timeout.Std()}
	defer r.m.instances.Set(0)
	b := &registries.Backoff{Initial: min(time.Second, r.cfg.PollInterval.Std()), Max: r.cfg.PollInterval.Std()}
	needFull := true
	for {
		polled := time.Now()
		var err error
		if needFull || w.noDelta {
			err = w.full(ctx)
		} else {
			err = w.delta(ctx)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			if registries.IsPermanent(err) {
				return err
			}
			needFull = true
			w.degrade(err)
			if b.Wait(ctx) != nil {
				return ctx.Err()
			}
			continue
		}
		needFull = false
		b.Reset()
		if registries.Sleep(ctx, nextPoll(r.cfg.PollInterval.Std(), time.Since(polled))) != nil {
			return ctx.Err()
		}
	}
}

// nextPoll is how long to wait after a poll that took took: polls start
// interval apart, so that the fetch's own time does not add to how stale
// a change can be when it is seen, but one that took longer than the
// interval is followed by a pause of a tenth of it, not at once.
func nextPoll(interval, took time.Duration) time.Duration {
	return max(interval-took, interval/10)
}

// watch is the state of one Run.
type watch struct {
	r    *Registry
	http *http.Client

	current int // index of the endpoint that answered last

	// apps is the merged raw state: app name (upper case, as Eureka keys
	// it) → its instances (state.go). It is what the hashcode is computed
	// on.
	apps map[string]appInstances
	// pub holds each app's converted form, recomputed only for apps a
	// fetch touched, and publishes them.
	pub *registries.Publisher[string]
	// unconverted are apps a delta changed in apps whose conversion in
	// pub is older (the delta's hashcode did not match yet).
	unconverted map[string]bool
	// statuses counts apps' instances by status, kept with apps, so that
	// a delta's hashcode check does not count every instance again.
	statuses map[string]int

	// memo parses metadata for the conversions of one fetch (nil
	// between fetches).
	memo metaMemo

	noDelta bool // the server refuses deltas: full fetches only
	// labels shares the endpoints' equal label maps.
	labels registries.LabelSets
}

func newWatch(r *Registry, sink registries.Sink) *watch {
	return &watch{
		r:           r,
		apps:        map[string]appInstances{},
		unconverted: map[string]bool{},
		statuses:    map[string]int{},
		pub:         registries.NewPublisher(r.common, sink, r.log, registries.PublisherOptions[string]{Compare: strings.Compare}),
	}
}

// full fetches /apps and replaces the state with it.
func (w *watch) full(ctx context.Context) error {
	p, at, err := w.fetch(ctx, "/apps")
	if err != nil {
		w.r.m.full.Err.Inc()
		var se *statusError
		if !w.pub.Published() && errors.As(err, &se) && se.auth {
			// Refused credentials before the first sync: restarting will
			// not help.
			return registries.Permanent(fmt.Errorf("eureka full fetch: %w", err))
		}
		return fmt.Errorf("eureka full fetch: %w", err)
	}
	w.r.m.full.OK.Inc()
	changed := w.applyFull(p)
	if hc := w.hashcode(); p.hashcode != "" && hc != p.hashcode {
		// Servers compute the hashcode over what they send; a difference
		// here is the server's (e.g. it was writing while answering).
		w.r.log.Debug("eureka full fetch: hashcode differs from the server's", "local", hc, "server", p.hashcode)
	}
	w.publish(changed, at)
	return nil
}

// delta fetches /apps/delta, merges it and checks the hashcode; on a
// mismatch it fetches in full.
func (w *watch) delta(ctx context.Context) error {
	p, at, err := w.fetch(ctx, "/apps/delta")
	if err != nil {
		var se *statusError
		if errors.As(err, &se) && se.noDelta {
			w.r.m.delta.Err.Inc()
			w.r.log.Warn("eureka server refuses deltas, polling with full fetches", "status", se.code)
			w.noDelta = true
			return w.full(ctx)
		}
		w.r.m.delta.Err.Inc()
		return fmt.Errorf("eureka delta fetch: %w", err)
	}
	w.r.m.delta.OK.Inc()
	touched := w.applyDelta(p)
	if hc := w.hashcode(); hc != p.hashcode {
		w.r.m.mismatches.Inc()
		w.r.log.Info("eureka delta left a state whose hashcode differs from the server's, fetching in full",
			"local", hc, "server", p.hashcode)
		return w.full(ctx)
	}
	changed := false
	w.memo = metaMemo{}
	for key := range touched {
		if w.reconvert(key) {
			changed = true
		}
	}
	w.memo = nil
	w.publish(changed, at)
	return nil
}

// applyFull replaces the state with a full fetch's and reports whether any
// app's converted form changed.
func (w *watch) applyFull(p *payload) bool {
	apps := settleFull(p)
	changed := w.pub.Retain(func(key string) bool { _, ok := apps[key]; return ok })
	old := w.apps
	w.apps = apps
	clear(w.statuses)
	for _, insts := range apps {
		for _, in := range insts {
			w.statuses[string(in.Status)]++
		}
	}
	w.memo = metaMemo{}
	for key, insts := range apps {
		if !w.unconverted[key] && sameApp(old[key], insts) {
			continue // as converted last time
		}
		if w.reconvert(key) {
			changed = true
		}
	}
	w.memo = nil
	clear(w.unconverted)
	return changed
}

// appKey is the key of app name: upper case, as Eureka keys apps, and
// the canonical copy (package unique), so that the state's keys are held
// once whatever the fetches that named them (a decoded name kept as a
// key would keep its allocator span, among the answer's garbage, alive).
func appKey(name string) string { return unique.Make(strings.ToUpper(name)).Value() }

// sameApp reports whether two reads of an app hold the same instances
// with the same content.
func sameApp(a, b appInstances) bool {
	return slices.EqualFunc(a, b, sameInstance)
}

// sameInstance reports whether two reads of an instance say the same to
// the conversion (the delta action aside).
func sameInstance(a, b *instance) bool {
	x, y := *a, *b
	x.deleted, y.deleted = false, false
	x.rare, y.rare = nil, nil
	return x == y && a.rareOf() == b.rareOf()
}

// applyDelta merges a delta into the state and returns the apps it
// touched; they are converted again only once the hashcode matched.
func (w *watch) applyDelta(p *payload) map[string]bool {
	touched := map[string]bool{}
	for _, a := range p.apps {
		key := appKey(a.name)
		for i := range a.instances {
			in := &a.instances[i]
			insts := w.apps[key]
			at, held := insts.find(in.id())
			switch {
			case in.deleted:
				if !held {
					continue // gone already (repeated, as below)
				}
				w.count(insts[at], -1)
				if insts = slices.Delete(insts, at, at+1); len(insts) == 0 {
					delete(w.apps, key)
				} else {
					w.apps[key] = insts
				}
			default: // ADDED, MODIFIED; Netflix's client treats them alike
				// Eureka repeats a change in every delta for minutes
				// (its delta window): one that says what we hold already
				// touches nothing.
				if held && sameInstance(insts[at], in) {
					continue
				}
				kept := &settle([]instance{*in})[0]
				if held {
					w.count(insts[at], -1)
					insts[at] = kept
				} else {
					insts = slices.Insert(insts, at, kept)
				}
				w.count(kept, 1)
				w.apps[key] = insts
			}
			touched[key] = true
			w.unconverted[key] = true
		}
	}
	return touched
}

// reconvert converts one app again and reports whether its converted form
// changed.
func (w *watch) reconvert(key string) bool {
	delete(w.unconverted, key)
	insts := w.apps[key]
	if len(insts) == 0 {
		return w.pub.Delete(key)
	}
	w.r.conversions.Add(1)
	conv := convertApp(w.r.common, &w.r.cfg, key, insts, w.memo)
	w.labels.ShareServices(conv.Services)
	return w.pub.Set(key, conv)
}

// count adds d instances of in's status to statuses.
func (w *watch) count(in *instance, d int) {
	s := string(in.Status)
	if w.statuses[s] += d; w.statuses[s] == 0 {
		delete(w.statuses, s)
	}
}

// hashcode is the hashcode of apps, from the counts kept with them.
func (w *watch) hashcode() string { return formatHashcode(w.statuses) }

// hashcode is Eureka's reconcile hashcode of a state: for each status, in
// name order, "<STATUS>_<count>_" (e.g. "DOWN_1_UP_3_"); "" when empty.
func hashcode(apps map[string]appInstances) string {
	counts := map[string]int{}
	for _, insts := range apps {
		for _, in := range insts {
			counts[string(in.Status)]++
		}
	}
	return formatHashcode(counts)
}

func formatHashcode(counts map[string]int) string {
	var b strings.Builder
	for _, s := range slices.Sorted(maps.Keys(counts)) {
		b.WriteString(s)
		b.WriteByte('_')
		b.WriteString(strconv.Itoa(counts[s]))
		b.WriteByte('_')
	}
	return b.String()
}

// publish hands the full state to the sink when it changed or an outage
// ended; at is when the fetch that brought the change returned.
func (w *watch) publish(changed bool, at time.Time) {
	n := 0
	for _, c := range w.statuses { // kept with apps: no walk of every app per poll
		n += c
	}
	w.r.m.instances.Set(float64(n))
	if changed {
		w.pub.Changed(at)
	}
	w.pub.Flush(registries.Condition{})
}

func (w *watch) degrade(err error) {
	w.pub.Report(registries.Condition{Err: err.Error()})
}

// statusError is an answer with a non-2xx status.
type statusError struct {
	url     string // redacted
	code    int
	auth    bool // 401 or 403 on /apps: credentials refused
	noDelta bool // 403, 404 or 501 on /apps/delta: deltas refused
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s: HTTP %d %s", e.url, e.code, http.StatusText(e.code))
}

// fetch GETs path from the current endpoint, moving on to the next ones on
// errors, and decodes the answer. It returns when the answer arrived.
func (w *watch) fetch(ctx context.Context, path string) (*payload, time.Time, error) {
	n := len(w.r.endpoints)
	var errs []error
	for attempt := range n {
		i := (w.current + attempt) % n
		if attempt > 0 {
			w.r.m.failovers.Inc()
		}
		p, at, err := w.get(ctx, w.r.endpoints[i], path)
		if err == nil {
			if i != w.current {
				w.r.log.Info("eureka: switched to another server", "url", w.r.endpoints[i].redacted)
			}
			w.current = i
			return p, at, nil
		}
		if ctx.Err() != nil {
			return nil, time.Time{}, ctx.Err()
		}
		errs = append(errs, err)
	}
	if len(errs) == 1 {
		return nil, time.Time{}, errs[0]
	}
	// Report the auth and no-delta cases only when every server agrees.
	var first *statusError
	if errors.As(errs[0], &first) {
		for _, e := range errs[1:] {
			var se *statusError
			if !errors.As(e, &se) || se.auth != first.auth || se.noDelta != first.noDelta {
				first = nil
				break
			}
		}
	}
	joined := fmt.Errorf("all %d urls failed: %w", n, errors.Join(errs...))
	if first != nil {
		return nil, time.Time{}, &wrapped{msg: joined.Error(), err: first}
	}
	return nil, time.Time{}, joined
}

// wrapped carries a message and a cause errors.As finds.
type wrapped struct {
	msg string
	err error
}

func (e *wrapped) Error() string { return e.msg }
func (e *wrapped) Unwrap() error { return e.err }

func (w *watch) get(ctx context.Context, ep endpoint, path string) (*payload, time.Time, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep.raw+path, nil)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%s: %w", ep.redacted, err)
	}
	accept := "application/json"
	if w.r.cfg.Format == FormatXML {
		accept = "application/xml"
	}
	req.Header.Set("Accept", accept)
	resp, err := w.http.Do(req)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%s%s: %s", ep.redacted, path, registries.NetReason(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	at := time.Now()
	if err != nil {
		return nil, at, fmt.Errorf("%s%s: reading the answer: %s", ep.redacted, path, registries.NetReason(err))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		c := resp.StatusCode
		return nil, at, &statusError{
			url:     ep.redacted + path,
			code:    c,
			auth:    path == "/apps" && (c == http.StatusUnauthorized || c == http.StatusForbidden),
			noDelta: path == "/apps/delta" && (c == http.StatusForbidden || c == http.StatusNotFound || c == http.StatusNotImplemented),
		}
	}
	if len(body) > maxAnswer {
		return nil, at, fmt.Errorf("%s%s: answer larger than %d MiB", ep.redacted, path, maxAnswer>>20)
	}
	p, err := decodePayload(body)
	if err != nil {
		return nil, at, fmt.Errorf("%s%s: %w", ep.redacted, path, err)
	}
	return p, at, nil
}
