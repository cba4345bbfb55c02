// Package drmerge merges the DestinationRules for one host as Istio's
// pilot does (pilot/pkg/model/destination_rule.go mergeDestinationRule;
// docs/architecture.md §3.6). The config source uses it to report what
// was merged, the translator to build the merged rule: one mechanism, one
// outcome.
package drmerge

import (
	"slices"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/model"
)

// DroppedSubset is a subset of a later rule left out because an older
// rule for the host already defines a subset of that name.
type DroppedSubset struct {
	// Subset is the subset's name.
	Subset string `json:"subset"`
	// Object is the rule whose subset was dropped, "namespace/name".
	Object string `json:"object"`
	// KeptFrom is the older rule whose subset of that name is in force.
	KeptFrom string `json:"keptFrom"`
}

// Result is the merge of the DestinationRules for one host.
type Result struct {
	// Spec is the merged rule. With one rule it is that rule's own spec;
	// otherwise a new message sharing the parts (never modify it).
	Spec *networking.DestinationRule
	// From are the merged rules, oldest first (model.CompareAge).
	From []*model.ConfigObject
	// DroppedSubsets lists subsets left out as duplicates, in merge order.
	DroppedSubsets []DroppedSubset
	// IgnoredPolicies names ("namespace/name") the later rules whose
	// top-level trafficPolicy is not used because an older rule has one.
	IgnoredPolicies []string
}

// Merge merges rules, all DestinationRules for one host without a
// workloadSelector: taken oldest first, the subsets of each are appended
// unless an older rule has a subset of the same name (that subset is
// dropped), and the top-level trafficPolicy is the oldest rule's that
// has one. The host and exportTo are the oldest rule's. rules is not
// modified; an empty rules gives a zero Result.
func Merge(rules []*model.ConfigObject) Result {
	if len(rules) == 0 {
		return Result{}
	}
	from := slices.Clone(rules)
	slices.SortStableFunc(from, model.CompareAge)
	first := spec(from[0])
	if len(from) == 1 {
		return Result{Spec: first, From: from}
	}
	out := &networking.DestinationRule{
		Host:          first.GetHost(),
		TrafficPolicy: first.GetTrafficPolicy(),
		Subsets:       slices.Clone(first.GetSubsets()),
		ExportTo:      first.GetExportTo(),
	}
	r := Result{Spec: out, From: from}
	owner := map[string]string{}
	for _, s := range out.Subsets {
		owner[s.GetName()] = name(from[0])
	}
	for _, o := range from[1:] {
		dr := spec(o)
		for _, s := range dr.GetSubsets() {
			if k, dup := owner[s.GetName()]; dup {
				r.DroppedSubsets = append(r.DroppedSubsets, DroppedSubset{Subset: s.GetName(), Object: name(o), KeptFrom: k})
				continue
			}
			owner[s.GetName()] = name(o)
			out.Subsets = append(out.Subsets, s)
		}
		if tp := dr.GetTrafficPolicy(); tp != nil {
			if out.TrafficPolicy == nil {
				out.TrafficPolicy = tp
			} else {
				r.IgnoredPolicies = append(r.IgnoredPolicies, name(o))
			}
		}
	}
	return r
}

func spec(o *model.ConfigObject) *networking.DestinationRule {
	dr, _ := o.Spec.(*networking.DestinationRule)
	return dr
}

func name(o *model.ConfigObject) string { return o.Namespace + "/" + o.Name }
