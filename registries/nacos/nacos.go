// Package nacos is the registry of kind nacos: it watches the services of
// one Nacos namespace (some or all of its groups) and publishes each as
// <service>.<domain> (DEFAULT_GROUP) or <service>.<group>.<domain>.
//
// # Protocol
//
// The registry speaks Nacos' wire protocols itself; from nacos-sdk-go it
// takes only the generated gRPC stubs (api/grpc). The SDK's naming client
// was measured against what a gateway needs and set aside:
//
//   - it writes a cache file per service under /tmp/nacos/cache and logs
//     through a process-wide zap logger to /tmp/nacos/log unless told
//     otherwise, and reads the cache back as "failover" data: a restarted
//     meshfed could serve another run's instances;
//   - Subscribe callbacks get the instance list only when it changed and,
//     by default (UpdateCacheWhenEmpty=false), never the empty list: a
//     service whose last instance left would keep its endpoints;
//   - it says nothing when its connection drops (it reconnects behind the
//     caller's back), so the registry could not report Degraded;
//   - CloseClient leaves goroutines running, which every registry restart
//     by the supervisor would accumulate.
//
// transport grpc (default) is the Nacos 2.x gRPC API on port+1000: a
// ServerCheckRequest, a bidirectional stream opened with a
// ConnectionSetupRequest, then unary requests. The registry lists the
// services of each group (ServiceListRequest, paged) and subscribes to
// each (SubscribeServiceRequest), whose answer is the service's instance
// list; later changes are pushed on the stream (NotifySubscriberRequest,
// acknowledged). Nacos has no push for the list of services, so it is read
// again every listInterval (default 10s): new services are subscribed,
// gone ones dropped. A HealthCheckRequest every 5s detects a dead
// connection, as Nacos clients do.
//
// transport http is the Nacos 1.x open API, polled every pollInterval:
// GET /v1/ns/service/list and /v1/ns/instance/list per service. It is the
// fallback for 1.x servers and for networks that block the gRPC port.
//
// # Cost of a change
//
// Each service is one key of the Publisher (docs/architecture.md
// §3.1.1): a push converts and compares its one service, and the
// aggregator receives that service alone (a delta; a state in which two
// services collide on a hostname goes whole, assembled here). A list
// read again as it was (a resync, an http poll, a push of what is held)
// is recognized by a hash of what the conversion reads and not converted
// again. Besides its conversion, a service costs one map entry (held).
//
// # Outages
//
// A failed connection, stream or request reports Degraded and keeps the
// last published state; the registry reconnects with jittered backoff,
// trying the servers in order, and publishes again (Synced) only after the
// whole state was read anew (list and every subscription), so nothing
// that changed during the outage is missed and nothing partial is
// published.
//
// # Credentials
//
// usernameFile/passwordFile log in (POST /v1/auth/users/login) and send the
// token as Nacos clients do (accessToken); accessKeyFile/secretKeyFile sign
// each request (ak, data, signature: HMAC-SHA1) as Alibaba Cloud's MSE
// expects. Neither is ever logged or part of an error. Refused credentials
// before the first sync make the registry Failed.
package nacos

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/meshfed/meshfed/model"
	"github.com/meshfed/meshfed/registries"
)

// Registry watches one Nacos namespace. Build it with Config.New.
type Registry struct {
	cfg    Config
	common registries.Common
	log    *slog.Logger
	m      metrics

	// conversions counts the services converted (and compared with their
	// last conversion): one per service whose instance list changed, not
	// one per service watched. For tests and diagnostics.
	conversions atomic.Uint64
	// converted, when set (tests), is called with each service converted.
	converted func(service string)
}

var _ registries.Registry = (*Registry)(nil)

// healthInterval is how often the grpc transport checks its connection, as
// Nacos clients do (keepAlive 5s).
const healthInterval = 5 * time.Second

// Run implements registries.Registry.
func (r *Registry) Run(ctx context.Context, sink registries.Sink) error {
	cl, err := r.newClient()
	if err != nil {
		return registries.Permanent(err)
	}
	defer cl.close()
	st := newState(r, sink)
	defer r.m.instances.Set(0)
	defer r.m.watched.Set(0)
	b := &registries.Backoff{Initial: 200 * time.Millisecond, Max: min(30*time.Second, max(time.Second, r.cfg.ListInterval.Std()))}
	for {
		start := time.Now()
		if r.cfg.Transport == TransportHTTP {
			err = r.pollHTTP(ctx, cl, st)
		} else {
			err = r.watchGRPC(ctx, cl, st)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if registries.IsPermanent(err) {
			return err
		}
		if err == nil {
			err = errors.New("nacos session ended")
		}
		if ae := (*authError)(nil); errors.As(err, &ae) {
			// A refused token (the server restarted with a new secret, the
			// user's password changed) is not reused: log in again.
			cl.forgetToken()
		}
		if time.Since(start) > registries.RestartReset {
			b.Reset()
		}
		st.degrade(err)
		if b.Wait(ctx) != nil {
			return ctx.Err()
		}
	}
}

// state is the registry's view of Nacos during one Run: what it publishes,
// kept across reconnections so that an outage changes nothing.
type state struct {
	r *Registry

	pub *registries.Publisher[serviceKey] // each service's conversion
	// held is what the registry keeps of each service besides its
	// conversion, one map entry per service; instances sums their n.
	held      map[serviceKey]held
	instances int
	// session numbers the grpc transport's sessions (0: none yet).
	session uint32
	seed    maphash.Seed
	// labels shares the endpoints' equal label maps.
	labels registries.LabelSets
	// whole is, per group, the count of its last list whose pages
	// overlapped (listAll).
	whole map[string]*int
}

// held is what the registry keeps of one service besides its conversion.
type held struct {
	// sum hashes the list the conversion was made from: a list read again
	// as it was (a resync, an http poll, a push that changed nothing
	// meshfed reads) is not converted again.
	sum uint64
	// refTime is Nacos' lastRefTime of the newest list applied (0:
	// none); it orders the answers of one session's server only.
	refTime int64
	n       int32 // instances, malformed ones included
	// session is the grpc session that subscribed the service (0: none).
	session uint32
	ok      bool // converted at least once: sum is set
}

func newState(r *Registry, sink registries.Sink) *state {
	return &state{
		r: r,
		pub: registries.NewPublisher(r.common, sink, r.log, registries.PublisherOptions[serviceKey]{
			Compare: compareKeys,
			Assemble: func(es []registries.Entry[serviceKey]) ([]model.Service, []model.Rejection) {
				return assemble(r.common, es)
			},
			// assemble only rejects colliding hostnames: states without
			// one go to the aggregator as deltas.
			ConcatUnlessDuplicate: true,
		}),
		held: map[serviceKey]held{},
		seed: maphash.MakeSeed(),
	}
}

// set converts a service's instance list and reports whether its converted
// form changed. refTime is Nacos' lastRefTime of the list (0: unknown);
// a list older than one already applied is ignored.
func (s *state) set(key serviceKey, insts []instance, refTime int64) bool {
	h := s.held[key]
	if refTime > 0 && refTime < h.refTime {
		return false
	}
	h.refTime = max(h.refTime, refTime)
	s.instances += len(insts) - int(h.n)
	h.n = int32(len(insts))
	sum := s.sum(insts)
	if h.ok && h.sum == sum {
		s.held[key] = h
		return false
	}
	h.sum, h.ok = sum, true
	s.held[key] = h
	s.r.conversions.Add(1)
	if s.r.converted != nil {
		s.r.converted(key.String())
	}
	conv := convertService(s.r.common, &s.r.cfg, key, insts)
	s.labels.ShareServices(conv.Services)
	return s.pub.Set(key, conv)
}

// wholeList is listAll's memory of group's overlapping pages.
func (s *state) wholeList(group string) *int {
	if s.whole[group] == nil {
		if s.whole == nil {
			s.whole = map[string]*int{}
		}
		s.whole[group] = new(int)
	}
	return s.whole[group]
}

// newSession starts a grpc session: no service is subscribed in it yet.
func (s *state) newSession() { s.session++ }

// subscribed records that the current session subscribed key. Its
// lastRefTime is forgotten if an earlier session's: those order the
// answers of one server, and another server's clock may be behind.
func (s *state) subscribed(key serviceKey) {
	h := s.held[key]
	if h.session != s.session {
		h.session, h.refTime = s.session, 0
	}
	s.held[key] = h
}

// isSubscribed reports whether the current session subscribed key.
func (s *state) isSubscribed(key serviceKey) bool {
	return s.session > 0 && s.held[key].session == s.session
}

// sum hashes what the conversion reads of an instance list, in order.
func (s *state) sum(insts []instance) uint64 {
	var h maphash.Hash
	h.SetSeed(s.seed)
	str := func(v string) { h.WriteString(v); h.WriteByte(0) }
	num := func(v uint64) { maphash.WriteComparable(&h, v) }
	flag := func(b *bool) {
		switch {
		case b == nil:
			h.WriteByte(2)
		case *b:
			h.WriteByte(1)
		default:
			h.WriteByte(0)
		}
	}
	num(uint64(len(insts)))
	for i := range insts {
		in := &insts[i]
		str(in.InstanceID)
		str(in.IP)
		num(uint64(in.Port))
		num(math.Float64bits(in.Weight))
		flag(in.Healthy)
		flag(in.Enabled)
		flag(&in.Ephemeral)
		str(in.ClusterName)
		str(in.ServiceName)
		num(uint64(len(in.Metadata)))
		for _, k := range slices.Sorted(maps.Keys(in.Metadata)) {
			str(k)
			str(in.Metadata[k])
		}
	}
	return h.Sum64()
}

// retain drops every service not in keep and reports whether any was
// dropped.
func (s *state) retain(keep map[serviceKey]bool) bool {
	maps.DeleteFunc(s.held, func(k serviceKey, h held) bool {
		if keep[k] {
			return false
		}
		s.instances -= int(h.n)
		return true
	})
	return s.pub.Retain(func(k serviceKey) bool { return keep[k] })
}

// publish hands the state to the sink when it changed or an outage
// ended; at is when the answer that brought the change arrived.
func (s *state) publish(changed bool, at time.Time) {
	s.r.m.instances.Set(float64(s.instances))
	s.r.m.watched.Set(float64(len(s.held)))
	if changed {
		s.pub.Changed(at)
	}
	s.pub.Flush(registries.Condition{})
}

func (s *state) degrade(err error) {
	s.pub.Report(registries.Condition{Err: err.Error()})
}

// authError is credentials the server refused.
type authError struct{ msg string }

func (e *authError) Error() string { return e.msg }

// permanentIfAuth makes err permanent when it is refused credentials
// before the first sync: restarting will not help.
func (s *state) permanentIfAuth(err error) error {
	var ae *authError
	if !s.pub.Published() && errors.As(err, &ae) {
		return registries.Permanent(fmt.Errorf("nacos refused the credentials: %w", err))
	}
	return err
}
