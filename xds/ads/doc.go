// Package ads serves collections of xDS resources over the Aggregated
// Discovery Service, SotW and Delta: the store of collections and its
// subscription index (store.go), the stream loop (ads.go), the response
// codec (codec.go), per-stream sync status (status.go) and per-stream
// limits (limits.go). It knows resources only as go-control-plane's
// types.Resource, never meshfed's model: what a collection holds is decided
// by its owner (xds/translate through the xds facade), which installs
// changes with Server.Apply, describes its collections in Config and
// reacts to the protocol through Callbacks — the seam of go-control-plane's
// cache.ConfigWatcher/Subscription and its server's Callbacks.
//
// Why the stream loop is meshfed's own, not go-control-plane's server:
// go-control-plane's watches are one-shot. Every response ends a watch and
// the client's ACK opens a new one, so its caches re-register the watch
// under every subscribed name and re-diff them all, on every response and
// every ACK. Measured at 1,000 delta streams × 100 clusters with one
// endpoint flipping (bench S1), that cost 161 ms of server CPU per event
// with go-control-plane's server and LinearCache, about 60 % of it that
// bookkeeping; with this loop about 45–52 ms, the rest being gRPC's own
// per-connection work. The S1 row "server CPU per event" of BENCHMARKS.md
// (`make bench`; harness in bench/, baseline a go-control-plane
// SnapshotCache server) shows it against go-control-plane, and
// bench/analysis.md ("Per-stream push") gives the profile. Here a
// stream's subscription to a type is indexed once per name and persists
// across responses: an update marks only the changed names dirty on
// their subscribers and wakes those streams, which compare only dirty
// names with the versions the client holds; an ACK costs nothing per
// subscribed name. The protocol semantics follow go-control-plane's
// stream.Subscription (legacy and explicit wildcard, initial resource
// versions, SotW full state for LDS, CDS and MCP collections); its types,
// MarshalResource and HashResource are used as they are.
//
// Locks: the store has two lock domains (store.mu for collections, the
// index and subscribed names; one watcher.mu per stream for the work the
// store leaves it) and never touches a stream's own state, which its
// serve lock guards (docs/architecture.md §3.5).
package ads
