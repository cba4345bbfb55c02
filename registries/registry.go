// Package registries holds the contract between service registries and the
// aggregator, the supervision that runs each registry, and helpers shared by
// the platform packages under it. It imports none of the platform packages.
package registries

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/meshfed/meshfed/model"
)

// Registry watches one platform instance (a Kubernetes cluster, a Consul
// datacenter, a services file...).
type Registry interface {
	// Run publishes the complete state to sink after the initial sync and
	// after every change. It returns ctx.Err() when ctx ends; any other
	// return is a failure and the supervisor restarts it with backoff,
	// except an error wrapped by Permanent, which marks the registry Failed.
	//
	// On backend errors Run keeps the last published state (stale is better
	// than partial), reports Degraded and retries. It never publishes a
	// partial list.
	Run(ctx context.Context, sink Sink) error
}

// Sink receives full state per shard. The aggregator implements it. Its
// methods are safe for concurrent use and do not block on downstream work.
type Sink interface {
	// Replace sets the complete state of a shard: services is every service
	// the shard has now (empty means none, not unknown), rejected is every
	// item the registry could not turn into a service or endpoint. A Replace
	// also means the registry is connected and current (Synced).
	// The caller must not modify the slices afterwards.
	Replace(shard model.ShardKey, services []model.Service, rejected []model.Rejection)
	// ReplaceStatus is Replace with the registry's status in the same step.
	// With status Synced it is Replace. With Degraded it sets the state the
	// same way while the registry stays Degraded with status (its Err and
	// Invalid as for Report): the registry publishes what it has while part
	// of its backend is failing (one broken file of a directory), and never
	// shows Synced in between. Other states count as Degraded.
	ReplaceStatus(shard model.ShardKey, services []model.Service, rejected []model.Rejection, status Status)
	// Report tells the health of the connection to the backend.
	Report(shard model.ShardKey, status Status)
}

// State is a registry's health as shown on /healthz/registries.
type State int

// States. Registries report Synced, Degraded and Failed; the aggregator
// derives Starting (no first sync yet), Stale (Degraded longer than the
// outage window) and Held (Synced, but its latest update would drop more
// than maxDeleteRatio of its endpoints and is held back; the previous
// state is served until it is confirmed, times out or is released).
const (
	Starting State = iota
	Synced
	Degraded
	Stale
	Failed
	Held
)

var stateNames = [...]string{"Starting", "Synced", "Degraded", "Stale", "Failed", "Held"}

// AllStates lists every State, for one-hot metrics.
var AllStates = []State{Starting, Synced, Degraded, Stale, Failed, Held}

func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "Unknown"
}

// MarshalText writes the state's name, for JSON.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a state's name, as MarshalText writes it.
func (s *State) UnmarshalText(b []byte) error {
	for i, n := range stateNames {
		if n == string(b) {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("unknown registry state %q", b)
}

// Status is a registry's report on its backend connection.
type Status struct {
	State State
	// Err says why the state is not Synced. It may be shown to users, so it
	// never holds credentials.
	Err string
	// Invalid, with Degraded, says the backend answered but what it holds
	// is invalid (a services file that does not parse): the registry is
	// Degraded, its last good state stays served, and it is not an outage,
	// so outage.policy expire never withdraws it. Without Invalid, Degraded
	// means the backend is unreachable.
	Invalid bool
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
// credentials, a config the backend rejects): the registry becomes Failed
// and is restarted only on the slow FailedRetry schedule (each Run re-reads
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

// ServingSink is a Sink that can say whether it already serves a state of
// a shard: one restored from disk at start, or published by a previous Run
// of the registry. A Publisher asks before publishing a partial first state
// (a non-Synced Flush), which would replace that state and drop what the
// registry cannot read yet.
type ServingSink interface {
	Serving(shard model.ShardKey) bool
}
