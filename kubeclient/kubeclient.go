// Package kubeclient is the Kubernetes client plumbing that the packages
// reading clusters share — the kubernetes registry (registries/kube), the
// Kubernetes config source (istioconfig/crd) and the serviceentry
// registry (registries/serviceentry) — so that none of them imports
// another:
//
//   - connect.go: reaching a cluster — a kubeconfig file and context, or
//     the in-cluster credentials, to a *rest.Config with rate limits and a
//     dialer of its own (Connect, Credentials, OwnConnections), and
//     Connector, what a registry's kind block offers to reach its cluster.
//   - kubeconfig.go: kubeconfigs from Secrets (remote clusters), accepted
//     with inline credentials only (CheckRemoteKubeconfig, RemoteConfig).
//   - tracker.go: informers whose every list and watch call is tracked
//     (Tracker): a failing call, or a watch dropped with an error, is
//     remembered until that informer's next successful call; it is what
//     makes a reader Degraded.
//   - istio.go: reading Istio's networking CRDs (VirtualService,
//     DestinationRule, ServiceEntry, WorkloadEntry) from clusters with
//     tracked informers (IstioWatch): one Part per cluster with its state
//     and its objects.
//
// It imports neither registries nor istioconfig: their packages adapt
// what it returns (docs/architecture.md §3.6).
package kubeclient
