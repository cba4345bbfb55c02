// Package registries holds the contract between service registries and the
// aggregator, the supervision that runs each registry, and helpers shared by
// the platform packages under it. It imports none of the platform packages.
package registries

import (
	"context"
	"errors"
	"log/slog"

	"github.com/meshfed/meshfed/model"
)

// Registry watches one platform instance (a Kubernetes cluster, a Consul
// datacenter, a services file...).
type Registry interface {
	// Run publishes the complete state to sink after the initial sync and
	// after every change. It returns ctx.Err() when ctx ends; any other
	// return is a failure and the supervisor restarts it with backoff,
	// except an error wrapped by Permanent, which marks the registry failed
	// (retried on the slow FailedRetry schedule).
	//
	// On backend errors Run keeps the last published state (stale is better
	// than partial), publishes the failing Condition and retries. A state it
	// publishes while part of the backend fails is marked not Complete.
	Run(ctx context.Context, sink Sink) error
}

// Sink receives what registries know about their shards. The aggregator
// implements it; all policy about what a shard shows and serves (freshness,
// outages, hold-down, a partial first state) is the Sink's. Publish is safe
// for concurrent use and does not block on downstream work.
type Sink interface {
	// Publish tells the sink everything the registry knows about shard now
	// (see Update). The caller must not modify u's slices afterwards.
	Publish(shard model.ShardKey, u Update)
}

// DeltaSink is a Sink that can take a state as a change (Update.Delta),
// so that a change of one service costs the registry and the sink one
// service, not the whole shard. The aggregator is one; a Sink that wraps
// another reports what the wrapped one does.
type DeltaSink interface {
	Sink
	// TakesDelta reports whether Publish accepts Update.Delta now.
	TakesDelta() bool
}

// TakesDelta reports whether s is a DeltaSink that takes deltas.
func TakesDelta(s Sink) bool {
	d, ok := s.(DeltaSink)
	return ok && d.TakesDelta()
}

// Condition is a registry's backend condition as the registry sees it.
// The zero Condition is healthy: the backend answers and what the registry
// publishes is current.
type Condition struct {
	// Err says why the backend is failing; "" when it is not. It may be
	// shown to users, so it never holds credentials.
	Err string
	// Invalid, with Err, says the backend answered but what it holds is
	// invalid (a services file that does not parse); without it a failing
	// backend is unreachable (an outage).
	Invalid bool
}

// Failing reports whether the backend is failing (Err is set).
func (c Condition) Failing() bool { return c.Err != "" }

// Update is the one value that crosses from a registry to its Sink: what
// the registry knows about its shard, and nothing it does not (how long it
// has been failing, what is served, what the last update was: the Sink
// decides all that).
//
//   - HasState: the update carries the shard's state. Services is every
//     service the shard has now (never nil; empty means none, not
//     unknown), Rejected every item the registry could not turn into a
//     service or endpoint. Without HasState the update only tells the
//     backend's condition, and the state last published stays.
//   - Complete, with HasState: the state covers all of the backend. A
//     state that is not complete holds what could be read while part of
//     the backend fails (one broken file of a directory; Condition says
//     what fails); the sink may keep a state it already serves instead of
//     a partial first one.
//   - Condition: Err and Invalid as the backend shows them now. A state
//     published with a failing Condition is current as far as it goes,
//     and the registry never appears healthy in between.
//   - Confirm, with HasState: the state is the one last published, sent
//     again only to confirm it (a registry that publishes only changes
//     confirms a state it suspects the sink holds back, see filewatch).
//     The sink applies it as a state only while it holds an update of the
//     shard back; otherwise it is no news and changes nothing.
//   - Delta, with HasState: the state is given as its difference from
//     the state last published for the shard (the previous Update with
//     a state): Services holds only the services added or changed,
//     Removed the hostnames (as published) of those gone, and every
//     other service is as it was; Rejected is still every rejection.
//     Hostnames are unique, compared as DNS names (case-insensitively,
//     without a trailing dot), within a state sent this way and within
//     the state it changes. Only a Sink
//     whose TakesDelta reports true (DeltaSink) receives deltas, and
//     never as the first state of a Run or as a Confirm; every other
//     Sink receives full states.
//   - Ended: the registry's Run ended (the Runner says so; Err says why):
//     the registry keeps no state of its own until it runs again, and the
//     next state it publishes is the first of a new Run. Permanent, with
//     Ended, says restarting soon will not cure it (see Permanent): the
//     registry is failed until a Run publishes.
type Update struct {
	HasState bool
	Services []model.Service
	Rejected []model.Rejection
	Complete bool
	Confirm  bool
	Delta    bool
	Removed  []string
	Condition
	Ended     bool
	Permanent bool
}

// FullState returns an Update carrying a complete state with a healthy backend,
// as published after a full read.
func FullState(services []model.Service, rejected []model.Rejection) Update {
	return Update{HasState: true, Services: services, Rejected: rejected, Complete: true}
}

// Common holds the settings every clusters.yaml registry entry has.
type Common struct {
	Name     string
	Kind     string
	Domain   string
	Locality model.Locality // default locality of endpoints that carry none
}

// Shard is the key the registry publishes under.
func (c Common) Shard() model.ShardKey { return model.ShardKey{Kind: c.Kind, Name: c.Name} }

// Config is the kind-specific block of a clusters.yaml entry
// (`file:`, `consul:`...). Each platform package implements it.
type Config interface {
	// ApplyDefaults fills unset fields with their defaults.
	ApplyDefaults()
	// Validate checks the block after defaults. Errors about one key are a
	// *FieldError so that the loader can point at the line.
	Validate() error
	// New builds the registry. An error means it cannot start (Failed);
	// New does no network I/O. log already carries the registry and
	// kind keys: New must not add them again.
	New(c Common, log *slog.Logger) (Registry, error)
}

// FieldError is a validation error about one key of a Config block. Key is
// the dotted path below the block, e.g. "path" or "tls.caFile". Also,
// when set, is another key the problem involves (the first of two
// duplicates, the other end of a range): the loader names its line, and
// points at it when Key itself is absent from the file.
type FieldError struct {
	Key  string
	Err  error
	Also string
}

func (e *FieldError) Error() string { return e.Key + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// FieldErr returns a *FieldError for key.
func FieldErr(key, format string, args ...any) error {
	return &FieldError{Key: key, Err: errorf(format, args...)}
}

// FieldErrAlso returns a *FieldError for key that also involves the key
// also (see FieldError.Also).
func FieldErrAlso(key, also, format string, args ...any) error {
	return &FieldError{Key: key, Also: also, Err: errorf(format, args...)}
}

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as one that restarting soon will not cure (bad
// credentials, a config the backend rejects): the registry is failed
// (Update.Permanent) and is restarted only on the slow FailedRetry schedule (each Run re-reads
// its credential files, so a rotated token is picked up without a restart
// of meshfed).
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err was marked by Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// PathResolver is implemented by Config blocks that hold file paths; the
// loader calls it with the directory of clusters.yaml.
type PathResolver interface {
	ResolvePaths(dir string)
}

// Launcher runs registries that a registry discovers at runtime (remote
// Kubernetes clusters found by secretDiscovery). The gateway implements it.
type Launcher interface {
	// Launch adds a registry named c.Name to the aggregator, with the outage
	// and maxDeleteRatio settings of the registry named parent, and runs
	// reg under its own supervisor like a clusters.yaml entry (it appears
	// on /healthz/registries). It fails if c.Name is already a registry.
	// stop stops reg, waits for its Run to return and removes its shard:
	// its services and endpoints leave the model.
	Launch(parent string, c Common, reg Registry) (stop func(), err error)
}

// LauncherUser is a registry that starts registries at runtime. The
// gateway gives it a Launcher before the first Run; without one it starts
// nothing (it may log what it would start).
type LauncherUser interface {
	SetLauncher(Launcher)
}

// ClusterUser is implemented by Config blocks that read the Kubernetes
// clusters of other registries, named in the block (a serviceentry
// registry reading ServiceEntries from clusters). The loader checks that
// each named registry is of kind kubernetes, then hands the block those
// registries' blocks with UseClusters, before New.
type ClusterUser interface {
	// ClusterRefs returns the registry names the block reads, each with
	// its dotted key below the block ("kubernetes.clusters[0]").
	ClusterRefs() []ClusterRef
	// UseClusters gives the blocks of the named registries, by name; a
	// name missing from blocks is not usable (the loader reported why).
	UseClusters(blocks map[string]Config)
}

// ClusterRef is one registry a ClusterUser names, at Key.
type ClusterRef struct {
	Key, Name string
}
