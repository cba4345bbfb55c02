// Package chaos is issue 25's proof under chaos: every registry kind at
// once under churn, a seeded fault schedule, and a checker that compares
// what xDS clients held with the truth the churn generator recorded.
//
// What runs (TestChaos): ZooKeeper (Curator and Dubbo layouts), Consul (a
// server agent with a data dir), two kube-apiservers on one etcd (one
// multicluster set), Polaris (Eureka and Nacos APIs), a services file, a
// serviceentry file and a traffic config source (DestinationRules); two
// meshfed replicas of the built binary on the same registries (meshfed-a
// with a state dir and every meshfed fault, meshfed-b never touched); raw
// ADS clients acting as Envoy sidecars (SotW and delta, wildcard CDS and
// LDS, EDS for every cluster, every resource ValidateAll'd and NACKed when
// invalid, state kept across reconnects) and grpc-go proxyless clients
// (child processes holding an xds:/// channel to one service of each
// kind and serving grpc-go's CSDS, google.golang.org/grpc/xds/csds, on a
// loopback port).
//
// The churn generator registers, deregisters and flips the health of
// instances of three services per kind at a steady rate (every address
// used once, so a key has one life), retrying each operation until the
// backend confirms it, and records the truth with its start and
// confirmation times. Polaris' quirks keep two kinds partial (see
// eurekaKind, nacosKind). A backend can lose instances in a fault while
// their clients hold them registered: Polaris deletes, or marks
// unhealthy, Nacos instances across a kill or a hang, which meshfed rightly
// follows. Such a fault is amnesia for the kind (the checker does not
// count its removals until Heal after it ends), and the kind's Restore
// then registers again what the backend lost, as a real client's recovery
// does (nacos: until Polaris lists them all, after restarting a Polaris
// whose push path deadlocked; eureka: re-registration on a 404
// heartbeat), before the fault's window closes. The report counts them
// (restored).
//
// The fault schedule is a seeded shuffle of every fault, cycled, each
// lasting 2–8s, 2–6s apart (CHAOS_SEED replays the sequence; the short
// slice of `make test` uses seed 1 unless CHAOS_SEED is set, `make chaos`
// a new one per run): SIGKILL and
// restart, and SIGSTOP/SIGCONT, of every backend; meshfed-a SIGKILLed and
// warm-restarted from its state dir (also while the state dir is full);
// SIGHUP reloads that edit every registry entry (make-before-break); the
// state dir full or read-only; a bad item per kind (an unusable address, a
// znode or provider URL that does not parse); a broken services,
// serviceentry or rules file; raw clients disconnecting, stalling (not
// reading) and joining; grpc-go clients killed and restarted, or stopped.
// The churn of a kind pauses while its backend is down (nothing can be
// registered) and while convergence after a fault is measured.
//
// The state dir is a 4 MiB tmpfs mounted in an unprivileged user and
// mount namespace (unshare -Urm) that a sleeping process holds; meshfed
// runs inside it (nsenter), the harness fills it with a filler file or
// remounts it read-only. No root, loop device or quota is needed, and the
// host's file systems are not touched.
//
// Bounds (Bounds, per kind, from each kind's design in
// docs/registries/<kind>.md and docs/architecture.md §3): Push is how long
// a confirmed change may take to reach every connected client while
// nothing is down; Heal how long after a fault heals every client must
// hold the truth. Both are generous: a watch or push kind (Consul
// blocking queries, ZooKeeper watches, Kubernetes informers) propagates in
// milliseconds plus meshfed's debounce (≤ 100ms), a file kind after its
// settle time (1s), Eureka after its poll (1s here) and Polaris' refresh,
// Nacos after its push or resync (10s here); Push is 10s (files, watches),
// 20s (Eureka) or 25s (Nacos). Heal adds a registry's restart backoff (up
// to 15s), a reconnect and a full re-read: 30s (files), 45s (Consul,
// ZooKeeper), 60s (Kubernetes: relists after restarts; Polaris). The
// slack is what keeps the short slice in `make test` reliable on a loaded
// 2-core machine: the measured convergence times (CHAOS.md) are two orders
// of magnitude below the bounds; the checker never asserts a wall time
// other than these.
//
// The checker (Check) verifies over the recorded run: no phantom endpoint;
// every change of the truth held by every client within Push, a deadline
// that a fault on the key's registry, on the client's replica or on the
// client itself extends to Heal past the fault's end; no endpoint dropped
// while registered (fail-static), whatever is down. Live, after each fault
// heals, it measures convergence (and fails it past Heal); it counts NACKs
// (raw clients' and meshfed_xds_nacks_total), exits meshfed did not ask
// for, resource slopes (RSS, goroutines, fds from /proc and /metrics) and
// compares the replicas' /debug/digestz at the end. Every violation names
// the seed, the faults near it, the object and its timeline.
//
// The grpc-go clients are judged by the same rules, with their semantics:
// each subscribes to service 0 of every kind (CheckInput.Hosts), so only
// those hosts are due to it, and what it holds is the endpoints of the EDS
// resources in its CSDS dump (an EDS resource gone from the dump, its
// cluster dropped, holds none; CDS, LDS and RDS are not compared). The
// harness polls the dump every 250ms (csdsPoll): an observation lags the
// client by at most that plus the fetch (2s at most), which Push's slack
// absorbs, and a drop shorter than the poll period goes unseen by the
// removed-while-registered rule (the raw clients record every response).
// A killed and restarted child loses what it held: that is recorded as
// forgotten (Obs.Forgot), not removed, and every key still registered must
// be held again by the deadline a change would have (Heal past the
// restart, which lasts until its CSDS shows every target's EDS and no
// resource waiting for its first answer). A stopped child (SIGSTOP) keeps
// what it held and is not polled.
//
// Rule 4's slopes fail the run past limits (report_test.go says how they
// were chosen): RSS 128 MiB/h, goroutines 100/h, open fds 24/h over a
// replica's longest-lived process after its first minute, judged only when
// that spans 10 minutes or more — the 3-minute slice never does, and
// meshfed-a (killed by the schedule) rarely; meshfed-b, never killed, is
// judged in runs of 12 minutes or more.
package chaos
