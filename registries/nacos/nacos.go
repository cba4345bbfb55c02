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
	"log/slog"
	"reflect"
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
	st := &state{
		r:     r,
		sink:  sink,
		shard: r.common.Shard(),
		conv:  map[serviceKey]converted{},
		raw:   map[serviceKey]int{},
		seen:  map[serviceKey]int64{},
	}
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
	r     *Registry
	sink  registries.Sink
	shard model.ShardKey

	conv map[serviceKey]converted
	raw  map[serviceKey]int   // instances per service, malformed ones included
	seen map[serviceKey]int64 // lastRefTime of the newest list applied

	published     bool // a Replace went out since the last error
	everPublished bool
	degraded      bool
	lastErr       string
}

// set converts a service's instance list and reports whether its converted
// form changed. refTime is Nacos' lastRefTime of the list (0: unknown);
// a list older than one already applied is ignored.
func (s *state) set(key serviceKey, insts []instance, refTime int64) bool {
	if refTime > 0 && refTime < s.seen[key] {
		return false
	}
	if refTime > 0 {
		s.seen[key] = refTime
	}
	s.raw[key] = len(insts)
	old, had := s.conv[key]
	c := convertService(s.r.common, &s.r.cfg, key, insts)
	s.conv[key] = c
	return !had || !reflect.DeepEqual(old, c)
}

// drop forgets a service and reports whether it was known.
func (s *state) drop(key serviceKey) bool {
	_, had := s.conv[key]
	delete(s.conv, key)
	delete(s.raw, key)
	delete(s.seen, key)
	return had
}

// retain drops every service not in keep and reports whether any was
// dropped.
func (s *state) retain(keep map[serviceKey]bool) bool {
	changed := false
	for k := range s.conv {
		if !keep[k] {
			changed = s.drop(k) || changed
		}
	}
	return changed
}

// publish hands the full state to the sink when it changed or an outage
// ended; at is when the answer that brought the change arrived.
func (s *state) publish(changed bool, at time.Time) {
	n := 0
	for _, c := range s.raw {
		n += c
	}
	s.r.m.instances.Set(float64(n))
	s.r.m.watched.Set(float64(len(s.conv)))
	if !changed && s.published {
		return
	}
	services, rejected := assemble(s.r.common, s.conv)
	// Converted services are shared with s.conv, which never modifies
	// them: a new conversion builds new values.
	s.sink.Replace(s.shard, services, rejected)
	if changed {
		s.r.m.ingest.Observe(time.Since(at).Seconds())
	}
	if s.degraded {
		s.r.log.Info("nacos reachable again, state resynced", "services", len(services))
	}
	s.published, s.everPublished, s.degraded, s.lastErr = true, true, false, ""
}

func (s *state) degrade(err error) {
	s.published = false
	msg := err.Error()
	if s.degraded && msg == s.lastErr {
		return
	}
	if !s.degraded {
		s.r.log.Warn("nacos unreachable, keeping the last state", "err", msg)
	}
	s.degraded, s.lastErr = true, msg
	s.sink.Report(s.shard, registries.Status{State: registries.Degraded, Err: msg})
}

// authError is credentials the server refused.
type authError struct{ msg string }

func (e *authError) Error() string { return e.msg }

// permanentIfAuth makes err permanent when it is refused credentials
// before the first sync: restarting will not help.
func (s *state) permanentIfAuth(err error) error {
	var ae *authError
	if !s.everPublished && errors.As(err, &ae) {
		return registries.Permanent(fmt.Errorf("nacos refused the credentials: %w", err))
	}
	return err
}
