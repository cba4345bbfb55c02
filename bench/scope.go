package bench

import (
	"fmt"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/model"
)

// The scoped row (SC, docs/architecture.md §3.7): Envoy streams in
// namespaces ns0…ns<n-1>, each namespace with a Sidecar that imports
// `per` services: namespace k imports services k·per … k·per+per-1.

// ScopeNamespace is the namespace of wildcard stream idx among n.
func ScopeNamespace(idx, n int) string { return fmt.Sprintf("ns%d", idx%n) }

// ScopeConfig returns the Sidecars of the scoped row: one per namespace,
// without workloadSelector.
func ScopeConfig(namespaces, per int) *model.ConfigSnapshot {
	var objs []*model.ConfigObject
	for k := range namespaces {
		hosts := make([]string, per)
		for j := range per {
			hosts[j] = "*/" + Host(k*per+j)
		}
		ns := fmt.Sprintf("ns%d", k)
		objs = append(objs, &model.ConfigObject{Kind: "Sidecar", Namespace: ns, Name: "default", Source: "bench",
			Hash: ns, Spec: &networking.Sidecar{Egress: []*networking.IstioEgressListener{{Hosts: hosts}}}})
	}
	return model.NewConfigSnapshot(1, objs)
}

// ScopeWatchers returns the streams (of n, namespaces as ScopeNamespace
// deals them) whose Sidecar imports service svc; nil when none does.
func ScopeWatchers(svc, n, namespaces, per int) []int {
	k := svc / per
	if k >= namespaces {
		return nil
	}
	var out []int
	for i := range n {
		if i%namespaces == k {
			out = append(out, i)
		}
	}
	return out
}

// SetConfig hands the aggregator a config snapshot, as a config source
// does.
func (m *Meshfed) SetConfig(c *model.ConfigSnapshot) { m.agg.SetConfig(c) }
